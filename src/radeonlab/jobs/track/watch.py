"""Watching a job: progress from trainer_log.jsonl, GPU readings, the loss rule, until the job ends.

No terminal code here: `watch()` turns the host's stream (jobs/track/follow.py) into a `Snapshot` after each
change and hands it to a callback; the CLI draws it (a live panel on a terminal, lines or JSON lines
otherwise), the dashboard serves it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from radeonlab.contract.records import Attempt, StateRecord
from radeonlab.jobs.host import metrics
from radeonlab.jobs.host.readings import GpuReading
from radeonlab.jobs.track.follow import FOLLOW, TRAINER_LOG
from radeonlab.jobs.track.handle import JobHandle, RankResult

RESULTS = "output/train_results.json"  # LLaMA-Factory's train metrics, written when training ends


@dataclass
class Snapshot:
    """What is known about a job after one change."""

    job_id: str
    host: str
    state: StateRecord
    progress: metrics.Progress | None
    points: list[metrics.LogPoint]
    warning: metrics.LossWarning | None
    gpus: list[GpuReading] = field(default_factory=list)
    new_points: list[metrics.LogPoint] = field(default_factory=list)
    first_step_after_submit_s: float | None = None  # wall time from job creation to the first logged step
    attempts: list[Attempt] = field(default_factory=list)  # job.json's attempts (remedies add more)
    effective_tokens_per_s: float | None = None  # at the end: LLaMA-Factory's summary, when it wrote one


def _seconds_since(created_at: str | None) -> float | None:
    try:
        created = datetime.strptime(str(created_at), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None
    return (datetime.now(UTC) - created).total_seconds()


def _effective_tps(results: bytes) -> float | None:
    """LLaMA-Factory's `effective_tokens_per_sec` from output/train_results.json (written at the end, with
    include_effective_tokens_per_second on)."""
    try:
        value = json.loads(results).get("effective_tokens_per_sec")
    except (ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, int | float) else None


def watch(
    handle: JobHandle,
    on_snapshot: Callable[[Snapshot], None],
    say: Callable[[str], None],
    interval: float | None = None,
) -> StateRecord:
    """Follow the job until it has finished and its whole trainer log was read; returns the final state."""
    reader = metrics.TrainerLogReader()
    wanted = set(handle.job.gpus)
    gpus: list[GpuReading] = []
    first_step: float | None = None
    files = {TRAINER_LOG: 0, RESULTS: 0}
    results = b""
    for event in handle.events(
        say, files, keep_going=True, gpus_every=FOLLOW["gpus_every_s"], interval=interval
    ):
        new: list[metrics.LogPoint] = []
        if event.kind == "data" and event.file == TRAINER_LOG:
            if event.restarted:
                reader = metrics.TrainerLogReader()
            new = reader.feed(event.data)
            if new and first_step is None:
                first_step = _seconds_since(handle.job.created_at)
        elif event.kind == "data" and event.file == RESULTS:
            results = event.data if event.restarted else results + event.data
        elif event.kind == "gpus":
            gpus = [g for g in event.gpus if not wanted or g.index in wanted]
        elif event.kind not in ("state", "end"):
            continue
        on_snapshot(
            Snapshot(
                job_id=handle.id,
                host=handle.target.name,
                state=handle.state,
                progress=metrics.progress(reader.points),
                points=reader.points,
                warning=metrics.loss_not_falling(reader.points),
                gpus=gpus,
                new_points=new,
                first_step_after_submit_s=first_step,
                attempts=list(handle.job.attempts),
                effective_tokens_per_s=_effective_tps(results),
            )
        )
    if handle.job.peers() and handle.state.state.is_finished():
        wait_for_peers(handle, say)
    handle.cache()
    return handle.state


def wait_for_peers(handle: JobHandle, say: Callable[[str], None], poll_s: float = 1.0) -> list[RankResult]:
    """Rank 0 has ended; torchrun's agents on the other nodes stop seconds later. Wait (up to
    `peers_end_s`) until each has recorded its end, so `watch` returns when the whole job is over; say which
    rank ended otherwise than rank 0, or not at all."""
    deadline = time.monotonic() + FOLLOW["peers_end_s"]
    while True:
        ranks = handle.peer_states()
        waiting = [r for r in ranks if r.state is not None and not r.state.state.is_finished()]
        if not waiting or time.monotonic() > deadline:
            break
        time.sleep(poll_s)
    for rank in ranks:
        where = f"rank {rank.rank} on {rank.host}"
        if rank.error or rank.state is None:
            say(f"{where}: {rank.error or 'no state'}")
        elif not rank.state.state.is_finished():
            say(f"{where} is still {rank.state.state.value} {FOLLOW['peers_end_s']:.0f}s after rank 0 ended")
        elif rank.state.state is not handle.state.state:
            say(f"{where}: {rank.state.summary()}")
    return ranks

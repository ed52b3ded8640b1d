"""Watching a job: progress from trainer_log.jsonl, GPU readings, the loss rule, until the job ends.

No terminal code here: `watch()` hands a `Snapshot` to a callback after every poll; the CLI draws it (a rich
live view on a terminal, one line per new step otherwise).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from radeonlab.jobs.host import metrics
from radeonlab.jobs.host.readings import GpuReading
from radeonlab.jobs.track.follow import FOLLOW, TRAINER_LOG, Link, poll, readings

from radeonlab.contract.records import Attempt, JobPaths, JobRecord, StateRecord


@dataclass
class Snapshot:
    """What is known about a job after one poll."""

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


def _seconds_since(created_at: str | None) -> float | None:
    try:
        created = datetime.strptime(str(created_at), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None
    return (datetime.now(UTC) - created).total_seconds()


def watch(
    link: Link,
    paths: JobPaths,
    job: dict[str, Any],
    host_gpus: list[dict[str, Any]],
    on_snapshot: Callable[[Snapshot], None],
    poll_s: float | None = None,
) -> StateRecord:
    """Poll until the job has finished (and its whole trainer log was read); returns the final state."""
    offsets = {TRAINER_LOG: 0}
    reader = metrics.TrainerLogReader()
    wanted = set(job.get("gpus") or [])
    first_step: float | None = None
    interval = FOLLOW["poll_s"] if poll_s is None else poll_s
    while True:
        result = link.call(lambda r: poll(r, paths, offsets))
        if TRAINER_LOG in result.restarted:
            reader = metrics.TrainerLogReader()
        new = reader.feed(result.chunks[TRAINER_LOG])
        if new and first_step is None:
            first_step = _seconds_since(job.get("created_at"))
        gpus = [g for g in link.call(lambda r: readings(r, host_gpus)) if not wanted or g.index in wanted]
        on_snapshot(
            Snapshot(
                job_id=str(job.get("id")),
                host=link.target.name,
                state=result.state,
                progress=metrics.progress(reader.points),
                points=reader.points,
                warning=metrics.loss_not_falling(reader.points),
                gpus=gpus,
                new_points=new,
                first_step_after_submit_s=first_step,
                attempts=JobRecord.from_dict(result.job).attempts if result.job else [],
            )
        )
        if result.state.state.is_finished() and len(result.chunks[TRAINER_LOG]) < FOLLOW["max_chunk_bytes"]:
            return result.state
        time.sleep(interval)

"""What the dashboard shows, as plain data: a host's row from its probe, a job's view from its stream.

No threads, no web code: `JobView.apply(event)` takes the events of the host's job stream
(jobs/track/follow.py Event: state, data, gpus) and keeps the series the chart draws (step -> loss, learning
rate, tokens/s), the GPU readings, the attempts (remedies) and the log tail; `host_row` turns a probe's
HostView into the fleet table's row. Everything is JSON-ready for the page.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from datetime import UTC, datetime
from typing import Any

from radeonlab.contract.records import JobRecord, StateRecord
from radeonlab.contract.state import JobState
from radeonlab.jobs.fleet.probe import HostView
from radeonlab.jobs.host import metrics
from radeonlab.jobs.host.readings import GpuReading
from radeonlab.jobs.track.follow import TRAIN_LOG, TRAINER_LOG, Event
from radeonlab.units import vram_text

VIEW: dict[str, int] = {
    "log_lines": 40,  # lines of train.log a job view keeps (the page's log tail)
    "log_tail_bytes": 16384,  # where a job's train.log is read from, counted back from its end
}
RESULTS = "output/train_results.json"


def _num(value: float | None) -> float | None:
    """JSON has no NaN/Inf: the page draws a gap there (and the remedies say what happened)."""
    return value if value is not None and math.isfinite(value) else None


def age_s(created_at: str | None, now: datetime | None = None) -> float | None:
    try:
        created = datetime.strptime(str(created_at), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None
    return ((now or datetime.now(UTC)) - created).total_seconds()


def gpu_json(g: GpuReading, names: dict[int, str] | None = None) -> dict[str, Any]:
    return {
        "index": g.index,
        "name": (names or {}).get(g.index),
        "vram_used": g.vram_used,
        "vram_total": g.vram_total,
        "vram_text": vram_text(g.vram_used, g.vram_total),  # the CLI's words (GiB), not the page's own
        "temp_c": g.temp_c,
        "power_w": g.power_w,
        "busy_percent": g.busy_percent,
    }


def host_row(view: HostView) -> dict[str, Any]:
    """The fleet table's row: reachable (or why not), provisioned (or why not), GPUs, running and queued."""
    record = view.raw_record or {}
    names = {int(g["index"]): str(g.get("name")) for g in record.get("gpus") or [] if "index" in g}
    running = [j.id for j in view.live_jobs(JobState.RUNNING)]
    queued = [j.id for j in view.live_jobs(JobState.QUEUED)]
    return {
        "host": view.name,
        "reachable": view.reachable,
        "error": view.error,
        "provisioned": view.provisioned,
        "note": view.note,
        "gpus": [gpu_json(g, names) for g in view.gpus],
        "running": running,
        "queued": queued,
    }


@dataclasses.dataclass
class JobView:
    """One job as the page shows it; fed by its host's stream."""

    id: str
    host: str
    created_at: str | None = None
    name: str = ""
    state: StateRecord = dataclasses.field(default_factory=lambda: StateRecord(JobState.QUEUED))
    alive: bool | None = None
    gpu_indexes: list[int] = dataclasses.field(default_factory=list)
    steps: list[int] = dataclasses.field(default_factory=list)
    loss: list[float | None] = dataclasses.field(default_factory=list)
    lr: list[float | None] = dataclasses.field(default_factory=list)
    tokens_per_s: list[float | None] = dataclasses.field(default_factory=list)
    total_steps: int | None = None
    generation: int = 0  # +1 whenever the series start over (a remedy's fresh start rewrote the log)
    gpus: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    attempts: list[str] = dataclasses.field(default_factory=list)
    log: deque[str] = dataclasses.field(default_factory=lambda: deque(maxlen=VIEW["log_lines"]))
    effective_tokens_per_s: float | None = None
    _reader: metrics.TrainerLogReader = dataclasses.field(default_factory=metrics.TrainerLogReader)
    _log_partial: str = ""
    _results: bytes = b""

    @classmethod
    def of(cls, host: str, job: JobRecord, state: StateRecord, alive: bool | None) -> JobView:
        view = cls(job.id, host, job.created_at, job.name)
        view.set_job(job, state, alive)
        return view

    def set_job(self, job: JobRecord | None, state: StateRecord, alive: bool | None) -> None:
        self.state, self.alive = state, alive
        if job is not None:
            self.gpu_indexes = list(job.gpus)
            self.attempts = [a.line() for a in job.attempts if a.n > 1 or not a.state.is_live()]

    @property
    def finished(self) -> bool:
        return self.state.state.is_finished() and not self.alive

    @property
    def last_loss(self) -> float | None:
        return next((v for v in reversed(self.loss) if v is not None), None)

    def apply(self, event: Event) -> None:
        """Take one event of the job's stream."""
        if event.kind == "state" and event.state is not None:
            self.set_job(event.job, event.state, event.alive)
        elif event.kind == "gpus":
            wanted = set(self.gpu_indexes)
            self.gpus = [gpu_json(g) for g in event.gpus if not wanted or g.index in wanted]
        elif event.kind == "data" and event.file == TRAINER_LOG:
            if event.restarted:
                self._reader = metrics.TrainerLogReader()
                self.steps, self.loss, self.lr, self.tokens_per_s = [], [], [], []
                self.generation += 1
            for p in self._reader.feed(event.data):
                self.add_point(p)
        elif event.kind == "data" and event.file == TRAIN_LOG:
            self.add_log(event.data.decode("utf-8", "replace"), event.restarted)
        elif event.kind == "data" and event.file == RESULTS:
            self._results = event.data if event.restarted else self._results + event.data
            self.effective_tokens_per_s = _effective(self._results)

    def add_point(self, p: metrics.LogPoint) -> None:
        self.total_steps = p.total_steps or self.total_steps
        if p.loss is None:  # the summary line at the end: no new point on the chart
            return
        self.steps.append(p.step)
        self.loss.append(p.loss if not math.isnan(p.loss) else None)
        self.lr.append(_num(p.lr))
        self.tokens_per_s.append(_num(metrics.tokens_per_second(p)))

    def add_log(self, text: str, restarted: bool) -> None:
        if restarted:
            self.log.clear()
            self._log_partial = ""
        # progress bars rewrite their line with \r: keep what a terminal would show last
        lines = (self._log_partial + text).split("\n")
        self._log_partial = lines.pop()
        for line in lines:
            shown = line.rsplit("\r", 1)[-1].rstrip()
            if shown:
                self.log.append(shown)

    def summary(self, now: datetime | None = None) -> dict[str, Any]:
        """The jobs list's row."""
        return {
            "id": self.id,
            "host": self.host,
            "name": self.name,
            "state": self.state.state.value,
            "reason": self.state.reason,
            "alive": self.alive,
            "age_s": age_s(self.created_at, now),
            "last_loss": _num(self.last_loss),
            "step": self.steps[-1] if self.steps else None,
            "total_steps": self.total_steps,
        }

    def detail(self, since: int = 0) -> dict[str, Any]:
        """The job's panel: the points from index `since` on, the readings, the attempts and the log."""
        return {
            **self.summary(),
            "generation": self.generation,
            "since": since,
            "steps": self.steps[since:],
            "loss": [_num(v) for v in self.loss[since:]],
            "lr": self.lr[since:],
            "tokens_per_s": self.tokens_per_s[since:],
            "points": len(self.steps),
            "gpus": self.gpus,
            "attempts": self.attempts,
            "log": list(self.log),
            "effective_tokens_per_s": self.effective_tokens_per_s,
        }


def _effective(results: bytes) -> float | None:
    import json

    try:
        value = json.loads(results).get("effective_tokens_per_sec")
    except (ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, int | float) else None

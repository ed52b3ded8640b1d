"""The host-side job record: the job folder's layout, job.json and state.json (see CONTRACTS.md).

Plain dataclasses with to_dict/from_dict so the transport can move them as JSON text. from_dict ignores
unknown keys: a newer laptop and an older host (or the reverse) still understand each other.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import PurePosixPath
from typing import Any

from radeonlab.contract.state import JobState

# File names inside <jobs_dir>/<job_id>/; the launcher script (stdlib only) repeats the ones it uses.
JOB_FILES: dict[str, str] = {
    "job": "job.json",
    "state": "state.json",
    "config": "config.yaml",
    "train_log": "train.log",
    "env_secret": "env.secret",
    "cancel_marker": "cancel.requested",
    "launcher": "launcher.py",
    "config_json": "config.json",  # the first attempt's config as JSON: the host has no YAML parser
    "host_code": "host",  # the supervisor and the pure modules it imports (jobs/apply/bundle.py)
    "data": "data",
    "model": "model",
    "output": "output",
    "cache": "cache",
}
ADAPTER_FILES: tuple[str, ...] = ("adapter_model.safetensors", "adapter_model.bin")


@dataclass(frozen=True)
class JobPaths:
    """Absolute POSIX paths of one job's folder on its host."""

    root: PurePosixPath

    @classmethod
    def for_job(cls, jobs_dir: str, job_id: str) -> JobPaths:
        """The paths of `job_id` under the host record's jobs_dir."""
        return cls(PurePosixPath(jobs_dir) / job_id)

    def __getattr__(self, key: str) -> PurePosixPath:
        # job.json, state.json, data/, output/, ... as attributes: paths.state, paths.output
        if key in JOB_FILES:
            return self.root / JOB_FILES[key]
        raise AttributeError(key)

    @property
    def locks_dir(self) -> PurePosixPath:
        """<jobs_dir>/../locks: one flock file per GPU index, shared by every job on the host."""
        return self.root.parent.parent / "locks"


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


@dataclass
class Attempt:
    """One run of a job: the first, or a retry (e.g. a remedy resuming from a checkpoint).

    overrides: the keys this attempt set (new values; the config run = the first attempt's config with every
    attempt's overrides applied in order); changes: the same keys as key -> [old, new]; cause: why it was
    made ("NaN at step 3"); the rest is filled in by the host-side supervisor when the attempt ends.
    """

    n: int
    created_at: str
    overrides: dict[str, Any] = field(default_factory=dict)
    resume_from_checkpoint: str | None = None
    note: str = ""
    changes: dict[str, list[Any]] = field(default_factory=dict)
    cause: str = ""
    state: str = ""  # running | succeeded | failed | stopped (NaN) | cancelled
    exit_code: int | None = None
    ended_at: str | None = None
    reason: str | None = None
    first_step: int | None = None  # the first and last step this attempt logged
    last_step: int | None = None


def attempt_line(attempt: Attempt) -> str:
    """One line for status: "attempt 2: flash_attn auto -> disabled (NaN at step 3), fresh start"."""
    changed = ", ".join(f"{k} {old} -> {new}" for k, (old, new) in attempt.changes.items())
    if not changed:
        changed = "first run" if attempt.n == 1 and not attempt.cause else "nothing changed"
    text = f"attempt {attempt.n}: {changed}" + (f" ({attempt.cause})" if attempt.cause else "")
    if attempt.resume_from_checkpoint:
        text += f", from {attempt.resume_from_checkpoint.rstrip('/').rsplit('/', 1)[-1]}"
    elif attempt.n > 1:
        text += ", fresh start"
    if attempt.state and attempt.state != "running":
        text += f": {attempt.state}"
        if attempt.reason and attempt.state != "succeeded":
            text += f" - {attempt.reason}"
    return text


@dataclass
class JobRecord:
    """job.json: what the laptop submitted."""

    id: str
    name: str
    spec_file: str
    created_at: str
    host: str
    gpus: list[int] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # non-secret env from the spec
    secret_names: list[str] = field(default_factory=list)  # sent in env.secret: names only, never values
    attempts: list[Attempt] = field(default_factory=list)
    remedies: dict[str, dict[str, Any]] = field(
        default_factory=dict
    )  # {nan: {enabled, steps}}, from the spec
    limits: dict[str, float] = field(default_factory=dict)  # spec limits, e.g. {"address_space_gb": 4}
    vram_total: int | None = None  # the job's card, from the host record (named in OOM reports)
    result: dict[str, Any] = field(default_factory=dict)  # which attempt and settings made the adapter
    report: str = ""  # the supervisor's give-up report when no remedy was left

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobRecord:
        """Parse job.json; a single "gpu" index (older form) becomes gpus=[index]."""
        data = dict(data)
        if "gpus" not in data and isinstance(data.get("gpu"), int):
            data["gpus"] = [data["gpu"]]
        rec = cls(**_known(cls, data))
        rec.attempts = [a if isinstance(a, Attempt) else Attempt(**_known(Attempt, a)) for a in rec.attempts]
        return rec


@dataclass
class StateRecord:
    """state.json: written atomically by the launcher (and by `cancel` when the launcher is gone)."""

    state: JobState
    pid: int | None = None  # the launcher
    child_pid: int | None = None  # llamafactory-cli
    pgid: int | None = None  # the child's process group: what cancel kills
    exit_code: int | None = None
    started_at: str | None = None
    ended_at: str | None = None
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (state as its string value)."""
        return {**asdict(self), "state": self.state.value}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StateRecord:
        """Parse state.json."""
        known = _known(cls, data)
        known["state"] = JobState(known.get("state", "queued"))
        return cls(**known)

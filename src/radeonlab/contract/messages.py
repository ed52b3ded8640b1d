"""The laptop <-> host messages of a job's start: the stage request (JSON on the stdin of
`python3 -m radeonlab.jobs.host.stage`) and its answer, typed to their leaves; and a job as the host's probe
summarises it (`python3 -m radeonlab.jobs.host.probe --jobs`).

The laptop writes them (jobs/apply/submit.py for submit, jobs/track/resume.py for resume); the host reads the
request and writes the answer (jobs/host/stage.py). Both sides run the same shipped code (the job's code
digest), so the JSON is the dataclasses' own, field for field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from radeonlab.contract.parts import JsonValue, known
from radeonlab.contract.records import JobRecord, StateRecord

START_WAIT_S = 15.0  # how long stage waits for a new launcher to record its start (or its refusal)


@dataclass(frozen=True)
class BlobLink:
    """A hard link from the host's content store into the job folder."""

    sha256: str
    dest: str  # relative to the job folder


@dataclass
class LaunchOptions:
    """Start the launcher (jobs/host/launcher.py `run`) once the folder is staged."""

    venv: str
    allow_shared: bool = False  # a GPU another job holds may be shared
    queue: bool = True  # wait in the host's per-GPU queue (False: a multi-node rank, or under Slurm)
    resume: bool = False
    resume_max_step: int | None = None  # from a checkpoint no newer than this step (every rank holds it)


@dataclass
class StageRequest:
    """Make a job folder ready and, with `launch`, start its launcher: one round trip. Every part but
    job_dir optional."""

    job_dir: str  # created 0750 when missing
    blobs: str = ""  # the content store (<jobs_dir>/../blobs) the links come from
    links: list[BlobLink] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)  # relative path -> text: config.yaml, ...
    code: str = ""  # a folder (under the SSH user's home) of radeonlab's host code: copied into <job>/host
    job: dict[str, JsonValue] | None = None  # job.json (written last: the scanner skips a folder without it)
    job_update: dict[str, JsonValue] = field(default_factory=dict)  # keys merged into job.json (resume)
    secret: dict[str, str] | None = None  # written to env.secret (0600); the launcher reads and deletes it
    launch: LaunchOptions | None = None
    wait_s: float = START_WAIT_S

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StageRequest:
        values = known(cls, data)
        values["links"] = [BlobLink(**known(BlobLink, link)) for link in data.get("links") or []]
        launch = data.get("launch")
        values["launch"] = LaunchOptions(**known(LaunchOptions, launch)) if launch else None
        return cls(**values)


@dataclass
class StageAnswer:
    """What stage prints: state.json once the new launcher wrote it (or the wait ended), and whether the
    job's processes are alive (None: stage could not tell)."""

    state: StateRecord
    alive: bool | None = None

    def to_json(self) -> str:
        return json.dumps({"state": self.state.to_dict(), "alive": self.alive})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StageAnswer:
        return cls(StateRecord.from_dict(data.get("state") or {}), data.get("alive"))


@dataclass(frozen=True)
class JobProgress:
    """The latest logged step of a job's trainer log (the probe's `full` summary)."""

    step: int | None = None
    total_steps: int | None = None
    loss: float | None = None  # None also for a NaN/Inf loss (JSON has no NaN)


@dataclass
class ProbeJob:
    """One job as the host's probe summarises it (jobs/host/probe.py `job_summary` writes these keys): what
    fleet, placement and the queue need; `--jobs full` adds the job record, its progress and how long it has
    run (`radeonlab list`, the job handle, the dashboard). `state` is state.json as written; `alive` whether
    its launcher or training still runs."""

    id: str
    state: StateRecord
    alive: bool
    gpus: list[int] = field(default_factory=list)
    created_at: str | None = None
    name: str | None = None
    rank: int = 0
    job: JobRecord | None = None  # full only
    progress: JobProgress | None = None  # full only (None before the first logged step)
    duration_s: float | None = None  # full only (None while it waits in line)

    def reconciled(self) -> StateRecord:
        """Its state as the laptop reads it: a live state whose processes are gone reads as ended."""
        return self.state.reconciled(self.alive)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProbeJob:
        job, progress = data.get("job"), data.get("progress")
        return cls(
            id=str(data["id"]),
            state=StateRecord.from_dict(data.get("state") or {}),
            alive=bool(data.get("alive")),
            gpus=[int(g) for g in data.get("gpus") or []],
            created_at=data.get("created_at"),
            name=data.get("name"),
            rank=int(data.get("rank") or 0),
            job=JobRecord.from_dict(job) if isinstance(job, Mapping) else None,
            progress=JobProgress(**known(JobProgress, progress)) if progress else None,
            duration_s=data.get("duration_s"),
        )

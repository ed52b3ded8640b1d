"""The typed records both sides share: the host record, job.json and state.json.

Plain dataclasses with to_dict/from_dict so they travel as JSON. from_dict ignores unknown keys (a newer
laptop and an older host, or the reverse, still understand each other) and JobRecord keeps them in `extra`,
so a host-side writer never drops what the laptop wrote. The deploy (roles/verify) writes the host record
through HostRecord; the job runner reads it back through the same type.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

from radeonlab.contract.jobdir import JobDir, blobs_dir
from radeonlab.contract.parts import (
    CodeDigest,
    Export,
    JsonValue,
    ModelRef,
    Nodes,
    Result,
    RocmInfo,
    Scalar,
    SlurmInfo,
    TorchInfo,
)
from radeonlab.contract.remedy import Remedy
from radeonlab.contract.state import AttemptState, EndReason, JobState

HOST_RECORD_PATH = "/etc/radeonlab/host.json"
# Defaults the roles write and host-side advice names (roles/gpu_env, roles/access use these values).
GPU_ENV_FILE = "/etc/profile.d/radeonlab-gpu.sh"
GPU_GROUPS = ("video", "render")  # the groups that own /dev/kfd and /dev/dri/* on Ubuntu/Debian (udev)
HOST_RECORD_SCHEMA = 2  # 2: typed GPUs with usable memory, the venv's packages, the model cache
GIB, GB = 2**30, 10**9


def _known(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


# --------------------------------------------------------------------------------------------- the host


# The start of unusable()'s reason for a host provisioned with a runtime its record cannot run jobs in.
RUNTIME_NO_JOBS_YET = "provisioned with radeonlab_runtime: "
RUNTIMES = ("venv", "container")


@dataclass
class GpuRecord:
    """One GPU as the deploy found it (KFD + drm sysfs), judged for the ROCm and torch it installed."""

    index: int  # the ROCr device index (what HIP_VISIBLE_DEVICES counts)
    gfx: str | None = None
    name: str | None = None
    node: int | None = None  # KFD topology node (readings map onto the record by it)
    device_id: int | None = None  # PCI id: is the card still the one recorded?
    revision: int | None = None
    family: str | None = None  # RDNA2, RDNA3, ...
    vram_total: int | None = None
    vram_used: int | None = None
    gtt_total: int | None = None  # system memory the GPU may map (an APU trains in it)
    usable_memory: int | None = None  # what training may use: VRAM, or carve-out + GTT on a large APU
    bf16: bool = False
    override: str | None = None  # HSA_OVERRIDE_GFX_VERSION the profile.d file exports for it
    igpu: bool = False  # a small integrated GPU: never chosen for training

    @property
    def memory(self) -> int:
        """The memory budget of a job on this GPU."""
        return int(self.usable_memory or self.vram_total or 0)

    def label(self) -> str:
        """'GPU 0 Radeon RX 6700 XT (gfx1031, RDNA2)' for messages and headers."""
        family = f", {self.family}" if self.family else ""
        return f"GPU {self.index} {self.name or 'unnamed card'} ({self.gfx or '?'}{family})"


@dataclass
class HostRecord:
    """/etc/radeonlab/host.json: what provisioning made of a workstation, for the job runner."""

    host: str
    user: str
    venv: str
    jobs_dir: str
    schema: int = HOST_RECORD_SCHEMA
    written_at: str = ""
    radeonlab_version: str = ""
    home: str = ""
    cpu_only: bool = False
    rocm: RocmInfo = field(default_factory=RocmInfo)
    torch: TorchInfo = field(default_factory=TorchInfo)
    llamafactory_version: str | None = None
    gpus: list[GpuRecord] = field(default_factory=list)
    packages: dict[str, str] = field(default_factory=dict)  # the venv's distributions: name -> version
    model_cache: str = ""  # the Hub cache every job of the host shares (HF_HUB_CACHE)
    gpu_env_file: str = GPU_ENV_FILE  # named in GPU-fault advice
    access_groups: list[str] = field(default_factory=lambda: list(GPU_GROUPS))
    problem: str | None = None  # the deploy's verification failed: why (the host is then not usable)
    systemd: bool = False  # systemd is the host's init (cgroup memory limits: limits.memory_gb)
    # The runtime the stack was checked in and jobs run in: "venv", or "container" (issue 29): `image` is the
    # image jobs run in (the training image built on the host, by its own tag) and `image_digest` its digest;
    # `base_image` and `base_image_digest` name AMD's ROCm PyTorch image it was built from, as pulled.
    # container_command: how the training user's own engine starts it for a job ("podman", "run", AMD's
    # --device ... options as rootless Podman takes them), to which the job runner adds the job's mounts,
    # environment names, the image and the program (jobs/host/runtime.py).
    runtime: str = "venv"
    image: str = ""
    image_digest: str = ""
    base_image: str = ""
    base_image_digest: str = ""
    container_command: list[str] = field(default_factory=list)
    container_problem: str | None = None  # why the training user's engine cannot start the image (no jobs)

    REQUIRED = ("host", "user", "venv", "jobs_dir")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HostRecord:
        known = _known(cls, data)
        known["gpus"] = [
            g if isinstance(g, GpuRecord) else GpuRecord(**_known(GpuRecord, g))
            for g in known.get("gpus") or []
        ]
        for name, part in (("rocm", RocmInfo), ("torch", TorchInfo)):
            value = known.get(name) or {}
            known[name] = value if isinstance(value, part) else part.from_dict(value)
        return cls(**known)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def unusable(self) -> str | None:
        """Why this record cannot be used (an old schema, a missing field), or None."""
        if self.schema != HOST_RECORD_SCHEMA:
            return f"host record schema {self.schema!r}, this radeonlab reads schema {HOST_RECORD_SCHEMA}"
        missing = [k for k in self.REQUIRED if not getattr(self, k)]
        if missing:
            return f"host record lacks {', '.join(missing)}"
        if self.problem:
            return f"verification failed: {self.problem}"
        if self.runtime not in RUNTIMES:  # a newer deploy's runtime: this job runner cannot start it
            return f"{RUNTIME_NO_JOBS_YET}{self.runtime}: this radeonlab runs jobs in {' or '.join(RUNTIMES)}"
        if self.runtime == "container" and self.container_problem:  # the stack is fine, jobs cannot start
            return f"{RUNTIME_NO_JOBS_YET}container: {self.container_problem}"
        if self.runtime == "container" and not (self.image and self.container_command):
            # a record from before jobs ran in the container (issue 29's first slice): re-run the deploy
            return "host record of a container host names no image or container command"
        return None

    def training_gpus(self, wanted: Sequence[int] | None = None) -> list[GpuRecord]:
        """The GPUs a job uses: `wanted` indexes, else the first one that is not a small iGPU."""
        if wanted is None:
            discrete = [g for g in self.gpus if not g.igpu]
            return (discrete or self.gpus)[:1]
        by_index = {g.index: g for g in self.gpus}
        missing = [i for i in wanted if i not in by_index]
        if missing:
            raise ValueError(f"host {self.host} has no GPU index {missing[0]} (it has {sorted(by_index)})")
        return [by_index[i] for i in wanted]

    @property
    def cpu_torch(self) -> bool:
        """torch here has neither HIP nor CUDA: it trains on the CPU."""
        return self.torch.cpu_build

    @property
    def blobs_dir(self) -> str:
        return blobs_dir(self.jobs_dir)

    def job_dir(self, job_id: str) -> JobDir:
        return JobDir.of(self.jobs_dir, job_id)


# ------------------------------------------------------------------------------------------------ a job


# The note a remedy's attempt carries: "remedy oom/halve_batch: <diagnosis>; ..." (jobs/host/remedies.py).
# Only for job.json files written before Attempt.ladder/step existed: a new remedy attempt records both.
REMEDY_NOTE = re.compile(r"^remedy (?P<ladder>\w+)/(?P<step>\w+):")


@dataclass
class Attempt:
    """One run of a job: the first, or a retry (a remedy, a resume).

    overrides: the keys this attempt set (the config run = the first attempt's config with every attempt's
    overrides applied in order); env: environment this attempt adds (a remedy's TORCH_BLAS_PREFER_HIPBLASLT);
    changes: the same keys as key -> [old, new]; cause: why it was made ("NaN at step 3"); the rest is filled
    in by the host-side supervisor when the attempt ends."""

    n: int
    created_at: str
    overrides: dict[str, Scalar] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    resume_from_checkpoint: str | None = None
    note: str = ""
    changes: dict[str, list[Scalar]] = field(default_factory=dict)
    cause: str = ""
    ladder: str | None = None  # a remedy's attempt: its ladder and step ("oom", "halve_batch")
    step: str | None = None
    state: AttemptState = AttemptState.PENDING
    exit_code: int | None = None
    ended_at: str | None = None
    reason: str | None = None
    first_step: int | None = None  # the first and last step this attempt logged
    last_step: int | None = None

    def __post_init__(self) -> None:
        self.state = AttemptState(self.state)  # job.json holds the value

    def remedy(self) -> tuple[str, str] | None:
        """(ladder, step) of a remedy's attempt ("oom", "halve_batch"); None for a first run or a resume."""
        if self.ladder and self.step:
            return (self.ladder, self.step)
        m = REMEDY_NOTE.match(self.note or "")  # a job.json from before the fields: the note's prefix
        return (m["ladder"], m["step"]) if m else None

    def start_line(self) -> str:
        """The marker where a later attempt begins: "attempt 2 (remedy: oom -> halve_batch) starting"."""
        remedy = self.remedy()
        if remedy:
            why = f"remedy: {remedy[0]} -> {remedy[1]}"
        elif self.resume_from_checkpoint:
            why = f"resume from {self.resume_from_checkpoint.rstrip('/').rsplit('/', 1)[-1]}"
        else:
            why = "resume, fresh start" if (self.note or "").startswith("resume") else "retry"
        return f"attempt {self.n} ({why}) starting"

    def line(self) -> str:
        """One line: "attempt 2: flash_attn auto -> disabled (NaN at step 3), fresh start: succeeded"."""
        changed = ", ".join(f"{k} {old} -> {new}" for k, (old, new) in self.changes.items())
        if not changed:
            changed = "first run" if self.n == 1 and not self.cause else "nothing changed"
        text = f"attempt {self.n}: {changed}" + (f" ({self.cause})" if self.cause else "")
        if self.resume_from_checkpoint:
            text += f", from {self.resume_from_checkpoint.rstrip('/').rsplit('/', 1)[-1]}"
        elif self.n > 1:
            text += ", fresh start"
        if not self.state.is_live():
            text += f": {self.state.value}"
            if self.reason and self.state is not AttemptState.SUCCEEDED:
                text += f" - {self.reason}"
        return text


@dataclass
class JobRecord:
    """job.json: what the laptop submitted, and what the host-side supervisor adds as the job runs."""

    id: str
    name: str
    spec_file: str
    created_at: str
    host: str
    gpus: list[int] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # non-secret environment from the spec
    secret_names: list[str] = field(default_factory=list)  # sent in env.secret: names only, never values
    attempts: list[Attempt] = field(default_factory=list)
    remedies: dict[str, Remedy] = field(default_factory=dict)  # the spec's switches: {nan: {enabled, steps}}
    limits: dict[str, float] = field(default_factory=dict)  # spec limits, e.g. {"address_space_gb": 4}
    memory_total: int | None = None  # the job's GPU memory (named in OOM reports)
    lf_defaults: dict[str, Scalar] = field(default_factory=dict)  # LLaMA-Factory defaults the remedies read
    overrides: dict[str, Scalar] = field(default_factory=dict)  # `submit SPEC key=value` (a sweep's values)
    model: ModelRef | None = None  # the exact base model (job.json: {} when none was recorded)
    nodes: Nodes | None = None  # a multi-node job's rank and peers (job.json: {} for a single-node job)
    slurm: SlurmInfo | None = None  # a job submitted through Slurm (radeonlab_scheduler: slurm)
    code: CodeDigest | None = None  # radeonlab's host code shipped with the job
    result: Result | None = None  # which attempt and settings made the adapter (once one did)
    report: str = ""  # the supervisor's give-up report when no remedy was left
    exports: list[Export] = field(default_factory=list)  # merged models from `radeonlab export`
    # Where the launcher ran it (the host record's, written at start): "venv", or "container" with the image
    # and its manifest digest. "" on a job.json from before the field (those ran in the venv).
    runtime: str = ""
    image: str = ""
    image_digest: str = ""
    extra: dict[str, JsonValue] = field(default_factory=dict)  # keys this version does not know, kept as is

    RUNTIME_FIELDS: ClassVar[tuple[str, ...]] = ("runtime", "image", "image_digest")
    # the parts job.json has always written as {} when absent
    OPTIONAL_PARTS: ClassVar[dict[str, type[ModelRef | CodeDigest | Result | SlurmInfo | Nodes]]] = {
        "model": ModelRef,
        "nodes": Nodes,
        "code": CodeDigest,
        "result": Result,
        "slurm": SlurmInfo,
    }

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for name in self.OPTIONAL_PARTS:
            data[name] = data[name] or {}
        data["slurm"] = self.slurm.to_dict() if self.slurm else {}
        for name in self.RUNTIME_FIELDS:  # written once the launcher knows: an older job.json stays as it was
            if not data[name]:
                del data[name]
        return {**data.pop("extra"), **data}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobRecord:
        known = _known(cls, data)
        known["extra"] = {k: v for k, v in data.items() if k not in known and k != "extra"}
        for name, part in cls.OPTIONAL_PARTS.items():
            value = known.get(name)
            known[name] = part.from_dict(value) if isinstance(value, Mapping) and value else None
        known["exports"] = [Export.from_dict(e) for e in known.get("exports") or []]
        known["remedies"] = {k: Remedy.from_dict(r) for k, r in (known.get("remedies") or {}).items()}
        rec = cls(**known)
        rec.attempts = [a if isinstance(a, Attempt) else Attempt(**_known(Attempt, a)) for a in rec.attempts]
        return rec

    @property
    def rank(self) -> int:
        """This copy's node rank (0 for a single-node job)."""
        return self.nodes.rank if self.nodes else 0

    def peers(self) -> list[tuple[int, str]]:
        """(rank, host) of a multi-node job's other ranks; [] for a single-node job."""
        return [(p.rank, p.host) for p in (self.nodes.peers if self.nodes else []) if p.rank != self.rank]


@dataclass
class StateRecord:
    """state.json: written atomically by the launcher (and by `cancel` when no launcher is left)."""

    state: JobState
    pid: int | None = None  # the launcher
    pid_start: int | None = None  # its start time (clock ticks since boot): pid reuse cannot fake it
    child_pid: int | None = None  # llamafactory-cli
    child_start: int | None = None
    pgid: int | None = None  # the child's process group: what cancel kills
    exit_code: int | None = None
    started_at: str | None = None
    ended_at: str | None = None
    end: str | None = None  # an EndReason value once the job has ended
    reason: str | None = None  # the detail: the error line, the signal, the file
    attempt: int | None = None
    queued_since: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "state": self.state.value}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StateRecord:
        known = _known(cls, data)
        known["state"] = JobState(known.get("state") or "queued")
        return cls(**known)

    @property
    def end_reason(self) -> EndReason | None:
        try:
            return EndReason(self.end) if self.end else None
        except ValueError:
            return None

    def summary(self) -> str:
        """`failed (training failed: exit 1: ValueError ...)` for one line of output."""
        why = self.reason or (self.end_reason.message if self.end_reason else "")
        return self.state.value + (f" ({why})" if why else "")

    def reconciled(self, alive: bool | None, ended_at: str | None = None) -> StateRecord:
        """What the job really is: one that says running (or waits in line with a launcher) but has no live
        process died without recording it (host rebooted, launcher killed by SIGKILL)."""
        waiting = self.state is JobState.QUEUED and self.pid is not None
        if alive is False and (self.state is JobState.RUNNING or waiting):
            gone = EndReason.PROCESS_GONE
            fields_ = {**asdict(self), "state": gone.state, "end": gone.value, "reason": gone.message}
            fields_["ended_at"] = self.ended_at or ended_at
            return StateRecord(**fields_)
        return self

"""The nested parts of job.json and host.json, each typed to its leaves (records.py's JobRecord and
HostRecord hold them).

Each reads the JSON today's code writes (from_dict ignores keys it does not know, so a newer writer's extra
keys do not break an older reader), and JobRecord writes them back as the same JSON objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

# One LLaMA-Factory setting's value as job.json holds it (learning_rate 5e-05, flash_attn "auto", a remedy's
# environment variable unset: None).
Scalar = str | int | float | bool | None
# Any JSON value: what job.json's `extra` keeps of keys a newer radeonlab wrote, as they are.
JsonValue = str | int | float | bool | None | list["JsonValue"] | dict[str, "JsonValue"]


def known(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of `data` that are fields of the dataclass `cls`."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


@dataclass
class ModelRef:
    """job.json `model`: the exact base model the adapter was trained on (jobs/plan/model.py writes it)."""

    name: str = ""
    revision: str | None = None
    sha: str | None = None  # the Hub commit the revision resolved to
    local: bool = True  # uploaded with the job or on the host: the supervisor pulls only a Hub model
    host_dir: str | None = None  # a model folder on the host itself
    endpoint: str | None = None  # the Hub endpoint it was resolved against

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelRef:
        return cls(**known(cls, data))


@dataclass
class CodeDigest:
    """job.json `code`: radeonlab's host code shipped with the job (jobs/ssh/hostcode.py), checked before
    each start (jobs/host/codecheck.py)."""

    digest: str = ""
    files: dict[str, str] = field(default_factory=dict)  # path under the code folder -> sha256

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CodeDigest:
        return cls(**known(cls, data))


@dataclass
class Result:
    """job.json `result`: which attempt made the adapter, with which settings over the first config."""

    attempt: int
    settings: dict[str, Scalar] = field(default_factory=dict)
    resumed_from: str | None = None  # the checkpoint that attempt started from
    config: str = "config.yaml"
    summary: str = ""  # the attempt's line

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Result:
        return cls(**known(cls, data))


@dataclass
class Export:
    """One entry of job.json `exports`: a merged model `radeonlab export` made (jobs/host/export.py)."""

    name: str
    dir: str  # the merged model's folder (jobs/host/export.py EXPORT_DIR/<name>)
    merged: bool = True
    quantize: int | None = None  # bits, when quantized
    created_at: str = ""
    base_model: ModelRef = field(default_factory=ModelRef)
    adapter: str = ""  # the adapter folder it merged
    files: int = 0
    bytes: int = 0
    cleared: list[str] = field(default_factory=list)  # leftovers of dead earlier exports it removed

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Export:
        values = known(cls, data)
        values["base_model"] = ModelRef.from_dict(data.get("base_model") or {})
        return cls(**values)


@dataclass(frozen=True)
class Peer:
    """One rank of a multi-node job: its inventory host and the address the other ranks reach it at."""

    rank: int
    host: str
    address: str = ""


@dataclass
class Nodes:
    """job.json `nodes` of a multi-node job: this copy's rank and every peer (jobs/plan/nodes.py writes it at
    submit; under Slurm each rank writes its own at start, jobs/host/launcher.py)."""

    rank: int = 0
    world_size: int = 1
    master: str = ""  # rank 0's inventory host
    master_addr: str = ""
    master_port: int = 0
    peers: list[Peer] = field(default_factory=list)
    slurm_job_id: str = ""  # a rank Slurm started: its allocation
    slurm_node: str = ""  # and the Slurm node name it runs on

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Nodes:
        values = known(cls, data)
        values["peers"] = [Peer(**known(Peer, p)) for p in data.get("peers") or []]
        return cls(**values)


@dataclass
class SlurmNode:
    """One candidate node of a Slurm job: its inventory host and the address its peers reach it at."""

    host: str
    address: str


@dataclass
class SlurmInfo:
    """job.json `slurm` of a job submitted through Slurm (jobs/apply/slurm.py writes it; jobs/track/slurm.py
    and the launcher read it)."""

    controller: str = ""
    candidates: list[str] = field(default_factory=list)  # the hosts it was staged on
    nodes: dict[str, SlurmNode] = field(default_factory=dict)  # Slurm node name -> its candidate
    job_id: str | None = None  # once sbatch answered

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SlurmInfo:
        values = known(cls, data)
        values["nodes"] = {k: SlurmNode(**known(SlurmNode, v)) for k, v in (data.get("nodes") or {}).items()}
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """As job.json has it: no job_id until sbatch answered."""
        data = asdict(self)
        if self.job_id is None:
            del data["job_id"]
        return data


# ------------------------------------------------------------------------------------- host.json's parts


@dataclass
class RocmInfo:
    """host.json `rocm`: the ROCm the deploy asked for and what it found installed (roles/verify)."""

    stream: str | None = None  # the inventory's rocm_stream
    version: str | None = None  # the inventory's rocm_version
    installed: str | None = None  # the installed ROCm's version file (None: not installed)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RocmInfo:
        return cls(**known(cls, data))


@dataclass
class TorchInfo:
    """host.json `torch`: the venv's torch as the deploy's stack check found it (roles/verify)."""

    version: str | None = None
    hip: str | None = None  # torch.version.hip (None: not a ROCm build)
    cuda_available: bool = False  # torch.cuda.is_available(): it sees a GPU
    cpu_build: bool = False  # neither HIP nor CUDA: it trains on the CPU
    cpu_allowed: bool = False  # the inventory allows training on the CPU (python_stack_allow_cpu_torch)
    source: str = ""  # "amd" (AMD's multi-arch wheels) | "pytorch" (PyTorch's own ROCm wheels)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TorchInfo:
        return cls(**known(cls, data))

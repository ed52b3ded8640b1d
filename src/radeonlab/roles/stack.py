"""The stack choice of one host: which ROCm release, which torch (wheel source, the ROCm its wheels carry,
version) and which GPU targets it trains on. Computed once per host by the composition
(radeonlab/deploy/stack.py, from the host's GPU facts and its inventory data) and passed to every role that
installs or checks part of the stack, so no role recomputes it or reads another role's DEFAULTS.

Shared by the roles like privilege.py: it imports only the one GPU table (roles/gpu), never a role's
defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from radeonlab.roles.gpu.cards import Gpu
from radeonlab.roles.gpu.table import wheel_targets

SOURCE_NAMES = {"amd": "AMD's multi-arch wheels", "pytorch": "download.pytorch.org's ROCm wheels"}


@dataclass(frozen=True)
class TorchBuild:
    """The torch the host trains with: its source and ROCm release (what its wheels carry code for)."""

    source: str  # "amd" | "pytorch"
    rocm_version: str
    torch_version: str = ""

    @property
    def label(self) -> str:
        version = f"torch {self.torch_version} " if self.torch_version else "torch "
        return f"{version}from {SOURCE_NAMES.get(self.source, self.source)} (ROCm {self.rocm_version})"

    @property
    def targets(self) -> tuple[str, ...]:
        return wheel_targets(self.source)


@dataclass(frozen=True)
class StackChoice:
    """One host's stack, as the roles install and check it."""

    rocm_version: str  # the ROCm release installed (rocm_version)
    rocm_stream: str  # "legacy" | "coresdk" (rocm_stream)
    torch: TorchBuild
    # torch series -> the ROCm release(s) it is built for, from torch.source's index (the rocm role's check)
    pairing: Mapping[str, str | tuple[str, ...]] = field(default_factory=dict)
    gpus: tuple[Gpu, ...] = ()  # every GPU found (the RadeonGpus fact), judged for rocm_version
    # The exact gfx targets of the GPUs this host trains on (by usable memory, for torch): one ROCm package
    # and one AMD device extra each; empty on a host provisioned without its GPU (gpu_cpu_only).
    targets: tuple[str, ...] = ()
    min_vram: int = 0  # gpu_min_vram_bytes: a discrete card with less is not trained on
    min_unified: int = 0  # gpu_min_unified_memory_bytes: the same for an APU's shared memory
    llamafactory_version: str = ""  # the pin the host record names (python_stack's llamafactory_version)

    def without_gpu(self) -> StackChoice:
        """The choice of a host provisioned without its GPU steps (gpu_cpu_only): no GPU targets."""
        return replace(self, targets=())

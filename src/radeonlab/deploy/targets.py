"""The GPU targets a host trains on, computed once from the host's data for deploy/setup.py and
deploy/verify.py alike (one ROCm package and one AMD device extra each; verify checks their packages)."""

from collections.abc import Sequence

from pyinfra import host

from radeonlab.roles.gpu.cards import Gpu
from radeonlab.roles.gpu.defaults import DEFAULTS as GPU_DEFAULTS
from radeonlab.roles.gpu_env.plan import torch_build, training_targets
from radeonlab.roles.python_stack.defaults import DEFAULTS as STACK_DEFAULTS
from radeonlab.roles.rocm.defaults import DEFAULTS as ROCM_DEFAULTS


def host_training_targets(gpus: Sequence[Gpu]) -> list[str]:
    """The exact targets of the GPUs this host trains on (by usable memory, for the torch build it gets)."""
    return list(
        training_targets(
            gpus,
            torch_build(host.data.get, ROCM_DEFAULTS, STACK_DEFAULTS),
            int(host.data.get("gpu_min_vram_bytes", GPU_DEFAULTS["gpu_min_vram_bytes"])),
            int(host.data.get("gpu_min_unified_memory_bytes", GPU_DEFAULTS["gpu_min_unified_memory_bytes"])),
        )
    )

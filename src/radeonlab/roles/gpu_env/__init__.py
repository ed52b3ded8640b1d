"""Export the GPU settings training needs (PYTORCH_ROCM_ARCH, HSA_OVERRIDE_GFX_VERSION, AOTriton) to login
shells."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.operations import files

from radeonlab.roles.gpu.cards import Gpu
from radeonlab.roles.gpu.defaults import DEFAULTS as GPU_DEFAULTS
from radeonlab.roles.gpu_env.defaults import DEFAULTS
from radeonlab.roles.gpu_env.plan import gpu_env, torch_build
from radeonlab.roles.privilege import as_root
from radeonlab.roles.python_stack.defaults import DEFAULTS as STACK_DEFAULTS
from radeonlab.roles.rocm.defaults import DEFAULTS as ROCM_DEFAULTS

TEMPLATE = Path(__file__).parent / "templates" / "radeonlab-gpu.sh.j2"


@deploy("Configure the GPU environment", data_defaults=DEFAULTS)
def configure_gpu_env(gpus: Sequence[Gpu]) -> None:
    """Write /etc/profile.d/radeonlab-gpu.sh for these GPUs (the RadeonGpus fact's value)."""
    build = torch_build(host.data.get, ROCM_DEFAULTS, STACK_DEFAULTS)
    min_vram = int(host.data.get("gpu_min_vram_bytes", GPU_DEFAULTS["gpu_min_vram_bytes"]))
    min_unified = int(
        host.data.get("gpu_min_unified_memory_bytes", GPU_DEFAULTS["gpu_min_unified_memory_bytes"])
    )
    env = gpu_env(gpus, build, min_vram, min_unified, bool(host.data.get("gpu_env_aotriton_experimental")))
    if not env.training and host.data.get("gpu_env_require_training_gpu"):
        raise DeployError(f"{host.name}: no GPU to train on with {build.label}: {'; '.join(env.comments)}")
    files.template(
        name="Export the GPU settings to login shells",
        src=str(TEMPLATE),
        dest=host.data.get("gpu_env_profile_path"),
        user="root",
        group="root",
        mode="644",
        jinja_env_kwargs={"trim_blocks": True, "lstrip_blocks": True},
        host_name=host.name,
        notes=env.notes,
        comments=env.comments,
        exports=env.exports,
        **as_root(),
    )

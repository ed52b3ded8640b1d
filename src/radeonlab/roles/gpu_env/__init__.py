"""Export the GPU settings training needs (PYTORCH_ROCM_ARCH, HSA_OVERRIDE_GFX_VERSION, AOTriton) to login
shells."""

from __future__ import annotations

from pathlib import Path

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.operations import files

from radeonlab.roles.gpu_env.defaults import DEFAULTS
from radeonlab.roles.gpu_env.plan import gpu_env
from radeonlab.roles.privilege import as_root
from radeonlab.roles.stack import StackChoice

TEMPLATE = Path(__file__).parent / "templates" / "radeonlab-gpu.sh.j2"


def profile_path() -> str:
    """Where this role writes the GPU settings (gpu_env_profile_path): Slurm's task prolog sources it."""
    return str(host.data.get("gpu_env_profile_path", DEFAULTS["gpu_env_profile_path"]))


@deploy("Configure the GPU environment", data_defaults=DEFAULTS)
def configure_gpu_env(stack: StackChoice) -> None:
    """Write /etc/profile.d/radeonlab-gpu.sh for the host's GPUs and torch build (its stack choice)."""
    build = stack.torch
    aotriton = bool(host.data.get("gpu_env_aotriton_experimental"))
    env = gpu_env(stack.gpus, build, stack.min_vram, stack.min_unified, aotriton)
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

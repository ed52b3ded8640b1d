"""The stack choice of a host (radeonlab/roles/stack.py), computed once from its GPU facts and its inventory
data, with each role's DEFAULTS under the inventory's values: deploy/setup.py and deploy/verify.py pass it to
the roles; the wheel cache asks it of every host it serves. The only place that reads several roles' DEFAULTS.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from radeonlab.roles.gpu.defaults import DEFAULTS as GPU_DEFAULTS
from radeonlab.roles.gpu.facts import RadeonGpus
from radeonlab.roles.gpu_env.plan import as_gpus, training_targets
from radeonlab.roles.python_stack.defaults import DEFAULTS as STACK_DEFAULTS
from radeonlab.roles.python_stack.defaults import torch_pairing
from radeonlab.roles.python_stack.plan import pytorch_rocm_series
from radeonlab.roles.rocm.defaults import DEFAULTS as ROCM_DEFAULTS
from radeonlab.roles.stack import StackChoice, TorchBuild

DataGet = Callable[[str, Any], Any]  # `host.data.get`


def torch_build(data_get: DataGet) -> TorchBuild:
    """The host's torch build from its data: source, the ROCm its wheels are built for, torch version
    (download.pytorch.org's: its rocm<series> index; AMD's: the Core SDK release)."""
    source = str(data_get("pytorch_source", STACK_DEFAULTS["pytorch_source"]))
    rocm = str(data_get("rocm_version", ROCM_DEFAULTS["rocm_version"]))
    if source != "amd":
        rocm = pytorch_rocm_series({k: data_get(k, v) for k, v in STACK_DEFAULTS.items()}, rocm)
    return TorchBuild(source, rocm, str(data_get("pytorch_version", STACK_DEFAULTS["pytorch_version"])))


def choose_stack(target: Any) -> StackChoice:
    """`target`: a pyinfra Host (the current `host`, or another host of the inventory); reads its GPU fact
    (KFD topology + DRM sysfs) once, judged for the ROCm release being installed."""
    get = target.data.get
    rocm_version = str(get("rocm_version", ROCM_DEFAULTS["rocm_version"]))
    gpus = as_gpus(
        target.get_fact(
            RadeonGpus,
            sysfs_root=get("gpu_sysfs_root", GPU_DEFAULTS["gpu_sysfs_root"]),
            rocm_version=rocm_version,
        )
    )
    build = torch_build(get)
    min_vram = int(get("gpu_min_vram_bytes", GPU_DEFAULTS["gpu_min_vram_bytes"]))
    min_unified = int(get("gpu_min_unified_memory_bytes", GPU_DEFAULTS["gpu_min_unified_memory_bytes"]))
    return StackChoice(
        rocm_version=rocm_version,
        rocm_stream=str(get("rocm_stream", ROCM_DEFAULTS["rocm_stream"])),
        torch=build,
        pairing=torch_pairing(build.source),
        gpus=tuple(gpus),
        targets=tuple(training_targets(gpus, build, min_vram, min_unified)),
        min_vram=min_vram,
        min_unified=min_unified,
        llamafactory_version=str(get("llamafactory_version", STACK_DEFAULTS["llamafactory_version"])),
    )

"""What /etc/profile.d/radeonlab-gpu.sh says for a host's GPUs: pure functions over
radeonlab.roles.gpu.cards.Gpu.

The override decision follows the torch build, not only the system ROCm: a torch wheel brings its own ROCm
libraries, and what a card can run is whether that wheel carries code for its exact target (AMD's
multi-arch wheels: gfx1031-1036 and gfx1103 too; download.pytorch.org's rocm7.2 wheels: gfx1030,
gfx1100-1102, gfx1200/1201). PYTORCH_ROCM_ARCH lists the targets the training GPUs *run as*: a card
borrowing gfx1030's code through HSA_OVERRIDE_GFX_VERSION=10.3.0 (an RX 6700 XT on download.pytorch.org's
wheels) reports itself to HIP as gfx1030, so that is the target extensions must be built for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from radeonlab.contract.records import GIB
from radeonlab.roles.gpu.cards import (
    Gpu,
    arch_family,
    gfx_from_hsa_version,
    is_training_gpu,
    override_for_wheel,
    rocm_arch_list,
)
from radeonlab.roles.gpu.table import AOTRITON_ARCHS
from radeonlab.roles.stack import SOURCE_NAMES, TorchBuild  # the torch part of the stack choice

# Attention on Radeon falls back to the slow, memory-hungry math path unless AOTriton's experimental
# Navi kernels are on (unslothai/unsloth#8821: gfx1200, N=4096, math 486 ms / 8.55 GiB vs flash 41 ms /
# 0.52 GiB; docs/notes/rocm-facts.md). The architectures the variable applies to: AOTRITON_ARCHS, from the
# one GPU table (roles/gpu/table.py).
AOTRITON_VARIABLE = "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL"


@dataclass
class GpuEnv:
    comments: list[str] = field(default_factory=list)  # one per card: which card, and why
    exports: dict[str, str] = field(default_factory=dict)  # in the order written
    training: list[Gpu] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # host-wide: which wheel, AOTriton


def for_torch(gpu: Gpu, build: TorchBuild) -> Gpu:
    """The card's conclusions re-evaluated for the torch build being installed."""
    native = bool(gpu.gfx) and gpu.gfx in build.targets
    override = override_for_wheel(gpu.gfx, build.targets)
    return dataclasses.replace(
        gpu,
        rocm_version=build.rocm_version,
        native=native,
        override=override,
        supported=native or bool(override),
    )


def _gib(n: int | None) -> str:
    return f"{(n or 0) / GIB:.1f} GiB"


def _memory(gpu: Gpu) -> str:
    if gpu.igpu and gpu.gtt_total:
        usable, carve_out, gtt = _gib(gpu.usable_memory), _gib(gpu.vram_total), _gib(gpu.gtt_total)
        return f", {usable} usable ({carve_out} carve-out + {gtt} GTT)"
    return f", {_gib(gpu.vram_total)}" if gpu.vram_total is not None else ""


def _why(gpu: Gpu, build: TorchBuild, min_vram: int, min_unified: int) -> str:
    card = f"GPU {gpu.rocr_index} (KFD node {gpu.node}): {gpu.name}, {gpu.gfx or 'unknown gfx'}{_memory(gpu)}"
    wheel = SOURCE_NAMES.get(build.source, build.source)
    if not gpu.supported:
        return f"{card}: not usable with {wheel} (no {gpu.gfx} code, no same-major target to borrow)"
    if gpu.vram_total is None:
        return f"{card}: not used for training (VRAM unknown: no DRM card matched this KFD node)"
    if not is_training_gpu(gpu, min_vram, min_unified):
        if gpu.igpu:
            return f"{card}: not used for training (an iGPU with under {_gib(min_unified)} of usable memory)"
        return f"{card}: not used for training (VRAM under {_gib(min_vram)})"
    if gpu.override:
        return (
            f"{card}: needs override {gpu.override}: {wheel} carry no {gpu.gfx} code; it runs "
            f"{gfx_from_hsa_version(gpu.override)}'s"
        )
    return f"{card}: {wheel} carry {gpu.gfx} code: no override (an override on a native card hurts)"


def gpu_env(
    gpus: Sequence[Gpu],
    build: TorchBuild,
    min_vram: int,
    min_unified: int | None = None,
    aotriton: bool = True,
) -> GpuEnv:
    """Comments and exports for these GPUs with this torch build. `aotriton`: the role switch that sets
    TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1 where a training GPU is RDNA3/3.5/4."""
    unified = min_vram if min_unified is None else min_unified
    cards = [for_torch(g, build) for g in gpus]
    env = GpuEnv(comments=[_why(g, build, min_vram, unified) for g in cards])
    env.notes.append(f"torch: {build.label}; the override decision follows what that wheel carries code for")
    env.training = [g for g in cards if is_training_gpu(g, min_vram, unified)]
    if not env.training:
        return env
    env.exports["PYTORCH_ROCM_ARCH"] = rocm_arch_list(env.training)
    overrides = {g.override for g in cards}
    if len(overrides) == 1 and None not in overrides:
        # Every GPU the runtime sees wants the same value: the plain form covers them all.
        env.exports["HSA_OVERRIDE_GFX_VERSION"] = str(overrides.pop())
    else:
        # Cards differ: override only the ones that need it (per-device form, ROCm 6.2+), never native ones.
        for g in env.training:
            if g.override:
                env.exports[f"HSA_OVERRIDE_GFX_VERSION_{g.rocr_index}"] = g.override
    archs = sorted({arch_family(g.gfx) for g in env.training} & AOTRITON_ARCHS)
    if archs and aotriton:
        env.notes.append(
            f"{AOTRITON_VARIABLE}=1: {', '.join(archs)} attention otherwise falls back to the math path "
            "(unslothai/unsloth#8821: 12x slower, 16x the memory); gpu_env_aotriton_experimental: false "
            "turns it off"
        )
        env.exports[AOTRITON_VARIABLE] = "1"
    elif archs:
        env.notes.append(f"{AOTRITON_VARIABLE} not set: gpu_env_aotriton_experimental is false")
    return env


_GPU_FIELDS = {f.name for f in dataclasses.fields(Gpu)}


def as_gpus(fact_value: Sequence[Gpu] | Sequence[Mapping[str, Any]]) -> list[Gpu]:
    """The RadeonGpus fact's dicts as cards.Gpu records (extra keys like uuid/runs_as dropped)."""
    return [
        g if isinstance(g, Gpu) else Gpu(**{k: v for k, v in g.items() if k in _GPU_FIELDS})
        for g in fact_value
    ]


def training_targets(gpus: Sequence[Gpu], build: TorchBuild, min_vram: int, min_unified: int) -> list[str]:
    """The exact gfx targets of the GPUs this host trains on (what ROCm packages and AMD's device extras are
    chosen for); every detected target when none qualifies (the gpu_env role then says why)."""
    env = gpu_env(gpus, build, min_vram, min_unified)
    chosen = env.training or list(gpus)
    return sorted({g.gfx for g in chosen if g.gfx})

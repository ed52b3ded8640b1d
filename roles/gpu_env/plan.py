"""What /etc/profile.d/radeonlab-gpu.sh says for a host's GPUs: pure functions over
radeonlab.roles.gpu.cards.Gpu.

PYTORCH_ROCM_ARCH lists the targets the training GPUs *run as*: a card borrowing gfx1030's code through
HSA_OVERRIDE_GFX_VERSION=10.3.0 (an RX 6700 XT, gfx1031) reports itself to HIP as gfx1030, so that is the
target extensions must be built for (radeonlab.roles.gpu.cards.rocm_arch_list).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from radeonlab.roles.gpu.cards import (
    Gpu,
    gfx_from_hsa_version,
    is_native,
    is_supported,
    override_for,
    rocm_arch_list,
)

GIB = 1024**3


@dataclass
class GpuEnv:
    comments: list[str] = field(default_factory=list)  # one per card: which card, and why
    exports: dict[str, str] = field(default_factory=dict)  # in the order written
    training: list[Gpu] = field(default_factory=list)


def for_rocm(gpu: Gpu, rocm_version: str) -> Gpu:
    """The card's conclusions re-evaluated for the ROCm release being installed."""
    return dataclasses.replace(
        gpu,
        rocm_version=rocm_version,
        native=is_native(gpu.gfx, rocm_version),
        override=override_for(gpu.gfx, rocm_version),
        supported=is_supported(gpu.gfx, rocm_version),
    )


def _gib(n: int | None) -> str:
    return f"{(n or 0) / GIB:.1f} GiB"


def _why(gpu: Gpu, rocm_version: str, min_vram: int) -> str:
    card = f"GPU {gpu.rocr_index} (KFD node {gpu.node}): {gpu.name}, {gpu.gfx or 'unknown gfx'}"
    card += f", {_gib(gpu.vram_total)}" if gpu.vram_total is not None else ""
    if not gpu.supported:
        return (
            f"{card}: not supported on ROCm {rocm_version} (no native code, no same-major target to borrow)"
        )
    if gpu.vram_total is None:
        return f"{card}: not used for training (VRAM unknown: no DRM card matched this KFD node)"
    if gpu.vram_total < min_vram:
        return f"{card}: not used for training (VRAM under {_gib(min_vram)}; an iGPU carve-out)"
    if gpu.override:
        return (
            f"{card}: needs override {gpu.override}: ROCm {rocm_version} ships no {gpu.gfx} code; "
            f"it runs {gfx_from_hsa_version(gpu.override)}'s"
        )
    return f"{card}: native on ROCm {rocm_version}, no override (an override on a native card hurts)"


def gpu_env(gpus: Sequence[Gpu], rocm_version: str, min_vram: int) -> GpuEnv:
    """Comments and exports for these GPUs on this ROCm release."""
    cards = [for_rocm(g, rocm_version) for g in gpus]
    env = GpuEnv(comments=[_why(g, rocm_version, min_vram) for g in cards])
    env.training = [g for g in cards if g.supported and (g.vram_total or 0) >= min_vram]
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
    return env


_GPU_FIELDS = {f.name for f in dataclasses.fields(Gpu)}


def as_gpus(fact_value: Sequence[Gpu | dict]) -> list[Gpu]:
    """The RadeonGpus fact's dicts as cards.Gpu records (extra keys like uuid/runs_as dropped)."""
    return [
        g if isinstance(g, Gpu) else Gpu(**{k: v for k, v in g.items() if k in _GPU_FIELDS})
        for g in fact_value
    ]

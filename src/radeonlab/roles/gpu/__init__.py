"""GPU detection: which AMD GPUs a host has, what they are, and what ROCm needs to use them."""

from typing import Any

from radeonlab.roles.gpu.defaults import DEFAULTS


def min_vram_bytes(data: Any) -> int:
    """gpu_min_vram_bytes of a host's data (`host.data` or another host's): Slurm hands out the GPUs of each
    node that the node trains on."""
    return int(data.get("gpu_min_vram_bytes", DEFAULTS["gpu_min_vram_bytes"]))

"""The GPU role's settings (role-prefixed data keys): the one place they are set.

Every key can be overridden per host or group in the inventory, or with `pyinfra --data key=value`.
"""

from __future__ import annotations

from typing import Any

from radeonlab.contract.records import GIB

DEFAULTS: dict[str, Any] = {
    # Where sysfs is read from: "/" on a real host. The sandbox points this at a recorded sysfs tree.
    "gpu_sysfs_root": "/",
    # Train only on GPUs with at least this much VRAM. WHY 6 GiB: an APU's carve-out (512 MiB on the LACT
    # Strix Point capture, 4 GiB on the Phoenix one) can be GPU 0 and must not be picked, while an "8 GB"
    # card reports a little under 8 GiB (8573157376 bytes on the LACT/amdgpu-sysfs-rs Vega 56 capture).
    "gpu_min_vram_bytes": 6 * GIB,
    # An APU (integrated GPU) trains when its usable memory (VRAM carve-out + GTT, as the kernel reports them
    # in mem_info_vram_total / mem_info_gtt_total) is at least this. WHY 24 GiB: the realistic floor for 8B
    # bf16 LoRA (docs/notes/rocm-facts.md, Memory); a Strix Halo with 64-128 GB of unified memory passes, a
    # laptop
    # 780M (0.5-4 GiB carve-out + half of 16-32 GB RAM as GTT) does not, so it is not picked over a card.
    "gpu_min_unified_memory_bytes": 24 * GIB,
}

"""The GPU role's settings (role-prefixed data keys): the one place they are set.

Every key can be overridden per host or group in the inventory, or with `pyinfra --data key=value`.
"""

from __future__ import annotations

GIB = 1024**3

DEFAULTS: dict[str, object] = {
    # Where sysfs is read from: "/" on a real host. The sandbox points this at a recorded sysfs tree.
    "gpu_sysfs_root": "/",
    # Train only on GPUs with at least this much VRAM. WHY 6 GiB: an APU's carve-out (512 MiB on the LACT
    # Strix Point capture, 4 GiB on the Phoenix one) can be GPU 0 and must not be picked, while an "8 GB"
    # card reports a little under 8 GiB (8573157376 bytes on the LACT/amdgpu-sysfs-rs Vega 56 capture).
    "gpu_min_vram_bytes": 6 * GIB,
}

"""The GPU environment role's settings (role-prefixed data keys): the one place they are set.

Which GPUs count for training (the VRAM threshold) is the GPU role's `gpu_min_vram_bytes`; the ROCm release
the override rule is evaluated for is the ROCm role's `rocm_version`.
"""

from __future__ import annotations

from radeonlab.contract.records import GPU_ENV_FILE

DEFAULTS: dict[str, object] = {
    "gpu_env_profile_path": GPU_ENV_FILE,
    # A host whose GPUs none can train on (unsupported or too small) stops the deploy unless this is false.
    "gpu_env_require_training_gpu": True,
}

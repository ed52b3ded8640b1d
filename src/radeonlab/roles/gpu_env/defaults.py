"""The GPU environment role's settings (role-prefixed data keys): the one place they are set.

Which GPUs count for training (the VRAM threshold) is the GPU role's `gpu_min_vram_bytes`; the override rule
is evaluated for the torch build (python_stack's `pytorch_source` and the ROCm role's `rocm_version`).
"""

from __future__ import annotations

from typing import Any

from radeonlab.contract.records import GPU_ENV_FILE

DEFAULTS: dict[str, Any] = {
    "gpu_env_profile_path": GPU_ENV_FILE,
    # A host whose GPUs none can train on (unsupported or too small) stops the deploy unless this is false.
    "gpu_env_require_training_gpu": True,
    # TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1 where a training GPU is RDNA3/3.5/4: without it attention
    # can fall back to the math path (unslothai/unsloth#8821). false: never set it.
    "gpu_env_aotriton_experimental": True,
}

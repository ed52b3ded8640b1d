"""The access role's settings (role-prefixed data keys): the one place they are set."""

from __future__ import annotations

from typing import Any

from radeonlab.contract.records import GPU_GROUPS

DEFAULTS: dict[str, Any] = {
    # The training user; empty: python_stack_user, else the SSH user pyinfra logs in as.
    "access_user": "",
    # Groups that own the GPU device nodes on Ubuntu/Debian (udev: /dev/kfd and renderD* -> render,
    # card* -> video). `render` is created as a system group where it is missing (Debian minbase).
    "access_groups": list(GPU_GROUPS),
    "access_system_groups": ["render"],
    # The device nodes the training user must be able to read and write.
    "access_devices": ["/dev/kfd", "/dev/dri/renderD*"],
    # A device the user cannot open: a warning, or with this true a DeployError.
    "access_strict": False,
    # Keep the training user's systemd manager running without a login (loginctl enable-linger), so a job
    # with limits.memory_gb (a scope of that manager) outlives the SSH session that started it.
    "access_linger": True,
}

"""The inventory you edit: your workstations and how to reach them.

`pyinfra -y inventories/home.py deploy/setup.py` provisions every host below. Every role key (rocm_*,
gpu_*, access_*, python_stack_*, pytorch_*, llamafactory_*, verify_*) can be set here per host or for the
group; the roles' README.md files list them with their defaults.
NB: pyinfra treats every top-level list in this file as a group: keep helpers "_"-prefixed.
"""

from radeonlab.roles import amd_releases as _amd

# The release the product installs (roles/amd_releases.py, the one release table): its ROCm series and the
# torch AMD's index pairs with it: AMD's newest production release, 10.1 with torch[device-<gfx>]==2.14.0+
# rocm10.1.0. The release before is one setting away: "rocm_version": "10.0", "pytorch_version": "2.13.0".
_release = _amd.default_release()

_common = {
    # --- how pyinfra (and the job runner) log in ---
    "ssh_user": "lab",  # the SSH user; with sudo rights (the roles use sudo for system changes)
    "ssh_key": "~/.ssh/id_ed25519",
    # Refuse unknown host keys: add each workstation to known_hosts first (ssh-keyscan, or one manual ssh).
    "ssh_strict_host_key_checking": "yes",
    # --- what to install ---
    # ROCm Core SDK (repo.amd.com); rocm_stream "legacy" + rocm_version "7.2.4" for repo.radeon.com
    "rocm_stream": "coresdk",
    "rocm_version": _release.series,  # as AMD writes it ("10.1", "10.1.0", "7.14.1"); pairs with the torch
    "rocm_install_driver": False,  # true: also amdgpu-dkms from repo.radeon.com (then a reboot is needed)
    "rocm_allow_reboot": False,  # true: reboot by itself after a driver change
    "python_stack_user": "",  # the training user; empty = ssh_user
    "python_stack_venv": "~/radeonlab/venv",  # the training user's venv ("~" = that user's home)
    # AMD's multi-arch wheels, one device extra per GPU; "pytorch": download.pytorch.org
    "pytorch_source": "amd",
    "pytorch_version": _release.torch,  # AMD: torch[device-<gfx>]==<torch>+rocm<release>
    "llamafactory_version": "0.9.5",
}

workstations = [
    # A 24 GB card (RX 7900 XTX): the realistic floor for 8B bf16 LoRA.
    ("ws-7900xtx", {**_common, "ssh_hostname": "192.168.1.50"}),
    # A 12 GB card (RX 6700 XT, gfx1031): fp16 (no bf16); AMD's wheels carry gfx1031 code (no override),
    # download.pytorch.org's need HSA_OVERRIDE_GFX_VERSION=10.3.0 (set by the gpu_env role).
    # Refuse to continue if it cannot open /dev/kfd after provisioning:
    ("ws-6700xt", {**_common, "ssh_hostname": "192.168.1.51", "access_strict": True}),
]

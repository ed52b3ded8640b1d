"""The ROCm role's settings (role-prefixed data keys): the one place they are set.

Every key can be overridden per host or group in the inventory, or with `pyinfra --data key=value`.
"""

from __future__ import annotations

DEFAULTS: dict[str, object] = {
    # "legacy": repo.radeon.com (ROCm up to 7.2.x); "coresdk": repo.amd.com ROCm Core SDK (7.12 and later).
    "rocm_stream": "legacy",
    # The newest 7.2.x (ROCm 7.2.4, 2026-05-29, ROCm/rocminfo releases): what torch 2.11-2.13 wheels target.
    "rocm_version": "7.2.4",
    # A torch/ROCm pair outside PYTORCH_ROCM_PAIRING stops the deploy unless this is true.
    "rocm_allow_unpaired_torch": False,
    # --- legacy stream (repo.radeon.com) ---
    "rocm_key_url": "https://repo.radeon.com/rocm/rocm.gpg.key",  # ASCII armored; dearmored on install
    "rocm_keyring": "/etc/apt/keyrings/rocm.gpg",
    "rocm_repo_url": "https://repo.radeon.com/rocm/apt",  # + /<version dir> <suite> main
    # From ROCm 7.0 the graphics libraries come from a second repository: + /<version dir>/ubuntu <suite> main
    "rocm_graphics_repo_url": "https://repo.radeon.com/graphics",
    "rocm_graphics_since": "7.0",
    "rocm_origin": "repo.radeon.com",  # the `o=` the apt pin names
    # Minimal runtime for PyTorch; `rocm_packages_full: true` installs the `rocm` meta package (~6.9 GB).
    "rocm_packages": ["rocm-hip-runtime", "rocminfo", "rocm-smi-lib"],
    "rocm_packages_full": False,
    "rocm_packages_full_list": ["rocm"],
    # Distribution codename -> the suite AMD publishes the legacy packages for. AMD publishes only Ubuntu
    # suites: Debian 12 takes the jammy packages (glibc 2.36 >= jammy's 2.35), Debian 13 the noble ones
    # (ROCm/ROCm#5111 comment, AMD's Debian notes re-use Ubuntu sources: ROCm discussion #6571).
    "rocm_legacy_suites": {"jammy": "jammy", "noble": "noble", "bookworm": "jammy", "trixie": "noble"},
    # --- Core SDK stream (repo.amd.com) ---
    "rocm_coresdk_key_url": "https://repo.amd.com/rocm/packages/gpg/rocm.gpg",
    "rocm_coresdk_keyring": "/etc/apt/keyrings/amdrocm.gpg",
    "rocm_coresdk_repo_url": "https://repo.amd.com/rocm/packages",  # + /<distro dir> stable main
    "rocm_coresdk_suite": "stable",
    "rocm_coresdk_origin": "repo.amd.com",
    "rocm_coresdk_dirs": {
        "jammy": "ubuntu2204",
        "noble": "ubuntu2404",
        "bookworm": "debian12",
        "trixie": "debian13",
    },
    # One meta package per GPU family present: amdrocm7.12-gfx110x, ...
    "rocm_coresdk_package_template": "amdrocm{version}-{family}",
    "rocm_coresdk_extra_packages": [],
    # --- optional kernel driver (amdgpu-dkms); off by default: Ubuntu's own kernel driver runs ROCm ---
    "rocm_install_driver": False,
    "rocm_amdgpu_repo_url": "https://repo.radeon.com/amdgpu",  # + /<driver version>/ubuntu <suite> main
    # The driver repository is numbered on its own from ROCm 7.0 (rocm-facts.md).
    "rocm_amdgpu_versions": {"7.0": "30.10", "7.1": "30.20", "7.2": "30.30"},
    "rocm_amdgpu_version": "",  # empty: from rocm_amdgpu_versions by the ROCm series
    "rocm_driver_packages": ["amdgpu-dkms"],
    "rocm_allow_reboot": False,  # reboot after a driver change; otherwise the deploy says one is needed
    # --- host layout ---
    "rocm_prerequisite_packages": ["ca-certificates", "curl", "gnupg"],  # key download + dearmor
    "rocm_ld_paths": ["/opt/rocm/lib", "/opt/rocm/lib64"],
    "rocm_bin_path": "/opt/rocm/bin",
    "rocm_version_file": "/opt/rocm/.info/version",
}

# Ubuntu 22.04/24.04 and Debian 12/13, by (distribution, major version) -> codename as os-release names it.
SUPPORTED_DISTROS: dict[tuple[str, int], str] = {
    ("Ubuntu", 22): "jammy",
    ("Ubuntu", 24): "noble",
    ("Debian", 12): "bookworm",
    ("Debian", 13): "trixie",
}

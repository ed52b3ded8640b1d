"""The ROCm role's settings (role-prefixed data keys): the one place they are set.

Every key can be overridden per host or group in the inventory, or with `pyinfra --data key=value`.
"""

from __future__ import annotations

from typing import Any

from radeonlab.roles.amd_releases import LOCATIONS
from radeonlab.roles.rocm import releases


def _base(stream: str) -> str:
    """A stream's apt repository without its /<distro>/ part (the role appends the distribution's)."""
    return LOCATIONS[stream].apt_repo.removesuffix("{distro}/").rstrip("/")


DEFAULTS: dict[str, Any] = {
    # "coresdk": AMD's Core SDK packages (amdrocm<ver>-<gfx>; 10.x at stable.repo.amd.com, 7.14.x at its
    # legacy multi-arch repository on repo.amd.com); "legacy": repo.radeon.com (ROCm up to 7.2.4).
    # rocm_version as AMD writes it: "10.1", "10.1.0", "10.0", "7.14", "7.14.1" (a series: its newest patch).
    # Default: DEFAULT_RELEASE of roles/amd_releases.py, the one release table (with its sources and why it
    # is not yet AMD's newest production release 10.1.0). The legacy pair rocm_stream: legacy,
    # rocm_version: 7.2.4 (+ pytorch_source: pytorch, rocm7.2 wheels) stays a choice.
    "rocm_stream": "coresdk",
    "rocm_version": releases.DEFAULT_RELEASE.series,
    # A torch/ROCm pair outside PYTORCH_ROCM_PAIRING stops the deploy unless this is true.
    "rocm_allow_unpaired_torch": False,
    # --- legacy stream (repo.radeon.com) ---
    "rocm_key_url": LOCATIONS["legacy"].apt_key,  # ASCII armored; dearmored on install
    "rocm_keyring": "/etc/apt/keyrings/rocm.gpg",
    # + /<version dir> <suite> main
    "rocm_repo_url": LOCATIONS["legacy"].apt_repo.removesuffix("{version}/").rstrip("/"),
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
    "rocm_legacy_suites": dict(releases.LEGACY_SUITES),
    # --- Core SDK stream (repo.amd.com; AMD's install selector, releases.py [S1] [S2]) ---
    # "multi-arch": packages-multi-arch/<distro>, one amdrocm<ver>-<gfx> per exact target (AMD's "all GPUs"
    # repository); "family": packages/<distro>, one amdrocm<ver>-<family> per GPU family (gfx110x, ...).
    "rocm_coresdk_layout": "multi-arch",
    # true: the all-targets package amdrocm<ver> instead of one package per detected target (more disk).
    "rocm_coresdk_all_targets": False,
    # multi-arch layout, 10.x (roles/amd_releases.py LOCATIONS["coresdk"], AMD's 10.0 install selector [S1]):
    # one repository for the per-target packages (amdrocm10.1-gfx1100) and the all-targets one
    # (amdrocm10.1): + /<distro>/ stable main, and its key.
    "rocm_coresdk_multiarch_repo_url": _base("coresdk"),
    "rocm_coresdk_key_url": LOCATIONS["coresdk"].apt_key,
    # multi-arch layout, 7.14.x: AMD keeps releases before 10.0 at their legacy multi-arch repository, not
    # mirrored into the new one (LOCATIONS["coresdk-legacy-multi-arch"], TheRock legacy_multi_arch_releases).
    "rocm_coresdk_legacy_multiarch_repo_url": _base("coresdk-legacy-multi-arch"),
    "rocm_coresdk_legacy_multiarch_key_url": LOCATIONS["coresdk-legacy-multi-arch"].apt_key,
    "rocm_coresdk_keyring": "/etc/apt/keyrings/amdrocm.gpg",
    # family layout: the 7.13 selector's per-family repository [S2] (amdrocm<ver>-gfx110x) and its key.
    "rocm_coresdk_repo_url": "https://repo.amd.com/rocm/packages",  # + /<distro> stable main
    "rocm_coresdk_family_key_url": "https://repo.amd.com/rocm/packages/gpg/rocm.gpg",
    "rocm_coresdk_suite": LOCATIONS["coresdk"].suite,
    # The pin's o=; empty: the host name of the repository in use. AMD's Release files were not read here
    # (no access): the host name is assumed as Origin, as repo.radeon.com's is. Check with
    # `apt-cache policy` on a real host and set this if it differs.
    "rocm_coresdk_origin": "",
    "rocm_coresdk_dirs": dict(releases.CORE_SDK_DISTROS),
    "rocm_coresdk_target_template": "amdrocm{version}-{gfx}",  # multi-arch: amdrocm10.0-gfx1100
    "rocm_coresdk_all_targets_template": "amdrocm{version}",  # multi-arch, every target: amdrocm10.0
    "rocm_coresdk_package_template": "amdrocm{version}-{family}",  # family layout: amdrocm10.0-gfx110x
    "rocm_coresdk_extra_packages": [],
    # The /opt/rocm view (AMD's meta package links /opt/rocm/bin, /opt/rocm/lib to the selected
    # /opt/rocm/core-<ver>, [S3]): one folder on the linker path, whichever release is selected.
    "rocm_coresdk_ld_paths": ["/opt/rocm/lib"],
    "rocm_coresdk_version_file": "/opt/rocm/core-{version}/.info/version",
    # Remove the other stream's packages (and other Core SDK releases') before installing: AMD asks to
    # uninstall 7.2.4 or older first [S5], and two releases would put two copies of ROCm on the linker path.
    "rocm_remove_other_streams": True,
    # --- optional kernel driver (amdgpu-dkms); off by default: Ubuntu's own kernel driver runs ROCm ---
    "rocm_install_driver": False,
    "rocm_amdgpu_repo_url": "https://repo.radeon.com/amdgpu",  # + /<driver version>/ubuntu <suite> main
    # The driver repository is numbered on its own from ROCm 7.0 (docs/notes/rocm-facts.md); 10.0 pairs with
    # 31.50 (amdgpu-install/31.50 in AMD's 10.0 selector, releases.py [S1]). 10.1: AMD's documents read here
    # give no driver number; 31.50, the newest they give, is chosen (the kernel driver is not tied to one
    # ROCm release the way the user-space packages are); set rocm_amdgpu_version when AMD names 10.1's.
    # 7.14's was not found: set it.
    "rocm_amdgpu_versions": {
        "7.0": "30.10",
        "7.1": "30.20",
        "7.2": "30.30",
        "10.0": "31.50",
        "10.1": "31.50",
    },  # fmt: skip
    "rocm_amdgpu_version": "",
    # Distribution codename -> the driver repository's suite (Ubuntu 26.04 has its own: resolute, [S1]).
    "rocm_amdgpu_suites": {
        **releases.LEGACY_SUITES,
        "resolute": "resolute",
    },  # empty: from rocm_amdgpu_versions by the ROCm series
    "rocm_driver_packages": ["amdgpu-dkms"],
    "rocm_allow_reboot": False,  # reboot after a driver change; otherwise the deploy says one is needed
    # --- a GPU on the PCI bus that no kernel driver drives yet (roles/rocm/driver.py) ---
    # Part -> "<distro>-<major>" -> the kernel metapackage AMD's matrix asks for ("" = the GA kernel is the
    # listed one); a distribution missing here has no documented path and the deploy stops for that host.
    # AMD's matrix (sandbox/amdworld/support-matrix.yaml [OSSUPPORT]): Radeon on 24.04 with HWE 6.17, 22.04
    # with HWE 6.8, 26.04 GA 7.0; Ryzen APUs on 24.04 with the OEM 6.17 kernel [PREREQ], 26.04 GA 7.0.
    # No Debian for either part.
    # The package names are Ubuntu's, not AMD's: linux-generic-hwe-<ver> (Ubuntu kernel team docs, "HWE
    # kernels": canonical-kteam-docs.readthedocs-hosted.com reference/hwe-kernels); linux-oem-24.04a is the
    # OEM metapackage built from linux-meta-oem-6.17 (packages.ubuntu.com, noble-updates, linux-oem-24.04a
    # 6.17.0-1028.28). Neither was installed on a real host here.
    "rocm_driver_kernels": {
        "radeon": {
            "ubuntu-26": "",
            "ubuntu-24": "linux-generic-hwe-24.04",
            "ubuntu-22": "linux-generic-hwe-22.04",
        },
        "ryzen": {"ubuntu-26": "", "ubuntu-24": "linux-oem-24.04a"},
    },
    # AMD: install linux-headers-$(uname -r) and linux-modules-extra-$(uname -r) before amdgpu-dkms
    # (amdworld/releases.yaml [INSTALL100]); {kernel} is the running kernel's release.
    "rocm_driver_kernel_packages": ["linux-headers-{kernel}", "linux-modules-extra-{kernel}"],
    # server.reboot's wait before reconnecting and its give-up time (pyinfra's defaults: 10 s, 300 s)
    "rocm_reboot_delay": 10,
    "rocm_reboot_timeout": 300,
    # --- host layout ---
    "rocm_prerequisite_packages": ["ca-certificates", "curl", "gnupg"],  # key download + dearmor
    "rocm_ld_paths": ["/opt/rocm/lib", "/opt/rocm/lib64"],
    "rocm_bin_path": "/opt/rocm/bin",
    "rocm_version_file": "/opt/rocm/.info/version",
}

# Ubuntu 22.04/24.04/26.04 and Debian 12/13, by (distribution, major version) -> codename as os-release
# names it.
SUPPORTED_DISTROS: dict[tuple[str, int], str] = {
    ("Ubuntu", 22): "jammy",
    ("Ubuntu", 24): "noble",
    ("Ubuntu", 26): "resolute",
    ("Debian", 12): "bookworm",
    ("Debian", 13): "trixie",
}

"""Where the sandbox keeps its state, and the few numbers it runs on: data in one place."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

# Kept between runs (the debootstrap'd base rootfs, downloaded wheels): building them is the slow part.
CACHE_DIR = Path(os.environ.get("RADEONLAB_SANDBOX_CACHE", "/var/cache/radeonlab-sandbox"))
# One sandbox's live state: hosts, keys, served files. A test session uses its own STATE_DIR.
STATE_DIR = Path(os.environ.get("RADEONLAB_SANDBOX_DIR", "/var/tmp/radeonlab-sandbox"))

BASE_SUITE = "bookworm"  # Debian 12, the distribution of this machine and of the sandbox hosts
BASE_VARIANT = "minbase"
BASE_PACKAGES = [
    "openssh-server",
    "python3",
    "python3-venv",
    "sudo",
    "iproute2",
    "procps",
    "ca-certificates",
    "gnupg",  # the ROCm role dearmors AMD's ASCII key with gpg, as on a real Ubuntu host
]
HOST_USER = "lab"  # the unprivileged user with passwordless sudo that pyinfra and fabric log in as

# Hosts listen on their own loopback address and port (something may already hold 0.0.0.0:22).
HOST_ADDRESS_PREFIX = "127.0.77."
HOST_PORT_BASE = 2200

# One static HTTP server on loopback serves the simulated AMD apt repository (www/amd/...) and the wheel
# index (www/pypi/simple/...) to every host: hosts share this machine's network namespace.
WEB_ADDRESS = "127.0.0.1"


def www_dir(state: Path = STATE_DIR) -> Path:
    return state / "www"


# --- Simulated AMD apt repository (radeonlab/sandbox/aptrepo.py) -------------------------------------------
# The stand-in packages carry ROCm's package names and AMD-shaped versions; they are SIMULATED. Upstream
# component versions below (hsa-rocr, rocm-smi-lib, ...) and build numbers are illustrative shapes, not
# AMD's published numbers, except where a source is named.
ROCM_VERSION = "7.2.4"  # legacy stream (repo.radeon.com/rocm/apt/<dir>); "7.2.0" is published as "7.2"
# repo.radeon.com/amdgpu/<x>/ubuntu pairs with ROCm 7.2 (docs/notes/rocm-facts.md)
AMDGPU_DRIVER_VERSION = "30.30"
LEGACY_CODENAMES = ("jammy", "noble")  # Ubuntu 22.04 / 24.04: the dists AMD publishes for ROCm 7.x
# Package version suffix per codename, as AMD's debs carry it (e.g. 1.0.0.70101-38~24.04).
LEGACY_DIST_SUFFIX = {"jammy": "~22.04", "noble": "~24.04"}
STANDIN_BUILD = "1"  # the "-<n>" build number of every stand-in (AMD's real build numbers differ)
# HIP version printed by hipconfig for ROCm 7.2.4: "HIP version: 7.2.53211-97f5574fe2" seen with
# clang "roc-7.2.4" (code-search index file id 70246090025); 7.2.0: 7.2.26015-fc0010cf6a (ROCm/hip#3881).
HIP_VERSION = {"7.2.4": "7.2.53211-97f5574fe2", "7.2.0": "7.2.26015-fc0010cf6a"}
STANDIN_COMPONENT_VERSIONS = {  # <upstream>.<ROCm libpatch> is prepended by aptrepo
    "rocminfo": "1.0.0",
    "hsa-rocr": "1.18.0",
    "rocm-smi-lib": "7.8.0",  # ROCM-SMI-LIB 7.8.0 was seen with ROCm 7.13 (shared fixtures, rocm-smi rows)
    "amd-smi-lib": "26.2.0",
}
AMDGPU_DKMS_VERSION = "1:6.16.13.30300000-{build}{suffix}"  # driver 6.16.13 seen with ROCm 7.2 (gpustack)

# ROCm Core SDK stream, installed under /opt/rocm/core-<ver>, in AMD's two layouts: per family
# (repo.amd.com/rocm/packages/<distro>) and per target (stable.repo.amd.com/rocm/core/packages/<distro>,
# served here under packages-multi-arch/<distro>: the product takes each repository's URL from its settings).
# Releases: every Core SDK series AMD lists (amdworld/releases.yaml, both its 10.x stream and the 7.14.x
# legacy multi-arch one: here one pool per layout serves them all). Distros, families and targets are AMD's
# too (amdworld/coresdk-packages.yaml, read by amddata.py), never the product's own tables.
AMDWORLD_DIR = Path(__file__).parent / "amdworld"


def _amdworld_coresdk_series() -> tuple[str, ...]:
    releases = yaml.safe_load((AMDWORLD_DIR / "releases.yaml").read_text())["releases"]
    coresdk = [str(r["version"]) for r in releases if r["stream"].startswith("coresdk")]
    found = [".".join(v.split(".")[:2]) for v in coresdk]
    return tuple(sorted(set(found), key=lambda v: tuple(int(x) for x in v.split("."))))


CORESDK_VERSIONS = _amdworld_coresdk_series()  # ("7.14", "10.0", "10.1")
CORESDK_DISTROS = tuple(yaml.safe_load((AMDWORLD_DIR / "coresdk-packages.yaml").read_text())["distros"])
CORESDK_SUITE = "stable"
CORESDK_LAYOUT_DIRS = {"family": "packages", "multi-arch": "packages-multi-arch"}

APT_COMPONENT = "main"
APT_ARCH = "amd64"
APT_ORIGIN_LEGACY = "repo.radeon.com"  # so the product's `Pin: release o=repo.radeon.com` applies
APT_ORIGIN_CORESDK = "repo.amd.com"  # both layouts here; the product pins the Origin the settings name
APT_LABEL = "radeonlab SIMULATED repository (stand-in packages, not AMD's)"
APT_KEY_UID = "radeonlab SIMULATED AMD repository key (test only) <simulated-apt@radeonlab.invalid>"


def aptrepo_dir(state: Path = STATE_DIR) -> Path:
    """Private build state of the simulated apt repository (throwaway GNUPGHOME, staging, stamp)."""
    return state / "aptrepo"


def rocm_dir_name(version: str = ROCM_VERSION) -> str:
    """AMD's directory name for a ROCm release: a .0 release is published as "7.2", not "7.2.0"."""
    return version[: -len(".0")] if version.count(".") == 2 and version.endswith(".0") else version


# --- base rootfs (radeonlab/sandbox/rootfs.py) ---
# Bump when the recipe changes in a way the package list does not show: the cached base is then rebuilt.
BASE_RECIPE_VERSION = 1
# The machine's apt sources name the mirror the base is built from (this machine reaches only Debian's).
MACHINE_APT_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
# Extra CAs the machine trusts (a TLS-inspecting egress here); copied into the base so pip works in hosts.
MACHINE_CA_DIR = Path("/usr/local/share/ca-certificates")
# A real Ubuntu workstation has the `render` group (systemd creates it); minbase Debian does not.
RENDER_GROUP = "render"

# --- hosts (radeonlab/sandbox/hosts.py) ---
# Machine-wide address leases, so two sandboxes (two test sessions) never pick the same address:port.
LEASE_DIR = Path(os.environ.get("RADEONLAB_SANDBOX_LEASES", "/run/radeonlab-sandbox/leases"))
MAX_HOSTS = 200  # host numbers 1..MAX_HOSTS -> HOST_ADDRESS_PREFIX+N, HOST_PORT_BASE+N
SSHD_START_TIMEOUT = 45.0  # seconds for a host's sshd to answer after start (a loaded 2-core machine)
HOST_STOP_TIMEOUT = 10.0  # seconds for a host's processes to vanish after the kill
HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The simulated init (pid 1 of each host) is copied to this path inside the host.
HOST_INIT_PATH = "/usr/local/sbin/radeonlab-sandbox-init"
# SIMULATED `reboot` (first on the hosts' PATH and sudo's secure_path): asks the simulated init to reboot the
# host (host_init.py); where a card waits for its driver, the driven sysfs trees are mounted from here.
HOST_REBOOT_PATH = "/usr/local/sbin/reboot"
BOOT_DRIVEN_PATH = "/run/radeonlab-simulated/boot-driven"
CARDS = (
    "rx7900xtx",
    "rx6700xt",
    "rx9070xt",
    "strixhalo",
)  # the simulated cards (radeonlab/sandbox/simcards.py)

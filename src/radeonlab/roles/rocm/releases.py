"""What AMD publishes, as data: ROCm releases, Core SDK apt layouts, distributions, package names.

Each fact names where it was read. Public snapshots were read 2026-12 (the `search`/`fetch` tools); a date
marked "docs/notes/rocm-facts.md" was taken from the project's field notes and not found again in a public
source.

Sources quoted below:
- [S1] ROCm/rocm-docs docs/install/include/200-install.rst @0c31064a (AMD's install selector for ROCm
  10.0.0): per-target meta packages `amdrocm10.0-<gfx>` and the all-targets `amdrocm10.0`; Ubuntu 26.04 /
  24.04.4 / 22.04.5 and Debian 12 / 13; key dearmored into /etc/apt/keyrings/amdrocm.gpg; it registers
  `https://stable.repo.amd.com/rocm/core/packages/<distro>/ stable main` as a deb822 file.
- [S2] hanzoai/ROCm (a fork of ROCm/ROCm) docs/install/include/200-install.rst @354e0c70 (the selector of
  the 7.13 Core SDK): "all GPUs" -> `deb [arch=amd64 signed-by=/etc/apt/keyrings/amdrocm.gpg]
  https://repo.amd.com/rocm/packages-multi-arch/<distro> stable main`, "Radeon / Instinct / Ryzen" (per
  family) -> `https://repo.amd.com/rocm/packages/<distro> stable main`; key
  `https://repo.amd.com/rocm/packages/gpg/rocm.gpg`; list file /etc/apt/sources.list.d/rocm.list;
  distros ubuntu2604, ubuntu2404, ubuntu2204, debian13, debian12.
- [S3] ROCm/rocm-docs docs/about/transition-guide-TheRock (docs 10.0): "The transition from the legacy ROCm
  release stream began with ROCm Core SDK 7.14.0, the first production release. ROCm 10.0.0 is the latest
  production release"; install directory /opt/rocm/core-10.0; the amdrocm meta package "configures
  update-alternatives and provides backward-compatible symlinks for /opt/rocm/bin, /opt/rocm/lib".
- [S4] ROCm/rocm-docs docs/about/release-notes.md @15846f3d: ROCm 10.1.0 notes (Ubuntu 26.04.1, 24.04.5,
  PyTorch 2.14.0); the newer transition guide (@9bcf25db) calls 10.1.0 the latest production release
  (roles/amd_releases.py, where the release table is).
- [S5] the same selector's note "If you have ROCm 7.2.4 or older installed, please uninstall it before
  proceeding" [S1]: the two streams do not share a host; switching streams removes the other one.
"""

from __future__ import annotations

from radeonlab.roles import amd_releases
from radeonlab.roles.amd_releases import Release
from radeonlab.roles.gpu import table

# The releases, their streams, repositories and torch sets are ONE table: roles/amd_releases.py. Below: what
# this role needs of it, and the distribution/package-layout facts of AMD's install selectors.
LEGACY_LAST = next(r.version for r in amd_releases.RELEASES if r.stream == "legacy")  # 7.2.4 ([S5])
LEGACY_FIRST_SUPPORTED = "6.0"  # the oldest release the role's layout (keyrings, signed-by) was written for
CORE_SDK_STREAMS = ("coresdk", "coresdk-legacy-multi-arch")  # both are rocm_stream "coresdk" here
# Core SDK releases by version ("10.1.0"), newest first.
CORE_SDK_RELEASES: dict[str, Release] = {
    r.version: r for r in amd_releases.RELEASES if r.stream in CORE_SDK_STREAMS
}
NEWEST_PRODUCTION = amd_releases.NEWEST_PRODUCTION
DEFAULT_RELEASE = amd_releases.default_release()

# Distribution codename -> AMD's Core SDK distro directory ([S1], [S2]). Debian has its own directories.
CORE_SDK_DISTROS: dict[str, str] = {
    "jammy": "ubuntu2204",
    "noble": "ubuntu2404",
    "resolute": "ubuntu2604",  # Ubuntu 26.04: amdgpu-install/31.50/ubuntu/resolute in [S1]
    "bookworm": "debian12",
    "trixie": "debian13",
}
# Distribution codename -> the legacy stream's Ubuntu suite. AMD never published 7.2.x for Ubuntu 26.04
# (the legacy stream ended before it); Debian borrows the Ubuntu suites (roles/rocm/defaults.py).
LEGACY_SUITES: dict[str, str] = {"jammy": "jammy", "noble": "noble", "bookworm": "jammy", "trixie": "noble"}

# Exact gfx targets with a per-target meta package `amdrocm<ver>-<gfx>` in the multi-arch layout ([S1]), and
# the per-family layout's meta packages `amdrocm<ver>-<family>` with the targets each carries: both derived
# from the one GPU table (roles/gpu/table.py, where the rows and their sources are).
MULTI_ARCH_TARGETS: tuple[str, ...] = table.MULTI_ARCH_TARGETS
FAMILY_PACKAGES: dict[str, tuple[str, ...]] = table.FAMILY_PACKAGES

LAYOUTS = ("multi-arch", "family")


def series(version: str) -> str:
    """ "10.0.0" -> "10.0", "7.2.4" -> "7.2"."""
    return ".".join(str(version).strip().split(".")[:2])


def core_sdk_release(version: str) -> Release | None:
    """The Core SDK release a rocm_version names as AMD writes it ("10.1", "10.1.0", "7.14.1"; a series is
    its newest patch), or None when AMD published none (10.7, 10.0.9)."""
    found = amd_releases.find(version)
    return found if found is not None and found.stream in CORE_SDK_STREAMS else None

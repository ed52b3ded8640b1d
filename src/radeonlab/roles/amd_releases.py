"""AMD's ROCm releases as the product believes them: ONE table, each row with its source.

Every other table of the product derives from this one (roles/rocm/releases.py and defaults.py: versions,
repositories, keys, the default release; roles/python_stack/defaults.py: AMD_WHEELS and the default torch;
inventories/home.py). tests/unit/test_amd_world.py compares it with AMD's documents as the test bed keeps them
(src/radeonlab/sandbox/amdworld/*.yaml) and fails on any difference not listed in DECLARED_CHOICES below.
No pyinfra and no other radeonlab import here: both roles import it.

Sources (as named in sandbox/amdworld/README.md, read 2026-12):
- [VERSIONS] ROCm/rocm-docs docs/release/versions.rst @9bcf25db1e77: release history, dates.
- [TRANSITION] ROCm/rocm-docs docs/about/transition-guide-TheRock.md @9bcf25db: "10.1.0 is the latest
  production release".
- [NOTES101] ROCm/rocm-docs docs/about/release-notes.md @15846f3d: 10.1.0, PyTorch 2.14.0.
- [RELEASES] ROCm/TheRock RELEASES.md: the aggregate index https://stable.repo.amd.com/rocm/whl-next/, the
  apt repository stable.repo.amd.com/rocm/core/packages/<distro> (suite stable, component main), the
  torch <-> torchaudio <-> torchvision matrix (2.14 <-> 2.11 <-> 0.29, 2.13 <-> 2.11 <-> 0.28, 2.12 <-> 2.11
  <-> 0.27).
- [LEGACY] ROCm/TheRock docs/packaging/legacy_multi_arch_releases.md @b9fdc4f1: releases before 10.0 (7.14.x)
  stay at repo.amd.com/rocm/{packages-multi-arch,whl-multi-arch}/, key packages-multi-arch/gpg/rocm.gpg.
- [INSTALL100] ROCm/rocm-docs docs/install/include/200-install.rst @0c31064a (10.0 selector:
  torch[device-gfx1100]==2.13.0+rocm10.0.0, torchvision 0.28.0, torchaudio 2.11.0.2).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Location:
    """Where one of AMD's streams publishes: apt repository (+ /<distro dir or version>/ <suite> <component>),
    its signing key, and the Python index (empty: AMD publishes no wheels there)."""

    apt_repo: str
    apt_key: str
    suite: str  # "{codename}": the distribution's own codename (legacy stream)
    component: str
    python_index: str
    source: str


# AMD's stream names [RELEASES], [LEGACY]; the product's rocm_stream is "coresdk" for the first two (the
# amdrocm<ver>-<gfx> packages) and "legacy" for the third.
LOCATIONS: dict[str, Location] = {
    "coresdk": Location(
        "https://stable.repo.amd.com/rocm/core/packages/{distro}/",
        "https://stable.repo.amd.com/rocm/gpg/packages.gpg",
        "stable", "main", "https://stable.repo.amd.com/rocm/whl-next/", "[RELEASES], [INSTALL100]",
    ),
    "coresdk-legacy-multi-arch": Location(
        "https://repo.amd.com/rocm/packages-multi-arch/{distro}/",
        "https://repo.amd.com/rocm/packages-multi-arch/gpg/rocm.gpg",
        "stable", "main", "https://repo.amd.com/rocm/whl-multi-arch/", "[LEGACY]",
    ),
    "legacy": Location(
        "https://repo.radeon.com/rocm/apt/{version}/",
        "https://repo.radeon.com/rocm/rocm.gpg.key",
        "{codename}", "main", "", "[LEGACY]; repo.radeon.com's own layout",
    ),
}  # fmt: skip


@dataclass(frozen=True)
class Release:
    """One ROCm release: version, date, AMD's stream, and (Core SDK) the torch set AMD's index pairs."""

    version: str  # "10.1.0", as AMD writes it
    date: str
    stream: str  # a LOCATIONS key
    torch: str = ""  # public versions on AMD's index; empty: no AMD wheels known for this release
    torchvision: str = ""
    torchaudio: str = ""
    source: str = ""

    @property
    def series(self) -> str:
        """ "10.1.0" -> "10.1": the <ver> of amdrocm<ver>-<gfx> and /opt/rocm/core-<ver>."""
        return ".".join(self.version.split(".")[:2])

    @property
    def local(self) -> str:
        """The local version label of AMD's wheels for this release: "rocm10.1.0" [RELEASES]."""
        return f"rocm{self.version}"

    @property
    def location(self) -> Location:
        return LOCATIONS[self.stream]


# Newest first, as [VERSIONS] lists them. Patch numbers AMD's documents do not give are chosen and marked so.
RELEASES: tuple[Release, ...] = (
    Release("10.1.0", "2026-10-05", "coresdk", "2.14.0", "0.29.0", "2.11.0",
            "[VERSIONS], [TRANSITION], [NOTES101] torch 2.14.0; [RELEASES] matrix 2.14 <-> torchvision 0.29 "
            "<-> torchaudio 2.11 (patch .0 of torchvision/torchaudio chosen here: no AMD document gives it)"),
    Release("10.0.0", "2026-08-26", "coresdk", "2.13.0", "0.28.0", "2.11.0",
            "[VERSIONS]; [INSTALL100] torch 2.13.0, torchvision 0.28.0 (torchaudio 2.11.0.2: the role pins "
            "torchaudio by series, 2.11.*)"),
    Release("7.14.1", "2026-09-02", "coresdk-legacy-multi-arch", "2.12.0", "0.27.0", "2.11.0",
            "[VERSIONS], [LEGACY]; torch 2.12.0 chosen here (AMD's documents give no torch for 7.14.x; "
            "2.12 <-> 0.27 <-> 2.11 from the [RELEASES] matrix, as for 7.14.0)"),
    Release("7.14.0", "2026-07-15", "coresdk-legacy-multi-arch", "2.12.0", "0.27.0", "2.11.0",
            "[VERSIONS], [LEGACY]; torch[device-gfx1151]==2.12.0+rocm7.14.0 as AMD's published example"),
    Release("7.2.4", "2026-05-29", "legacy", source="[VERSIONS]; the last repo.radeon.com release"),
    Release("7.2.3", "2026-05-04", "legacy", source="[VERSIONS]"),
    Release("7.2.2", "2026-04-14", "legacy", source="[VERSIONS]"),
    Release("7.2.1", "2026-03-25", "legacy", source="[VERSIONS]"),
    Release("7.2.0", "2026-01-21", "legacy", source="[VERSIONS]"),
)  # fmt: skip

NEWEST_PRODUCTION = "10.1.0"  # [TRANSITION]
# The release the product installs by default (rocm_version, pytorch_version, inventories/home.py).
DEFAULT_RELEASE = "10.1.0"

# Where the product knowingly differs from AMD's documents (tests/unit/test_amd_world.py accepts exactly
# these).
DECLARED_CHOICES: dict[str, str] = {
    # The legacy stream (repo.radeon.com) is outside AMD's 10.x matrix; kept for Ubuntu 22.04/24.04 hosts
    # that must stay on it. Older legacy releases (6.0 and later, not in AMD's list) are accepted too.
    "legacy-7.2": "legacy releases 7.2.x kept (and 6.0-7.1 accepted) outside AMD's 10.x matrix",
    # AMD's documents give torch only for 10.0 and 10.1; the 7.14.x wheels' torch is the product's choice.
    "torch-7.14": "torch 2.12.0 for 7.14.0 and 7.14.1",
    # The patch numbers of torchvision/torchaudio where AMD gives only the series (pinned by series anyway).
    "patch-numbers": "torchvision/torchaudio .0 patches where AMD's matrix gives a series",
    # Support matrix (roles/rocm/matrix.py): Ubuntu 26.04.1 and 24.04.5 (HWE 7.0) are listed from AMD's
    # 10.1.0 release notes, which support-matrix.yaml records only as a comment.
    "matrix-10.1-rows": "Ubuntu 26.04.1 (GA 7.0) and 24.04.5 (HWE 7.0) listed for Radeon from the 10.1 notes",
    # Debian 12/13 hosts with Radeon cards or Ryzen APUs are provisioned (with one warning naming the matrix):
    # AMD lists Debian only for Instinct parts but publishes its Debian repositories.
    "debian-provisioned": "Debian 12/13 provisioned for Radeon and Ryzen APUs, with a warning",
    # RHEL is in AMD's matrix; the role installs from apt repositories only and refuses it.
    "rhel-refused": "RHEL 10.2 / 9.8 refused (the role is apt-only)",
    # The 7.13 selector's Instinct family packages (-gfx950, -gfx94x, -gfx90a, -gfx908): radeonlab provisions
    # Radeon workstations and APUs; an Instinct host is served by the multi-arch layout's per-target package.
    "instinct-no-family": "no per-family package for Instinct targets (multi-arch layout only)",
}


def find(version: str) -> Release | None:
    """The release a rocm_version names as AMD writes it ("10.1", "10.1.0", "7.14.1"; a series names its
    newest patch), or None when AMD published none."""
    version = str(version).strip()
    for release in RELEASES:  # newest first
        if version in (release.version, release.series):
            return release
    return None


def default_release() -> Release:
    found = find(DEFAULT_RELEASE)
    assert found is not None, DEFAULT_RELEASE
    return found

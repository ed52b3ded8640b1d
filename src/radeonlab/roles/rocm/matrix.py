"""AMD's ROCm support matrix for Radeon cards and Ryzen APUs, as data, and the rule the role applies to it.

Sources:
- [OSSUPPORT] ROCm/rocm-docs docs/data/os-support.yaml @1d2ba3f7b017 (ROCm 10.x): Radeon on Ubuntu 26.04
  (GA kernel 7.0), 24.04.4 (HWE 6.17, not the GA 6.8), 22.04.5 (HWE 6.8), RHEL 10.2 / 9.8; Ryzen APUs on
  Ubuntu 26.04 (GA 7.0) and 24.04.4 (OEM 6.17). Debian appears only under Instinct parts.
- [NOTES101] ROCm/rocm-docs docs/about/release-notes.md @15846f3d: 10.1.0 adds Ubuntu 26.04.1 and 24.04.5
  with HWE 7.0 (listed for Radeon here: the notes do not name the part, Radeon is the matrix they extend).
- [PREREQ] ROCm/rocm-docs docs/install/include/100-prerequisites.rst @11247a37: APUs need the OEM kernel on
  Ubuntu 24.04.
- Which gfx target is an APU: AMD's device-extra list (TheRock RELEASES.md; Ryzen AI Max+ 395 gfx1151,
  Ryzen AI 9 HX 375 gfx1150, Ryzen 7 7840U gfx1103, Radeon 680M gfx1035, Raphael iGPU gfx1036).

The rule: a host outside the matrix is provisioned with ONE warning naming the matrix. AMD says such a host is
not supported, not that ROCm cannot work there; it still publishes its Debian 12/13 repositories, which is
what the role installs from. A distribution AMD publishes no repository for is refused elsewhere
(repos.check_supported / check_request). RHEL is in AMD's matrix but not an apt distribution: the role refuses
it (a declared choice, roles/amd_releases.py DECLARED_CHOICES).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Listed:
    """One row of AMD's matrix: a distribution release and the kernel AMD lists with it."""

    distro: str  # os-release NAME's first word: "Ubuntu", "RHEL"
    version: str  # as AMD writes it: "24.04.4"
    kernel: str  # "HWE 6.17", "GA 7.0", "OEM 6.17"; empty: AMD names none (RHEL)
    source: str

    @property
    def release(self) -> tuple[int, int]:
        """ "24.04.4" -> (24, 4): what pyinfra's LinuxDistribution fact gives as major, minor."""
        major, minor = (int(x) for x in self.version.split(".")[:2])
        return major, minor

    @property
    def kernel_series(self) -> str:
        return self.kernel.split()[-1] if self.kernel else ""


MATRIX: dict[str, tuple[Listed, ...]] = {
    "radeon": (
        Listed("Ubuntu", "26.04", "GA 7.0", "[OSSUPPORT]"),
        Listed("Ubuntu", "26.04.1", "GA 7.0", "[NOTES101]"),
        Listed("Ubuntu", "24.04.4", "HWE 6.17", "[OSSUPPORT]"),
        Listed("Ubuntu", "24.04.5", "HWE 7.0", "[NOTES101]"),
        Listed("Ubuntu", "22.04.5", "HWE 6.8", "[OSSUPPORT]"),
        Listed("RHEL", "10.2", "", "[OSSUPPORT]"),
        Listed("RHEL", "9.8", "", "[OSSUPPORT]"),
    ),
    "ryzen": (
        Listed("Ubuntu", "26.04", "GA 7.0", "[OSSUPPORT]"),
        Listed("Ubuntu", "24.04.4", "OEM 6.17", "[OSSUPPORT], [PREREQ]"),
    ),
}
MATRIX_NAME = "AMD's ROCm 10.x support matrix (rocm-docs docs/data/os-support.yaml)"
APU_TARGETS = frozenset({"gfx1035", "gfx1036", "gfx1103", "gfx1150", "gfx1151"})
PART_NAMES = {"radeon": "Radeon", "ryzen": "Ryzen APUs"}
PYINFRA_NAMES = {"RedHat": "RHEL"}  # pyinfra's LinuxDistribution name -> AMD's


def parts(gfx_targets: Iterable[str | None]) -> list[str]:
    """The matrix columns a host's GPUs fall under ("radeon", "ryzen"); a host without GPUs: radeon."""
    found = {"ryzen" if t in APU_TARGETS else "radeon" for t in gfx_targets if t}
    return sorted(found) or ["radeon"]


def kernel_series(uname_r: str | None) -> str:
    """ "6.17.0-1028-oem" -> "6.17" (empty when unknown)."""
    head = (uname_r or "").split("-", 1)[0].split(".")
    return ".".join(head[:2]) if len(head) >= 2 and all(p.isdigit() for p in head[:2]) else ""


def listed_text(part: str) -> str:
    return ", ".join(f"{r.distro} {r.version}" + (f" ({r.kernel})" if r.kernel else "") for r in MATRIX[part])


def outside_matrix(
    distro: str | None, major: int | None, minor: int | None, uname_r: str | None, part: str
) -> str | None:
    """Why this host is outside AMD's matrix for this part (one line, no host name), or None when listed.

    Listed means: a row of the same distribution and major.minor release whose kernel series is the running
    kernel's (Ubuntu point releases differ by their kernel: 24.04 with the GA 6.8 kernel is not listed)."""
    distro = PYINFRA_NAMES.get(distro or "", distro)
    kernel = kernel_series(uname_r)
    rows = [r for r in MATRIX[part] if r.distro == distro and r.release == (major, minor)]
    if any(not r.kernel_series or r.kernel_series == kernel for r in rows):
        return None
    numbered = f"{major}.{minor:02d}" if distro == "Ubuntu" and minor is not None else f"{major}"
    release = f"{distro or 'unknown distribution'} {numbered}"
    if distro == "Debian":
        why = f"{release}: AMD lists Debian only for Instinct parts, not for {PART_NAMES[part]}"
    elif rows:
        kernels = " or ".join(r.kernel for r in rows)
        running = kernel or uname_r or "?"
        why = f"{release} with kernel {running}: AMD lists it with {kernels} for {PART_NAMES[part]}"
    else:
        why = f"{release} is not listed for {PART_NAMES[part]}"
    return f"{why} (listed: {listed_text(part)})"


def matrix_warning(
    distro: str | None,
    major: int | None,
    minor: int | None,
    uname_r: str | None,
    gfx_targets: Iterable[str | None],
) -> str | None:
    """The one warning for a host (every part it has), or None when AMD's matrix lists it."""
    problems = [outside_matrix(distro, major, minor, uname_r, part) for part in parts(gfx_targets)]
    found = [p for p in problems if p]
    return f"{'; '.join(found)}. {MATRIX_NAME}; provisioning anyway, unsupported by AMD" if found else None

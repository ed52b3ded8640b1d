"""What the ROCm role writes, computed from the distribution and the role's data: pure functions.

No pyinfra here: tests feed (distribution fact, data) and compare the sources lines, pin contents and
package lists; `radeonlab.roles.rocm` turns them into operations.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pyinfra.api.exceptions import DeployError
from radeonlab.roles.gpu.cards import core_sdk_family, version_tuple
from radeonlab.roles.rocm.defaults import SUPPORTED_DISTROS

SUPPORTED_TEXT = "Ubuntu 22.04/24.04, Debian 12/13"


@dataclass(frozen=True)
class Distro:
    name: str | None  # "Ubuntu", "Debian"
    major: int | None
    minor: int | None
    codename: str | None  # jammy, noble, bookworm, trixie

    @property
    def label(self) -> str:
        version = (
            f"{self.major}.{self.minor:02d}"
            if self.name == "Ubuntu" and self.minor is not None
            else self.major
        )
        return f"{self.name or 'unknown distribution'} {version or ''} ({self.codename or '?'})".replace(
            "  ", " "
        )


def distro_from_fact(fact: Mapping[str, Any]) -> Distro:
    """pyinfra's LinuxDistribution fact -> Distro (the codename from os-release)."""
    meta = fact.get("release_meta") or {}
    codename = meta.get("VERSION_CODENAME") or meta.get("UBUNTU_CODENAME") or None
    return Distro(fact.get("name"), fact.get("major"), fact.get("minor"), codename)


def check_supported(host_name: str, distro: Distro) -> str:
    """The distribution's codename, or a one-line DeployError naming the host."""
    codename = SUPPORTED_DISTROS.get((distro.name or "", distro.major or 0))
    if codename is None:
        raise DeployError(
            f"{host_name}: {distro.label} is not supported by radeonlab's ROCm role "
            f"(supported: {SUPPORTED_TEXT})"
        )
    return codename


def version_dir(version: str) -> str:
    """AMD's directory for a release: a .0 release is published as "7.2", not "7.2.0"."""
    parts = version.strip().split(".")
    if len(parts) == 3 and parts[2] == "0":
        parts = parts[:2]
    return ".".join(parts)


def series(version: str) -> str:
    """ "7.2.4" -> "7.2": the major.minor a PyTorch wheel index or driver repository is named after."""
    return ".".join(version.strip().split(".")[:2])


def _deb(keyring: str, url: str, suite: str, component: str = "main") -> str:
    return f"deb [arch=amd64 signed-by={keyring}] {url} {suite} {component}"


def legacy_sources(data: Mapping[str, Any], codename: str) -> list[str]:
    """The lines of /etc/apt/sources.list.d/rocm.list for the legacy stream."""
    version = str(data["rocm_version"])
    suite = data["rocm_legacy_suites"][codename]
    vdir = version_dir(version)
    lines = [_deb(data["rocm_keyring"], f"{data['rocm_repo_url'].rstrip('/')}/{vdir}", suite)]
    if version_tuple(version) >= version_tuple(str(data["rocm_graphics_since"])):
        graphics = f"{data['rocm_graphics_repo_url'].rstrip('/')}/{vdir}/ubuntu"
        lines.append(_deb(data["rocm_keyring"], graphics, suite))
    return lines


def coresdk_sources(data: Mapping[str, Any], codename: str) -> list[str]:
    """The lines of /etc/apt/sources.list.d/amdrocm.list for the Core SDK stream."""
    url = f"{data['rocm_coresdk_repo_url'].rstrip('/')}/{data['rocm_coresdk_dirs'][codename]}"
    return [_deb(data["rocm_coresdk_keyring"], url, data["rocm_coresdk_suite"])]


def driver_version(data: Mapping[str, Any]) -> str | None:
    """The amdgpu driver repository version paired with the ROCm release (None when unknown)."""
    explicit = str(data.get("rocm_amdgpu_version") or "")
    return explicit or data["rocm_amdgpu_versions"].get(series(str(data["rocm_version"])))


def driver_sources(data: Mapping[str, Any], codename: str) -> list[str]:
    """The line of /etc/apt/sources.list.d/amdgpu.list (the kernel driver, always from repo.radeon.com)."""
    version = driver_version(data)
    if version is None:
        raise ValueError(
            f"no amdgpu driver version known for ROCm {data['rocm_version']}: set rocm_amdgpu_version"
        )
    suite = data["rocm_legacy_suites"][codename]
    url = f"{data['rocm_amdgpu_repo_url'].rstrip('/')}/{version}/ubuntu"
    return [_deb(data["rocm_keyring"], url, suite)]


def pin(origin: str, priority: int = 600) -> str:
    """An apt preferences file that prefers the ROCm repository over the distribution's own ROCm."""
    return f"Package: *\nPin: release o={origin}\nPin-Priority: {priority}\n"


def legacy_packages(data: Mapping[str, Any]) -> list[str]:
    return list(data["rocm_packages_full_list"] if data["rocm_packages_full"] else data["rocm_packages"])


def coresdk_packages(data: Mapping[str, Any], gfx_targets: Iterable[str | None]) -> list[str]:
    """One meta package per GPU family present (amdrocm7.12-gfx110x, ...), plus the configured extras."""
    families = sorted({f for f in (core_sdk_family(g) for g in gfx_targets) if f})
    template = str(data["rocm_coresdk_package_template"])
    version = series(str(data["rocm_version"]))
    return [template.format(version=version, family=f) for f in families] + list(
        data["rocm_coresdk_extra_packages"]
    )


def torch_pairing_problem(rocm_version: str, torch_version: str, pairing: Mapping[str, str]) -> str | None:
    """Why this torch release does not pair with this ROCm release, or None when it does.

    A pairing "7.2" accepts any 7.2.x; "6.2.4" accepts only 6.2.4.
    """
    wanted = pairing.get(series(torch_version))
    if wanted is None:
        return f"torch {torch_version} has no known ROCm pairing (PYTORCH_ROCM_PAIRING)"
    have = version_tuple(rocm_version)
    want = version_tuple(wanted)
    if (
        tuple(str(rocm_version).split("."))[: len(wanted.split("."))] == tuple(wanted.split("."))
        or have == want
    ):
        return None
    return f"torch {torch_version} is built for ROCm {wanted}, not ROCm {rocm_version}"

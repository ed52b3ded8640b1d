"""What the ROCm role writes, computed from the distribution and the role's data: pure functions.

No pyinfra here: tests feed (distribution fact, data) and compare the sources lines, pin contents and
package lists; `radeonlab.roles.rocm` turns them into operations.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pyinfra.api.exceptions import DeployError

from radeonlab.roles.gpu.cards import gfx_from_hsa_version, override_for, version_tuple
from radeonlab.roles.rocm import releases
from radeonlab.roles.rocm.defaults import SUPPORTED_DISTROS

SUPPORTED_TEXT = "Ubuntu 22.04/24.04/26.04, Debian 12/13"


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
    """The line of /etc/apt/sources.list.d/amdrocm.list for the Core SDK stream, in the chosen layout."""
    url = f"{_coresdk_base(data).rstrip('/')}/{data['rocm_coresdk_dirs'][codename]}"
    return [_deb(data["rocm_coresdk_keyring"], url, data["rocm_coresdk_suite"])]


def _legacy_multiarch(data: Mapping[str, Any]) -> bool:
    """True for a release AMD keeps at its legacy multi-arch repository (7.14.x, roles/amd_releases.py)."""
    release = releases.core_sdk_release(str(data["rocm_version"]))
    return release is not None and release.stream == "coresdk-legacy-multi-arch"


def _coresdk_base(data: Mapping[str, Any]) -> str:
    if _layout(data) == "family":
        return str(data["rocm_coresdk_repo_url"])
    legacy = _legacy_multiarch(data)  # 7.14.x: AMD's legacy multi-arch repository
    if legacy:
        return str(data["rocm_coresdk_legacy_multiarch_repo_url"])
    return str(data["rocm_coresdk_multiarch_repo_url"])


def _coresdk_key_url(data: Mapping[str, Any]) -> str:
    if _layout(data) == "family":
        return str(data["rocm_coresdk_family_key_url"])
    legacy = _legacy_multiarch(data)
    return str(data["rocm_coresdk_legacy_multiarch_key_url" if legacy else "rocm_coresdk_key_url"])


def _layout(data: Mapping[str, Any]) -> str:
    return str(data.get("rocm_coresdk_layout") or "multi-arch")


def check_request(data: Mapping[str, Any], codename: str) -> None:
    """Refuse, with one line (ValueError), what AMD never published: an unknown stream or layout, a ROCm
    version of neither stream, a stream/distribution pair AMD does not serve. Called before any change."""
    stream, version = str(data["rocm_stream"]), str(data["rocm_version"])
    if stream == "legacy":
        if releases.core_sdk_release(version) is not None or version_tuple(version) > version_tuple(
            releases.LEGACY_LAST
        ):
            raise ValueError(
                f"ROCm {version} is not a legacy-stream release (the legacy stream ended with "
                f"{releases.LEGACY_LAST}; Core SDK releases: {', '.join(releases.CORE_SDK_RELEASES)}; "
                "set rocm_stream: coresdk)"
            )
        if version_tuple(version) < version_tuple(releases.LEGACY_FIRST_SUPPORTED):
            raise ValueError(
                f"ROCm {version} is older than this role supports ({releases.LEGACY_FIRST_SUPPORTED})"
            )
        if codename not in data["rocm_legacy_suites"]:
            raise ValueError(
                f"AMD's legacy stream (ROCm {version}) has no packages for {codename}: the stream ended "
                f"before it; use rocm_stream: coresdk (ROCm {releases.DEFAULT_RELEASE.version})"
            )
    elif stream == "coresdk":
        if releases.core_sdk_release(version) is None:
            raise ValueError(
                f"AMD published no ROCm Core SDK {version} (known: "
                f"{', '.join(r.version for r in releases.CORE_SDK_RELEASES.values())}"
                f"; the legacy stream ends with {releases.LEGACY_LAST})"
            )
        if _layout(data) not in releases.LAYOUTS:
            raise ValueError(
                f"rocm_coresdk_layout must be one of {', '.join(releases.LAYOUTS)}, not {_layout(data)!r}"
            )
        if codename not in data["rocm_coresdk_dirs"]:
            raise ValueError(f"AMD's Core SDK has no repository for {codename}")
    else:
        raise ValueError(f"rocm_stream must be 'legacy' or 'coresdk', not {stream!r}")


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
    suite = data["rocm_amdgpu_suites"][codename]
    url = f"{data['rocm_amdgpu_repo_url'].rstrip('/')}/{version}/ubuntu"
    return [_deb(data["rocm_keyring"], url, suite)]


@dataclass(frozen=True)
class AptSource:
    """Everything the role writes to add one stream's apt repository: the key (fetched from `key_url` into
    `keyring`), the sources list at `list_path` with `lines` under a `comment`, and the pin at `pin_path`."""

    stream: str
    keyring: str
    key_url: str
    origin: str
    list_path: str
    pin_path: str
    lines: tuple[str, ...]
    pin: str
    comment: str


def apt_source(data: Mapping[str, Any], codename: str) -> AptSource:
    """The apt key, sources lines and pin of the configured stream on this distribution: the one place both
    the role's operations and the bench's Ansible anchor take them from. Raises ValueError (one line) for a
    request `check_request` refuses.

        source = apt_source({**DEFAULTS, "rocm_stream": "legacy", "rocm_version": "7.2.4"}, "noble")
        source.list_path  # "/etc/apt/sources.list.d/rocm.list"; source.lines: the repo.radeon.com lines
    """
    check_request(data, codename)
    stream = str(data["rocm_stream"])
    if stream == "legacy":
        keyring, key_url, origin = data["rocm_keyring"], data["rocm_key_url"], data["rocm_origin"]
        lines, comment = legacy_sources(data, codename), f"ROCm {data['rocm_version']} (legacy stream)"
    else:
        keyring = data["rocm_coresdk_keyring"]
        key_url = _coresdk_key_url(data)
        origin = data["rocm_coresdk_origin"] or urlsplit(_coresdk_base(data)).hostname
        lines = coresdk_sources(data, codename)
        comment = f"ROCm {data['rocm_version']} (coresdk stream, {_layout(data)} layout)"
    paths = stream_files(stream)
    return AptSource(
        stream=stream,
        keyring=str(keyring),
        key_url=str(key_url),
        origin=str(origin),
        list_path=paths["list"],
        pin_path=paths["pin"],
        lines=tuple(lines),
        pin=pin(str(origin)),
        comment=comment,
    )


def pin(origin: str, priority: int = 600) -> str:
    """An apt preferences file that prefers the ROCm repository over the distribution's own ROCm."""
    return f"Package: *\nPin: release o={origin}\nPin-Priority: {priority}\n"


def legacy_packages(data: Mapping[str, Any]) -> list[str]:
    return list(data["rocm_packages_full_list"] if data["rocm_packages_full"] else data["rocm_packages"])


def coresdk_packages(data: Mapping[str, Any], gfx_targets: Iterable[str | None]) -> list[str]:
    """The Core SDK meta packages for these GPUs, plus the configured extras.

    multi-arch: one `amdrocm<ver>-<gfx>` per exact target present (a mixed host gets one each), or the
    all-targets `amdrocm<ver>` when rocm_coresdk_all_targets is set or a target has no per-target package
    (AMD's list, releases.MULTI_ARCH_TARGETS: e.g. gfx1031). family: one `amdrocm<ver>-<family>` per family.
    Raises ValueError (one line) when a GPU has no package in the chosen layout.
    """
    version = series(str(data["rocm_version"]))
    targets = sorted({g for g in gfx_targets if g})
    if _layout(data) == "multi-arch":
        if data.get("rocm_coresdk_all_targets") or any(t not in releases.MULTI_ARCH_TARGETS for t in targets):
            names = [str(data["rocm_coresdk_all_targets_template"]).format(version=version)]
        else:
            template = str(data["rocm_coresdk_target_template"])
            names = [template.format(version=version, gfx=t) for t in targets]
    else:
        families = {t: family_of(t, str(data["rocm_version"])) for t in targets}
        if missing := [t for t, f in families.items() if f is None]:
            raise ValueError(
                f"the per-family Core SDK packages radeonlab installs serve no {', '.join(missing)} "
                "(set rocm_coresdk_layout: multi-arch)"
            )
        template = str(data["rocm_coresdk_package_template"])
        present = sorted({f for f in families.values() if f})  # all of them: a missing one raised above
        names = [template.format(version=version, family=f) for f in present]
    return names + list(data["rocm_coresdk_extra_packages"])


def family_of(gfx: str, rocm_version: str) -> str | None:
    """The per-family meta package family of a target: gfx1100 -> gfx110x, gfx1151 -> gfx1151; a target
    served through the HSA override gets its reference's family (gfx1031 runs as gfx1030: gfx103x)."""
    found = next((f for f, members in releases.FAMILY_PACKAGES.items() if gfx in members), None)
    reference = override_for(gfx, rocm_version) if found is None else None
    return found if reference is None else family_of(gfx_from_hsa_version(reference), rocm_version)


# Package names each stream installs (fnmatch patterns over dpkg's list): what a switch away removes.
STREAM_PACKAGE_PATTERNS: dict[str, tuple[str, ...]] = {
    "legacy": ("rocm", "rocm-*", "rocminfo", "hsa-rocr*", "hip-runtime-amd", "amd-smi-lib", "hipcc"),
    "coresdk": ("amdrocm*",),
}
_CORE_SDK_SERIES = re.compile(r"^amdrocm[a-z-]*?(\d+\.\d+)(?:-|$)")


def leftover_packages(data: Mapping[str, Any], installed: Iterable[str]) -> list[str]:
    """Installed ROCm packages that do not belong to the stream and release being installed: the other
    stream's (AMD: uninstall 7.2.4 or older before the Core SDK), and other Core SDK releases' meta and
    runtime packages (each brings its own /opt/rocm/core-<ver> onto the linker path through the view)."""
    stream, version = str(data["rocm_stream"]), series(str(data["rocm_version"]))
    out = []
    for name in sorted(set(installed)):
        owner = next(
            (
                o
                for o, patterns in STREAM_PACKAGE_PATTERNS.items()
                if any(fnmatch.fnmatchcase(name, p) for p in patterns)
            ),
            None,
        )
        other_release = owner == "coresdk" and (m := _CORE_SDK_SERIES.match(name)) and m[1] != version
        if owner is not None and (owner != stream or other_release):
            out.append(name)
    return out


def purge_commands(packages: Sequence[str]) -> list[str]:
    """Remove exactly `packages` (leftover_packages) with their configuration, nothing else: dpkg, not
    apt-get, which would also remove what depends on them (a user's own packages) and, with autoremove,
    whatever else on the system apt thinks unused. A package outside the list that depends on one of them:
    dpkg keeps that one, names the dependent, and exits non-zero, so the deploy stops there."""
    return ["DEBIAN_FRONTEND=noninteractive dpkg --purge " + shlex.join(packages)] if packages else []


def stream_files(stream: str) -> dict[str, str]:
    """The sources list and the pin each stream writes (a switch removes the other stream's)."""
    name = "rocm" if stream == "legacy" else "amdrocm"
    return {
        "list": f"/etc/apt/sources.list.d/{name}.list",
        "pin": f"/etc/apt/preferences.d/{name}-pin-600",
    }


def ld_paths(data: Mapping[str, Any]) -> list[str]:
    """Library folders for the dynamic linker: the /opt/rocm view only (Core SDK: it points at the selected
    /opt/rocm/core-<ver>; listing that too would put every library on the path twice)."""
    key = "rocm_ld_paths" if data["rocm_stream"] == "legacy" else "rocm_coresdk_ld_paths"
    return list(data[key])


def version_file(data: Mapping[str, Any]) -> str:
    """Where the installed release writes its version: /opt/rocm/.info/version (legacy) or the Core SDK's
    /opt/rocm/core-<ver>/.info/version."""
    if data["rocm_stream"] == "legacy":
        return str(data["rocm_version_file"])
    return str(data["rocm_coresdk_version_file"]).format(version=series(str(data["rocm_version"])))


def torch_pairing_problem(
    rocm_version: str, torch_version: str, pairing: Mapping[str, str | tuple[str, ...]]
) -> str | None:
    """Why this torch release does not pair with this ROCm release, or None when it does.

    `pairing`: torch series -> the ROCm release(s) its wheels are built for. A pairing "7.2" accepts any
    7.2.x; "6.2.4" accepts only 6.2.4.
    """
    found = pairing.get(series(torch_version))
    if found is None:
        return f"torch {torch_version} has no known ROCm pairing"
    wanted = (found,) if isinstance(found, str) else tuple(found)
    for want in wanted:
        parts = want.split(".")
        if tuple(str(rocm_version).split("."))[: len(parts)] == tuple(parts) or version_tuple(
            rocm_version
        ) == version_tuple(want):
            return None
    return f"torch {torch_version} is built for ROCm {' or '.join(wanted)}, not ROCm {rocm_version}"

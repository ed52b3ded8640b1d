"""The SIMULATED stand-in packages of the sandbox's AMD-shaped apt repository: names as ROCm's, payloads ours.

Each stand-in says in its Description that it is simulated. The tools print recorded real outputs (see
payload/standin.py); libraries are not faked: runtime packages ship only a marker file saying what they
stand in for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from radeonlab.sandbox import config

HERE = Path(__file__).resolve().parent
PAYLOAD = HERE / "payload"
RECORDED = HERE / "recorded"
MAINTAINER = "radeonlab sandbox <simulated-apt@radeonlab.invalid>"
SIMULATED_NOTE = "SIMULATED stand-in built by radeonlab's test bed; contains no AMD software."
MARKER_DIR = "share/radeonlab-simulated/packages"  # under the install prefix: one marker per stand-in

# A tool wrapper (a str.format template): finds standin.py beside its own install prefix (through the
# /opt/rocm link too).
TOOL_WRAPPER = PAYLOAD / "tool-wrapper.tmpl"

# rocm-core's postinst/prerm manage /opt/rocm with update-alternatives, as ROCm/rocm-core's do
# (rocm-core.postinst, rocm-core.prerm); the score omits upstream's install-time minutes so builds repeat.
ROCM_CORE_POSTINST = """#!/bin/sh
# SIMULATED rocm-core postinst (radeonlab sandbox): /opt/rocm -> {prefix} via update-alternatives.
set -e
if [ "$1" = configure ] && command -v update-alternatives >/dev/null; then
    update-alternatives --install /opt/rocm rocm {prefix} {score}
fi
exit 0
"""
ROCM_CORE_PRERM = """#!/bin/sh
# SIMULATED rocm-core prerm (radeonlab sandbox).
set -e
if [ "$1" = remove ] || [ "$1" = upgrade ]; then
    command -v update-alternatives >/dev/null && update-alternatives --remove rocm {prefix} || true
fi
exit 0
"""


@dataclass(frozen=True)
class Standin:
    """One .deb: control data plus the files it installs (absolute path -> (content, mode))."""

    name: str
    version: str
    summary: str
    depends: tuple[str, ...] = ()
    files: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    scripts: dict[str, str] = field(default_factory=dict)  # postinst / prerm
    architecture: str = config.APT_ARCH
    section: str = "devel"

    def control(self, installed_kb: int) -> str:
        fields = {
            "Package": self.name,
            "Version": self.version,
            "Architecture": self.architecture,
            "Maintainer": MAINTAINER,
            "Installed-Size": str(installed_kb),
            "Depends": ", ".join(self.depends),
            "Section": self.section,
            "Priority": "optional",
            "Description": f"{self.summary} (SIMULATED stand-in)\n {SIMULATED_NOTE}",
        }
        return "".join(f"{k}: {v}\n" for k, v in fields.items() if v)


def rocm_libpatch(version: str) -> str:
    """ROCm 7.2.4 -> "70204", the number AMD appends to every component version."""
    major, minor, patch = (version.split(".") + ["0", "0"])[:3]
    return f"{int(major)}{int(minor):02d}{int(patch):02d}"


def _marker(prefix: str, name: str, what: str) -> dict[str, tuple[bytes, int]]:
    text = f"{name}: {SIMULATED_NOTE}\nStands in for: {what}\n"
    return {f"{prefix}/{MARKER_DIR}/{name}": (text.encode(), 0o644)}


def _tool(prefix: str, tool: str, function: str, extra: str = "") -> dict[str, tuple[bytes, int]]:
    script = TOOL_WRAPPER.read_text().format(tool=tool, function=function, extra=extra)
    return {f"{prefix}/bin/{tool}": (script.encode(), 0o755)}


def _recordings(prefix: str, tool: str) -> dict[str, tuple[bytes, int]]:
    folder = RECORDED / tool
    return {
        f"{prefix}/share/radeonlab-simulated/{tool}/{p.name}": (p.read_bytes(), 0o644)
        for p in sorted(folder.iterdir())
    }


def runtime_standins(rocm_version: str, prefix: str, name_prefix: str, version_tail: str) -> list[Standin]:
    """rocm-core, hsa-rocr, hip-runtime-amd, rocminfo, rocm-smi-lib, amd-smi-lib installed under prefix.

    name_prefix lets the Core SDK stream carry the same payload under its own (simulated) names.
    version_tail is "<libpatch>-<build><dist suffix>", e.g. "70204-1~24.04".
    """
    comp = config.STANDIN_COMPONENT_VERSIONS
    major, minor, patch = (rocm_version.split(".") + ["0", "0"])[:3]
    hip = config.HIP_VERSION.get(rocm_version, f"{major}.{minor}.0-simulated")
    core = f"{name_prefix}rocm-core"
    core_files = {
        f"{prefix}/.info/version": (f"{major}.{minor}.{patch}\n".encode(), 0o644),
        f"{prefix}/libexec/radeonlab-simulated/standin.py": ((PAYLOAD / "standin.py").read_bytes(), 0o644),
        **_marker(prefix, core, "ROCm core version files and /opt/rocm link"),
    }
    score = ((int(major) - 3) * 14 + int(minor)) * 14 + int(patch)
    scripts = {}
    if prefix.startswith("/opt/rocm-"):  # the legacy layout; the Core SDK lives under /opt/rocm itself
        scripts = {
            "postinst": ROCM_CORE_POSTINST.format(prefix=prefix, score=score * 1000000),
            "prerm": ROCM_CORE_PRERM.format(prefix=prefix),
        }
    hip_version_files = _tool(prefix, "hipconfig", "hipconfig", extra=f", {hip!r}")
    return [
        Standin(
            core,
            f"{major}.{minor}.{patch}.{version_tail}",
            "ROCm core",
            depends=("python3",),
            files=core_files,
            scripts=scripts,
        ),
        Standin(
            f"{name_prefix}hsa-rocr",
            f"{comp['hsa-rocr']}.{version_tail}",
            "ROCr HSA runtime",
            depends=(core,),
            files=_marker(prefix, f"{name_prefix}hsa-rocr", "libhsa-runtime64"),
        ),
        Standin(
            f"{name_prefix}hip-runtime-amd",
            f"{hip.split('-')[0]}.{version_tail}",
            "HIP runtime",
            depends=(core, f"{name_prefix}hsa-rocr"),
            files={**hip_version_files, **_marker(prefix, f"{name_prefix}hip-runtime-amd", "libamdhip64")},
        ),
        Standin(
            f"{name_prefix}rocminfo",
            f"{comp['rocminfo']}.{version_tail}",
            "ROCm system info (rocminfo)",
            depends=(core, f"{name_prefix}hsa-rocr"),
            files={
                **_tool(prefix, "rocminfo", "rocminfo"),
                **_recordings(prefix, "rocminfo"),
                **_recordings(prefix, "errors"),
            },
        ),
        Standin(
            f"{name_prefix}rocm-smi-lib",
            f"{comp['rocm-smi-lib']}.{version_tail}",
            "ROCm SMI (rocm-smi)",
            depends=(core,),
            files={**_tool(prefix, "rocm-smi", "rocm_smi"), **_recordings(prefix, "rocm-smi")},
        ),
        Standin(
            f"{name_prefix}amd-smi-lib",
            f"{comp['amd-smi-lib']}.{version_tail}",
            "AMD SMI library (no amd-smi tool in the stand-in)",
            depends=(core,),
            files=_marker(prefix, f"{name_prefix}amd-smi-lib", "amd-smi and libamd_smi"),
        ),
    ]


def legacy_standins(rocm_version: str, dist_suffix: str) -> list[Standin]:
    """repo.radeon.com/rocm/apt/<ver>: the runtime stand-ins plus the rocm-hip-runtime and rocm metas."""
    tail = f"{rocm_libpatch(rocm_version)}-{config.STANDIN_BUILD}{dist_suffix}"
    runtime = runtime_standins(rocm_version, f"/opt/rocm-{rocm_version}", "", tail)
    names = [p.name for p in runtime]
    meta_version = runtime[0].version  # AMD's metas carry the ROCm version, like rocm-core
    hip_runtime = Standin(
        "rocm-hip-runtime",
        meta_version,
        "ROCm HIP runtime meta package",
        depends=("rocm-core", "hsa-rocr", "hip-runtime-amd", "rocminfo"),
        section="metapackages",
    )
    everything = Standin(
        "rocm",
        meta_version,
        "ROCm meta package (everything)",
        depends=(*names, "rocm-hip-runtime"),
        section="metapackages",
    )
    return [*runtime, hip_runtime, everything]


def amdgpu_standins(dist_suffix: str) -> list[Standin]:
    """repo.radeon.com/amdgpu/<x>/ubuntu: amdgpu-dkms, which here builds no module: it leaves a marker."""
    version = config.AMDGPU_DKMS_VERSION.format(build=config.STANDIN_BUILD, suffix=dist_suffix)
    marker = "/usr/share/radeonlab-simulated/amdgpu-dkms"
    text = f"amdgpu-dkms: {SIMULATED_NOTE}\nNo kernel module is built or installed.\n"
    return [
        Standin(
            "amdgpu-dkms",
            version,
            "amdgpu kernel driver (DKMS)",
            architecture="all",
            files={marker: (text.encode(), 0o644)},
            section="kernel",
        )
    ]


# The Core SDK's /opt/rocm view: AMD's amdrocm meta package "configures update-alternatives and provides
# backward-compatible symlinks for /opt/rocm/bin, /opt/rocm/lib" (roles/rocm/releases.py [S3]). The stand-in
# does the same for bin, lib and .info (the names and priorities of AMD's alternatives were not read).
CORESDK_POSTINST = """#!/bin/sh
# SIMULATED Core SDK view (radeonlab sandbox): /opt/rocm/{{bin,lib,.info}} -> {prefix}.
set -e
if [ "$1" = configure ] && command -v update-alternatives >/dev/null; then
    mkdir -p /opt/rocm
    update-alternatives --install /opt/rocm/bin rocm-core-bin {prefix}/bin {score} \\
        --slave /opt/rocm/lib rocm-core-lib {prefix}/lib \\
        --slave /opt/rocm/.info rocm-core-info {prefix}/.info
fi
exit 0
"""
CORESDK_PRERM = """#!/bin/sh
# SIMULATED Core SDK view (radeonlab sandbox).
set -e
if [ "$1" = remove ] || [ "$1" = upgrade ]; then
    update-alternatives --remove rocm-core-bin {prefix}/bin 2>/dev/null || true
fi
exit 0
"""


def coresdk_standins(
    sdk_version: str, families: dict[str, tuple[str, ...]], targets: tuple[str, ...]
) -> list[Standin]:
    """repo.amd.com/rocm/packages[-multi-arch]/<distro>: one runtime under /opt/rocm/core-<ver> with the
    metas of both layouts over it: amdrocm<ver>-<family>, amdrocm<ver>-<gfx> and the all-targets amdrocm<ver>.

    Only the meta names (and, in a family meta's summary, the targets AMD's selector sends to it) are AMD's:
    families and targets come from amdworld/coresdk-packages.yaml (amddata.py), never from the product. The
    runtime packages they depend on carry a "amdrocm<ver>-simulated-" prefix because their real names were
    not checked. No distribution suffix: the same files are served for every distro directory.
    """
    tail = f"{rocm_libpatch(sdk_version)}-{config.STANDIN_BUILD}"
    name_prefix = f"amdrocm{sdk_version}-simulated-"
    prefix = f"/opt/rocm/core-{sdk_version}"
    runtime = runtime_standins(sdk_version, prefix, name_prefix, tail)
    major, minor = (int(x) for x in sdk_version.split(".")[:2])
    core = runtime[0]
    score = major * 100 + minor
    core.scripts.update(
        postinst=CORESDK_POSTINST.format(prefix=prefix, score=score),
        prerm=CORESDK_PRERM.format(prefix=prefix),
    )
    lib_marker = f"{prefix}/lib/radeonlab-simulated-lib.txt"  # so /opt/rocm/lib is a real folder
    core.files[lib_marker] = (f"{SIMULATED_NOTE}\nNo libraries: ROCm {sdk_version}'s lib/.\n".encode(), 0o644)
    depends = tuple(p.name for p in runtime)
    # A family and a target may share a name (gfx1151): one package, as in AMD's repositories.
    summaries = {t: f"ROCm Core SDK for {t}" for t in targets}
    for family, members in families.items():
        if members != (family,):
            summaries[family] = f"ROCm Core SDK for {family} ({', '.join(members)})"
        summaries.setdefault(family, f"ROCm Core SDK for {family}")
    metas = [
        Standin(f"amdrocm{sdk_version}-{name}", core.version, text, depends=depends, section="metapackages")
        for name, text in sorted(summaries.items())
    ]
    everything = Standin(
        f"amdrocm{sdk_version}", core.version, "ROCm Core SDK, every GPU target", depends=depends,
        section="metapackages",
    )  # fmt: skip
    return [*runtime, *metas, everything]

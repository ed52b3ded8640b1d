"""SIMULATED ROCm tools for radeonlab's sandbox hosts: print RECORDED real outputs, never invented ones.

Installed by the stand-in `rocm-core` package as <prefix>/libexec/radeonlab-simulated/standin.py and run by
the stand-in <prefix>/bin/rocminfo, rocm-smi and hipconfig. The card is the host's simulated one: its KFD
topology (/sys/class/kfd/kfd/topology/nodes/*/properties) as the sandbox mounts it. The recordings live in
<prefix>/share/radeonlab-simulated/<tool>/ (shipped by the rocminfo / rocm-smi-lib stand-ins); where none
exists for the card the tool says so on stderr and exits 1. Runs on the hosts' python3 (Debian 12: 3.11).
"""

from __future__ import annotations

import grp
import os
import pwd
import sys
from pathlib import Path

KFD_NODES = Path("/sys/class/kfd/kfd/topology/nodes")
KFD_DEVICE = Path("/dev/kfd")
PREFIX = Path(__file__).resolve().parents[2]  # <prefix>/libexec/radeonlab-simulated/standin.py
RECORDED = PREFIX / "share" / "radeonlab-simulated"
# The access group rocminfo's recorded error names (Ubuntu/Debian since ROCm 5.x: "render").
DRM_GROUP = "render"

# gfx -> [(KFD device_id, recording)]: the first entry is used when the device id matches none.
ROCMINFO_RECORDINGS: dict[str, list[tuple[int, str]]] = {
    "gfx1100": [(0x744C, "rx7900xtx_gfx1100_rocm6.2.2.txt"), (0x7448, "w7900_gfx1100_rocm6.0.0.txt")],
    "gfx1101": [(0x747E, "rx7800xt_gfx1101_rocm6.3.4.txt")],
    "gfx1201": [(0x7550, "rx9070xt_gfx1201_rocm7.1.1.txt")],
    "gfx1151": [(0x1586, "strixhalo_8060s_gfx1151_rocm7.11-nightly.txt")],
}
# (gfx, arguments) -> recording; a leading "$ rocm-smi ..." prompt line in a recording is not printed.
ROCM_SMI_RECORDINGS: dict[tuple[str, tuple[str, ...]], str] = {
    ("gfx1100", ()): "rx7900xtx_rocm6.1.0_concise_no-marketing-name.txt",
    ("gfx1201", ()): "rx9070xt_rocm7.13_concise_new-layout_EXCERPT.txt",
    ("gfx1201", ("--showproductname",)): "rx9070xt_rocm7.13_showproductname_EXCERPT.txt",
}
ERROR_NO_KFD = "rocminfo_kfd_no-such-file_in-container_AS-POSTED.txt"
ERROR_NOT_IN_GROUP = "rocminfo_kfd_permission-denied_not-member-of-render-group_wrapped-3-lines.txt"
ERROR_RECORDED_USER = "fabi"  # the user name inside the recorded permission error


def gfx_name(target_version: int) -> str:
    """KFD gfx_target_version (major*10000 + minor*100 + stepping) -> LLVM name: 110000 -> gfx1100."""
    major, rest = divmod(target_version, 10000)
    minor, stepping = divmod(rest, 100)
    return f"gfx{major}{minor:x}{stepping:x}"


def kfd_gpus() -> list[tuple[str, int]]:
    """(gfx, device_id) of every GPU node; CPU nodes have gfx_target_version 0 and are skipped."""
    gpus = []
    for props in sorted(KFD_NODES.glob("*/properties")):
        fields = dict(line.split(None, 1) for line in props.read_text().splitlines() if " " in line)
        target = int(fields.get("gfx_target_version", "0").strip())
        if target:
            gpus.append((gfx_name(target), int(fields.get("device_id", "0").strip())))
    return gpus


def _recorded(tool: str, name: str) -> str:
    return (RECORDED / tool / name).read_text()


def _no_recording(tool: str, what: str) -> int:
    print(f"simulated {tool}: no recorded output for {what}", file=sys.stderr)
    return 1


def _kfd_error() -> tuple[str, str] | None:
    """(stdout, stderr) rocminfo prints when /dev/kfd cannot be opened read-write, or None when it can."""
    if not KFD_DEVICE.exists():
        return _recorded("errors", ERROR_NO_KFD), ""
    if os.access(KFD_DEVICE, os.R_OK | os.W_OK):
        return None
    user = pwd.getpwuid(os.getuid()).pw_name
    try:
        in_group = user in grp.getgrnam(DRM_GROUP).gr_mem
    except KeyError:
        in_group = False
    if in_group:  # e.g. a session older than the group change: no recording of that case, so say so
        return "", f"simulated rocminfo: no recorded output for /dev/kfd denied to {user} (in {DRM_GROUP})\n"
    return _recorded("errors", ERROR_NOT_IN_GROUP).replace(ERROR_RECORDED_USER, user, 1), ""


def rocminfo(argv: list[str]) -> int:
    """The recorded `rocminfo` of the simulated card (arguments such as --support change nothing)."""
    error = _kfd_error()
    if error is not None:
        sys.stdout.write(error[0])
        sys.stderr.write(error[1])
        return 1
    gpus = kfd_gpus()
    if len(gpus) != 1:
        return _no_recording("rocminfo", "+".join(g for g, _ in gpus) or "a host without a KFD GPU node")
    gfx, device_id = gpus[0]
    choices = ROCMINFO_RECORDINGS.get(gfx)
    if not choices:
        return _no_recording("rocminfo", gfx)
    name = next((n for d, n in choices if d == device_id), choices[0][1])
    sys.stdout.write(_recorded("rocminfo", name))
    return 0


def rocm_smi(argv: list[str]) -> int:
    """The recorded `rocm-smi [args]` of the simulated card, for the argument sets that were recorded."""
    gpus = kfd_gpus() if KFD_NODES.is_dir() else []
    gfx = "+".join(g for g, _ in gpus) or "a host without a KFD GPU node"
    name = ROCM_SMI_RECORDINGS.get((gfx, tuple(argv)))
    if name is None:
        return _no_recording("rocm-smi", f"{gfx} with arguments {argv!r}")
    lines = _recorded("rocm-smi", name).splitlines(keepends=True)
    if lines and lines[0].startswith("$ rocm-smi"):
        lines = lines[1:]
    sys.stdout.write("".join(lines))
    return 0


def hipconfig(argv: list[str], hip_version: str) -> int:
    """`hipconfig --version` prints the bare HIP version (no newline, like the real one); the rest is a
    short subset of `hipconfig --full`."""
    if argv[:1] in (["--version"], ["-v"]):
        sys.stdout.write(hip_version)
        return 0
    if argv[:1] in (["--rocmpath"], ["-R"]):
        sys.stdout.write(str(PREFIX))
        return 0
    if argv[:1] in (["--platform"], ["-P"]):
        sys.stdout.write("amd")
        return 0
    if argv and argv[0] not in ("--full", "-f"):
        return _no_recording("hipconfig", f"arguments {argv!r}")
    print(f"HIP version: {hip_version}\n\n==hipconfig\nROCM_PATH          :{PREFIX}\nHIP_PLATFORM       :amd")
    return 0

"""The SIMULATED AMD multi-arch torch of the sandbox wheel index (radeonlab/sandbox/wheels.py).

AMD's index serves torch as `torch[device-gfx1100]==2.13.0+rocm10.0.0`: a host-code wheel with one
`device-<gfx>` extra per target, each pulling `rocm-sdk-device-<gfx>` (TheRock RELEASES.md). Here the
machine's CPU torch is repacked with that version and those extras, and each device package is a stand-in
wheel holding a marker file, so pip resolves the extras for real. Both say SIMULATED inside.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from radeonlab.roles.python_stack.defaults import AMD_DEVICE_TARGETS, AMD_WHEELS
from radeonlab.roles.rocm.defaults import DEFAULTS as ROCM_DEFAULTS
from radeonlab.sandbox.wheelfiles import cache_dir, record_hash, sha256_file

TORCH_REPACK_MARKER = "torch/RADEONLAB_SANDBOX_REPACK.txt"
DEVICE_PACKAGE = "rocm-sdk-device-{gfx}"  # what AMD's device-<gfx> extra pulls in (TheRock RELEASES.md)


def _metadata_with_extras(metadata: str, version: str, targets: tuple[str, ...], device_version: str) -> str:
    head, sep, body = metadata.partition("\n\n")
    lines = [f"Version: {version}" if line.startswith("Version: ") else line for line in head.splitlines()]
    for gfx in targets:
        lines.append(f"Provides-Extra: device-{gfx}")
        lines.append(
            f'Requires-Dist: {DEVICE_PACKAGE.format(gfx=gfx)}=={device_version}; extra == "device-{gfx}"'
        )
    return "\n".join(lines) + "\n" + sep + body


def repack_torch(src: Path, dest: Path, local: str, targets: tuple[str, ...], device_version: str) -> Path:
    """SIMULATED: the CPU torch wheel as AMD's multi-arch torch is shaped: version <public>+<local>
    (2.13.0+rocm10.0.0), and one `device-<gfx>` extra per target pulling in `rocm-sdk-device-<gfx>`, so pip
    resolves `torch[device-gfx1100]==2.13.0+rocm10.0.0` for real. The code inside is still the CPU build;
    a marker file says so."""
    name, old_version = src.name.split("-")[:2]
    public = old_version.split("+", 1)[0]
    version = f"{public}+{local}"
    old_info, new_info = f"{name}-{old_version}.dist-info/", f"{name}-{version}.dist-info/"
    marker = (
        f"SIMULATED: radeonlab sandbox repack of {src.name} (sha256 {sha256_file(src)}) as {version} with "
        f"device extras for {', '.join(targets)}. The code is the CPU build: it stands in for AMD's ROCm "
        "build, which real workstations get from AMD's wheel index.\n"
    ).encode()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".partial")
    record_lines = []
    with (
        zipfile.ZipFile(src) as zin,
        zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zout,
    ):
        for info in zin.infolist():
            member = info.filename
            if member == old_info + "RECORD":
                continue
            data = zin.read(info)
            if member == old_info + "METADATA":
                data = _metadata_with_extras(data.decode(), version, targets, device_version).encode()
            new_name = new_info + member[len(old_info) :] if member.startswith(old_info) else member
            out = zipfile.ZipInfo(new_name, date_time=info.date_time)
            out.external_attr = info.external_attr
            zout.writestr(out, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=1)
            record_lines.append(f"{new_name},{record_hash(data)},{len(data)}")
        mark = zipfile.ZipInfo(TORCH_REPACK_MARKER, date_time=(2026, 1, 1, 0, 0, 0))
        mark.external_attr = 0o644 << 16
        zout.writestr(mark, marker)
        record_lines.append(f"{TORCH_REPACK_MARKER},{record_hash(marker)},{len(marker)}")
        record_lines.append(f"{new_info}RECORD,,")
        zout.writestr(new_info + "RECORD", "\n".join(record_lines) + "\n")
    tmp.replace(dest)
    return dest


def device_standin_wheel(gfx: str, version: str, dest_dir: Path) -> Path:
    """SIMULATED `rocm-sdk-device-<gfx>`: AMD's package holds that target's device code (~50 MB); this one
    holds a marker file only. pure-Python, so pip installs it on any host."""
    project = DEVICE_PACKAGE.format(gfx=gfx)
    module = project.replace("-", "_")
    dest = dest_dir / f"{module}-{version}-py3-none-any.whl"
    if dest.exists():
        return dest
    files = {
        f"{module}/SIMULATED.txt": (
            f"SIMULATED stand-in for AMD's {project} {version} (radeonlab sandbox): no device code.\n"
        ).encode(),
        f"{module}-{version}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n"
            f"Summary: SIMULATED stand-in for AMD's {gfx} device code (radeonlab sandbox)\n"
        ).encode(),
        f"{module}-{version}.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: radeonlab-sandbox\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    dest_dir.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".partial")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        record = []
        for member, data in files.items():
            info = zipfile.ZipInfo(member, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            z.writestr(info, data)
            record.append(f"{member},{record_hash(data)},{len(data)}")
        record_name = f"{module}-{version}.dist-info/RECORD"
        z.writestr(
            zipfile.ZipInfo(record_name, date_time=(2026, 1, 1, 0, 0, 0)),
            "\n".join([*record, f"{record_name},,"]) + "\n",
        )
    tmp.replace(dest)
    return dest


def amd_standins(cpu_torch: Path) -> dict[str, Path]:
    """The SIMULATED AMD multi-arch set for the default ROCm release: torch repacked with device extras, and
    a stand-in device package per target AMD's index has (roles/python_stack/defaults.py)."""
    wheels = AMD_WHEELS[".".join(str(ROCM_DEFAULTS["rocm_version"]).split(".")[:2])]
    device_version = wheels.local.removeprefix("rocm")
    digest = sha256_file(cpu_torch)[:16]
    name = cpu_torch.name.replace(cpu_torch.name.split("-")[1], f"{wheels.torch}+{wheels.local}")
    dest = cache_dir() / "repacked" / f"{digest}-{wheels.local}" / name
    out = {
        "torch-amd": dest
        if dest.exists()
        else repack_torch(cpu_torch, dest, wheels.local, AMD_DEVICE_TARGETS, device_version)
    }
    for gfx in AMD_DEVICE_TARGETS:
        out[DEVICE_PACKAGE.format(gfx=gfx)] = device_standin_wheel(
            gfx, device_version, cache_dir() / "devices"
        )
    return out

"""The SIMULATED AMD aggregate index of the sandbox wheel index (radeonlab/sandbox/wheels.py), generated from
AMD's documents (amdworld/python-packages.yaml and releases.yaml, read by amddata.py), never from the
product's tables.

For every release releases.yaml pairs with a torch (10.0.0 -> 2.13, 10.1.0 -> 2.14: the inventory's
rocm_version picks one), AMD's package graph [RELEASES, PACKAGING]:
- `rocm` as an SDIST (amdsdist.py): the selector, extras "", libraries, device-T, ...;
- `rocm-sdk-core`, `rocm-sdk-libraries`, `rocm-sdk-device-T` (requires rocm-sdk-libraries==V) and
  `amd-torch-device-T` (requires rocm-sdk-device-T==V): stand-in wheels holding a SIMULATED.txt only;
- torch `<torch>+rocm<V>`: the machine's CPU wheel repacked, requiring `rocm[libraries]==V`, extra
  device-T -> amd-torch-device-T==<the same torch version>, and a torch/_rocm_init.py whose initialize()
  calls rocm_sdk.initialize_process(preload_shortnames=..., check_version=V): torch's own __init__.py
  (the CPU wheel's too) already calls _rocm_init.initialize() when that module is in the wheel ("only ever
  added to the wheel if built for such a deployment", its comment says).
The code is the CPU build and the device wheels hold no kernels: a stand-in torch never sees a GPU. What
the sandbox can show is which device packages got installed (verify checks amd-torch-device-<gfx>).
Version numbers the data does not give are chosen in amddata.py (CHOSEN_PATCH).
"""

from __future__ import annotations

import os
import threading
import zipfile
from pathlib import Path

from radeonlab.sandbox import amddata
from radeonlab.sandbox.amdsdist import rocm_sdist
from radeonlab.sandbox.wheelfiles import cache_dir, record_hash, sha256_file

# Cache generation of everything made here: change it when what is generated changes (the cache keeps
# files by name, and a changed file under an old name would keep its old bytes).
GENERATION = "amd5"
TORCH_REPACK_MARKER = "torch/RADEONLAB_SANDBOX_REPACK.txt"
ROCM_INIT = "torch/_rocm_init.py"
DEFAULT_TARGET = "gfx1100"  # SIMULATED choice: the data says "a built-in default" without naming it


def _summary(what: str) -> str:
    return f"SIMULATED stand-in for AMD's {what} (radeonlab sandbox): no ROCm code inside"


def _metadata(metadata: str, version: str, requires: list[str], extras: dict[str, list[str]]) -> str:
    head, sep, body = metadata.partition("\n\n")
    lines = []
    for line in head.splitlines():
        if line.startswith("Version: "):
            line = f"Version: {version}"
        elif line.startswith("Summary: "):
            line = "Summary: " + _summary(f"torch {version}") + " (the CPU build, repacked)"
        lines.append(line)
    lines += [f"Requires-Dist: {r}" for r in requires]
    for extra, reqs in extras.items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {r}; extra == "{extra}"' for r in reqs]
    return "\n".join(lines) + "\n" + sep + body


def rocm_init(rocm: str) -> bytes:
    """torch/_rocm_init.py for a release (standins/payload/torch_rocm_init.py with its version set)."""
    text = (Path(__file__).parent / "standins" / "payload" / "torch_rocm_init.py").read_text()
    return text.replace('ROCM_VERSION = "0.0.0"', f"ROCM_VERSION = {rocm!r}").encode()


def repack_torch(src: Path, dest: Path, release: amddata.Release, targets: tuple[str, ...]) -> Path:
    """SIMULATED: the CPU torch wheel shaped as AMD's torch of `release` (see the module docstring)."""
    name, old_version = src.name.split("-")[:2]
    version = release.torch_version
    old_info, new_info = f"{name}-{old_version}.dist-info/", f"{name}-{version}.dist-info/"
    marker = (
        f"SIMULATED: radeonlab sandbox repack of {src.name} (sha256 {sha256_file(src)}) as {version}, "
        "shaped as AMD's torch from amdworld/python-packages.yaml (requires "
        f"rocm[libraries]=={release.version}, device extras for {', '.join(targets)}). The code is the CPU "
        "build.\n"
    ).encode()
    requires = [f"rocm[libraries]=={release.version}"]
    extras = {f"device-{t}": [f"amd-torch-device-{t}=={version}"] for t in targets}
    added = {TORCH_REPACK_MARKER: marker, ROCM_INIT: rocm_init(release.version)}
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{dest.name}.{os.getpid()}-{threading.get_ident()}.partial")  # one per builder
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
                data = _metadata(data.decode(), version, requires, extras).encode()
            new_name = new_info + member[len(old_info) :] if member.startswith(old_info) else member
            out = zipfile.ZipInfo(new_name, date_time=info.date_time)
            out.external_attr = info.external_attr
            zout.writestr(out, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=1)
            record_lines.append(f"{new_name},{record_hash(data)},{len(data)}")
        for member, data in added.items():
            mark = zipfile.ZipInfo(member, date_time=(2026, 1, 1, 0, 0, 0))
            mark.external_attr = 0o644 << 16
            zout.writestr(mark, data)
            record_lines.append(f"{member},{record_hash(data)},{len(data)}")
        record_lines.append(f"{new_info}RECORD,,")
        zout.writestr(new_info + "RECORD", "\n".join(record_lines) + "\n")
    tmp.replace(dest)
    return dest


def standin_wheel(project: str, version: str, requires: list[str], dest_dir: Path) -> Path:
    """A SIMULATED pure-Python wheel of `project`: a SIMULATED.txt, METADATA labelled SIMULATED."""
    module = project.replace("-", "_")
    dest = dest_dir / f"{module}-{version}-py3-none-any.whl"
    if dest.exists():
        return dest
    summary = _summary(f"{project} {version}")
    meta = f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\nSummary: {summary}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {
        f"{module}/SIMULATED.txt": f"{summary}.\n".encode(),
        f"{module}-{version}.dist-info/METADATA": meta.encode(),
        f"{module}-{version}.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: radeonlab-sandbox\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    dest_dir.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{dest.name}.{os.getpid()}-{threading.get_ident()}.partial")  # one per builder
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


def amd_index(cpu_torch: Path) -> dict[str, list[Path]]:
    """Project name -> the SIMULATED files of AMD's index, every release with a torch in releases.yaml."""
    targets = amddata.device_targets()
    base = cache_dir() / GENERATION
    out: dict[str, list[Path]] = {}
    for release in amddata.releases():
        v = release.version
        folder = base / v
        digest = sha256_file(cpu_torch)[:16]
        torch_name = cpu_torch.name.replace(cpu_torch.name.split("-")[1], release.torch_version)
        torch = folder / digest / torch_name
        out.setdefault("torch", []).append(
            torch if torch.exists() else repack_torch(cpu_torch, torch, release, targets)
        )
        out.setdefault("rocm", []).append(
            rocm_sdist(v, amddata.rocm_extras(v, targets), DEFAULT_TARGET, folder)
        )
        wheels = {
            "rocm-sdk-core": (v, amddata.requires("rocm-sdk-core", v)),
            "rocm-sdk-libraries": (v, amddata.requires("rocm-sdk-libraries", v)),
        }
        for t in targets:
            device = [r.replace("-T==", f"-{t}==") for r in amddata.requires("rocm-sdk-device-T", v)]
            wheels[f"rocm-sdk-device-{t}"] = (v, device)
            torch_device = amddata.requires("amd-torch-device-T", v)
            wheels[f"amd-torch-device-{t}"] = (
                release.torch_version,
                [r.replace("-T==", f"-{t}==") for r in torch_device],
            )
        for project, (version, requires) in wheels.items():
            out.setdefault(project, []).append(standin_wheel(project, version, requires, folder))
    return out

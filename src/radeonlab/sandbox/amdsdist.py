"""The SIMULATED `rocm` selector of the sandbox's AMD index: an sdist, as AMD publishes it ("built as an sdist
so that it is evaluated at the point of install", amdworld/python-packages.yaml [PACKAGING]).

Its build (on the workstation, by pip) makes a wheel whose requirements per extra are the data's ("" ->
rocm-sdk-core, libraries -> core + libraries, device-T -> rocm-sdk-device-T, ...), and which provides the
`rocm_sdk` module (`initialize_process(preload_shortnames=..., check_version=...)`) and the `rocm-sdk`
command (`rocm-sdk targets`: the device targets installed). The build picks a target as the data says
(ROCM_SDK_TARGET_FAMILY, else the GPU found in the KFD topology, else a default) and records it in the
module (rocm_sdk.SELECTED_TARGET): the data does not say which requirement that choice changes, so the
stand-in changes none. The build backend is in the sdist (PEP 517 backend-path, no build requirements):
the sandbox's index serves no setuptools, AMD's sdist uses setuptools. Everything inside says SIMULATED.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
import threading
from pathlib import Path

# The sdist's code: real files (standins/payload/rocm_sdist/), copied into it as they are.
PAYLOAD = Path(__file__).parent / "standins" / "payload" / "rocm_sdist"
CODE = ("rocm_backend.py", "rocm_sdk/__init__.py", "rocm_sdk/__main__.py")


def rocm_sdist(version: str, extras: dict[str, list[str]], default_target: str, dest_dir: Path) -> Path:
    """rocm-<V>.tar.gz: the selector's sdist, requirements per extra from the data (amddata.rocm_extras)."""
    dest = dest_dir / f"rocm-{version}.tar.gz"  # made every time (small, the same bytes): never stale
    summary = f"SIMULATED stand-in for AMD's rocm {version} selector (radeonlab sandbox): no ROCm inside"
    config = {"version": version, "extras": extras, "default_target": default_target, "summary": summary}
    top = f"rocm-{version}/"
    files = {
        "PKG-INFO": f"Metadata-Version: 2.1\nName: rocm\nVersion: {version}\nSummary: {summary}\n",
        "pyproject.toml": (
            '[build-system]\nrequires = []\nbuild-backend = "rocm_backend"\nbackend-path = ["."]\n'
        ),
        "rocm_build.json": json.dumps(config, indent=1, sort_keys=True) + "\n",
        "SIMULATED.txt": summary + ".\n",
        "rocm_sdk/SIMULATED.txt": summary + ".\n",
        **{name: (PAYLOAD / name).read_text() for name in CODE},
    }
    dest_dir.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{dest.name}.{os.getpid()}-{threading.get_ident()}.partial")  # one per builder
    # mtime 0 and one file name in the gzip header (not the partial file's own): the same bytes (and sha256)
    # every time it is made, by whichever builder
    header_name = dest.with_suffix(".partial").name
    with (
        open(tmp, "wb") as raw,
        gzip.GzipFile(header_name, mode="wb", fileobj=raw, mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for name, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(top + name)
            info.size, info.mtime, info.mode = len(data), 1767225600, 0o644
            tar.addfile(info, io.BytesIO(data))
    tmp.replace(dest)
    return dest

"""Small file helpers the test bed's wheel builders share (wheels.py and the SIMULATED AMD wheels in
amdwheels.py): one module below both, so neither imports the other."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

from packaging.version import Version

from radeonlab.jobs.host.receive import sha256_of
from radeonlab.sandbox import config

# The machine's CPU torch, the SIMULATED stand-in for the ROCm build, whatever its version: AMD's torch of
# each release (2.13.0+rocm10.0.0, 2.14.0+rocm10.1.0, ...) is this wheel repacked (amdwheels.py). Found in
# the folders of the machine's pip configuration (PIP_FIND_LINKS), where a machine of this project's kind
# keeps its CPU build of torch; PyPI's torch for Linux is a CUDA build of several GB.
LOCAL_TORCH_PATTERN = "torch-*+cpu-cp311-cp311-*.whl"


def cache_dir() -> Path:
    """Downloaded wheels, kept between runs."""
    return config.CACHE_DIR / "wheels"


def sha256_file(path: Path) -> str:
    """sha256 of a file, streamed (the content store's own function, jobs/host/receive.py)."""
    return sha256_of(str(path))


def record_hash(data: bytes) -> str:
    """A wheel RECORD line's hash (PEP 376/627: urlsafe base64 of the sha256, no padding)."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def local_torch_wheel() -> Path:
    """The machine's CPU torch wheel (the newest if several), the stand-in every SIMULATED torch is made of.
    Not the product's pytorch_version: the default release's torch need not exist as a CPU build here."""
    folders = [Path(f) for f in os.environ.get("PIP_FIND_LINKS", "").split() if "://" not in f]
    found = sorted((w for folder in folders for w in folder.glob(LOCAL_TORCH_PATTERN)), key=_version)
    if not found:
        where = " ".join(map(str, folders)) or "(PIP_FIND_LINKS is not set)"
        raise FileNotFoundError(
            f"no CPU torch wheel {LOCAL_TORCH_PATTERN} in pip's find-links folders {where}: the sandbox's "
            "SIMULATED torch is made of one (put it in a folder and set PIP_FIND_LINKS to it)"
        )
    return found[-1]


def _version(wheel: Path) -> Version:
    return Version(wheel.name.split("-")[1])  # torch-2.13.0+cpu-cp311-... -> 2.13.0+cpu


def standin_torch_version() -> str:
    """The public version of the machine's CPU torch ("2.13.0"): what the laptop and the sandbox's PyPI
    resolution pin torch to."""
    return _version(local_torch_wheel()).public

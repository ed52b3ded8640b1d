"""Small file helpers the test bed's wheel builders share (wheels.py and the SIMULATED AMD wheels in
amdwheels.py): one module below both, so neither imports the other."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from radeonlab.jobs.host.receive import sha256_of
from radeonlab.sandbox import config


def cache_dir() -> Path:
    """Downloaded wheels, kept between runs."""
    return config.CACHE_DIR / "wheels"


def sha256_file(path: Path) -> str:
    """sha256 of a file, streamed (the content store's own function, jobs/host/receive.py)."""
    return sha256_of(str(path))


def record_hash(data: bytes) -> str:
    """A wheel RECORD line's hash (PEP 376/627: urlsafe base64 of the sha256, no padding)."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

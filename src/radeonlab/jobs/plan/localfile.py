"""A local file the plan names for upload: where it is, its content address, its size. Here, not beside the
transfer that sends it, so that planning needs no SSH (tests/unit/test_layout.py)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from radeonlab.jobs.host.receive import sha256_of


@dataclass(frozen=True)
class LocalFile:
    """A file to upload: where it is, its content address (the receiver's own hash function), its size."""

    path: Path
    sha256: str
    size: int

    @classmethod
    def of(cls, path: str | os.PathLike[str]) -> LocalFile:
        p = Path(path)
        return cls(p, sha256_of(str(p)), p.stat().st_size)

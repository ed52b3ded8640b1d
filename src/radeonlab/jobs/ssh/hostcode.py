"""radeonlab's host code as shipped to a workstation: the contract and jobs/host, with their package layout.

Everything a workstation runs of radeonlab is these stdlib-only modules (radeonlab.contract and
radeonlab.jobs.host; the two package __init__ files above them are shipped empty, so nothing else is
imported). They travel as one tar stream into ~/.cache/radeonlab/code/<digest>/ (jobs/ssh/connection.py) and,
for each job, are copied into <job>/host, where the launcher checks them against the digests the laptop
recorded in job.json before it starts (docs/design/what-radeonlab-trusts.md).
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from functools import cache
from importlib import resources

PACKAGES: tuple[str, ...] = ("radeonlab.contract", "radeonlab.jobs.host")
EMPTY_PACKAGES: tuple[str, ...] = ("radeonlab", "radeonlab.jobs")
EMPTY_INIT = b'"""radeonlab host code (shipped by the laptop; see jobs/ssh/hostcode.py)."""\n'


@cache
def files() -> dict[str, bytes]:
    """relative path -> content of every shipped file, in a stable order."""
    out = {f"{p.replace('.', '/')}/__init__.py": EMPTY_INIT for p in EMPTY_PACKAGES}
    for package in PACKAGES:
        folder = resources.files(package)
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if entry.name.endswith(".py"):
                out[f"{package.replace('.', '/')}/{entry.name}"] = entry.read_bytes()
    return dict(sorted(out.items()))


def file_digests() -> dict[str, str]:
    """relative path -> sha256: what job.json `code.files` records and the launcher checks."""
    return {rel: hashlib.sha256(data).hexdigest() for rel, data in files().items()}


@cache
def digest() -> str:
    """One name for this exact code (the folder it lives in on the host)."""
    h = hashlib.sha256()
    for rel, sha in file_digests().items():
        h.update(f"{rel}\0{sha}\n".encode())
    return h.hexdigest()[:24]


def tar() -> bytes:
    """The files as an uncompressed tar (deterministic: fixed times, owners and modes)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for rel, data in files().items():
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            archive.addfile(info, io.BytesIO(data))
    return buf.getvalue()

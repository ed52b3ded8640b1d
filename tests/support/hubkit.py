"""What the SIMULATED Hub's tests share: the tiny model and demo data, built once per test session (the
build imports torch: the slow part), and the sandbox catalog over them."""

from __future__ import annotations

import atexit
import functools
import hashlib
import shutil
import tempfile
from pathlib import Path

from radeonlab.sandbox import demodata, tinymodel
from radeonlab.sandbox.hubcatalog import HubCatalog, sandbox_catalog


@functools.cache
def tiny_assets() -> tuple[Path, Path]:
    """(tiny model folder, demo data folder), made on first use, removed when the session's process ends."""
    work = Path(tempfile.mkdtemp(prefix="radeonlab-hub-tests-"))
    atexit.register(shutil.rmtree, work, True)
    data = demodata.write_dataset(work / "data")
    tinymodel.build_model(work / "tiny-llama", data)
    return work / "tiny-llama", work / "data"


def catalog() -> HubCatalog:
    """A fresh sandbox catalog (tests may add tokens and grants to theirs)."""
    return sandbox_catalog(*tiny_assets())


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()

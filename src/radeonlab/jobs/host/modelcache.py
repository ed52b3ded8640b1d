"""The shared Hub model cache's layout, read with the standard library: is a revision complete?

`models.py pull` (run by the training venv, with huggingface_hub) writes a manifest per revision
(<cache>/models--org--name/.radeonlab/<sha>.json: the revision's files and sizes); `completeness` checks
every file of it is in the snapshot at its size, so a job can run with HF_HUB_OFFLINE=1. Here, apart from
models.py, so the probe (system python3, stdlib only) answers the same question in its one round trip.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

MANIFEST_DIR = ".radeonlab"
COMMIT = re.compile(r"^[0-9a-f]{40}$")


def default_cache(environ: dict[str, str] | os._Environ[str] | None = None) -> Path:
    """The Hub client's own cache when the host record names none: HF_HUB_CACHE, else $HF_HOME/hub, else
    $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub (huggingface_hub's constants.py)."""
    env = os.environ if environ is None else environ
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    xdg = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    home = env.get("HF_HOME") or os.path.join(xdg, "huggingface")
    return Path(home).expanduser() / "hub"


def storage(cache: Path, repo_id: str) -> Path:
    """The client's folder for a model repo in the cache (file_download.repo_folder_name)."""
    return cache / ("models--" + repo_id.replace("/", "--"))


def resolve_sha(folder: Path, revision: str) -> str | None:
    if COMMIT.match(revision):
        return revision
    ref = folder / "refs" / revision
    return ref.read_text().strip() if ref.is_file() else None


def manifest(folder: Path, sha: str) -> dict[str, Any] | None:
    path = folder / MANIFEST_DIR / f"{sha}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def completeness(cache: Path, repo_id: str, revision: str) -> dict[str, Any]:
    """Is every file a pull recorded for this revision in its snapshot, at the recorded size?"""
    folder = storage(cache, repo_id)
    sha = resolve_sha(folder, revision)
    record = manifest(folder, sha) if sha else None
    out: dict[str, Any] = {"repo": repo_id, "revision": revision, "sha": sha}
    if record is None:
        return out | {"complete": False, "reason": "not pulled into this cache (no manifest)", "missing": []}
    snapshot = folder / "snapshots" / str(sha)
    missing = [
        f["path"]
        for f in record["files"]
        if not (snapshot / f["path"]).is_file() or (snapshot / f["path"]).stat().st_size != f["size"]
    ]
    return out | {"complete": not missing, "missing": missing}

"""Runs on the cache host (stdlib only): build a PEP 503 simple index over the downloaded wheels.

    python3 build_index.py CACHE_DIR LOCK

Only the wheels the lab's hash lock (LOCK, pip requirements with --hash=sha256:) names are indexed, each
verified against its line first: a file whose sha256 differs stops the build (exit 1, one line naming it).
CACHE_DIR/.lock-hashes.json (file name -> the lock's sha256) is what serve.py checks on every request.

CACHE_DIR/files/*.whl and *.tar.gz (sdists) -> CACHE_DIR/simple/index.html and
CACHE_DIR/simple/<project>/index.html, linking
../../files/<wheel>#sha256=<hex> so pip checks every download. Hashes are kept in CACHE_DIR/.hashes.json
keyed by (size, mtime), so a rerun does not re-read multi-GB wheels. Pages are written only when their text
changes (tmp + rename: a pip reading the index sees the old page or the new one). serve.py serving
CACHE_DIR then is the index (any static server would serve it too, without the check on each request).
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import shutil
import sys
from pathlib import Path


def normalize(name: str) -> str:
    """PEP 503 project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_if_changed(path: Path, text: str) -> None:
    if path.exists() and path.read_text() == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def page(title: str, links: list[str]) -> str:
    head = f"<!DOCTYPE html>\n<html><head><title>{html.escape(title)}</title></head>\n<body>\n"
    return head + "\n".join(links) + "\n</body></html>\n"


LOCK_LINE = re.compile(r"^([A-Za-z0-9._-]+)==(\S+) --hash=sha256:([0-9a-f]{64})")
SERVED_HASHES = ".lock-hashes.json"


def name_version(filename: str) -> tuple[str, str]:
    """(normalized name, version) of a wheel or an sdist (AMD publishes its `rocm` selector as an sdist:
    rocm-10.0.0.tar.gz)."""
    if filename.endswith(".tar.gz"):
        name, version = filename[: -len(".tar.gz")].rsplit("-", 1)
        return normalize(name), version
    name, version = filename.split("-")[:2]
    return normalize(name), version


def read_lock(path: Path) -> dict[tuple[str, str], str]:
    """(normalized name, version) -> sha256 of every line of a lock."""
    out = {}
    for raw in path.read_text().splitlines():
        m = LOCK_LINE.match(raw.strip())
        if m:
            out[(normalize(m[1]), m[2])] = m[3]
    return out


def main(cache_dir: str, lock_file: str) -> int:
    root = Path(cache_dir)
    locked = read_lock(Path(lock_file))
    files = [
        f
        for f in sorted([*(root / "files").glob("*.whl"), *(root / "files").glob("*.tar.gz")])
        if name_version(f.name) in locked
    ]
    manifest_path = root / ".hashes.json"
    try:
        old = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        old = {}
    hashes: dict[str, list] = {}
    projects: dict[str, list[Path]] = {}
    for f in files:
        st = f.stat()
        known = old.get(f.name)
        digest = known[2] if known and known[:2] == [st.st_size, st.st_mtime_ns] else sha256(f)
        hashes[f.name] = [st.st_size, st.st_mtime_ns, digest]
        expected = locked[name_version(f.name)]
        if digest != expected:
            print(f"{f}: sha256 {digest} does not match the lock's {expected}: not served", file=sys.stderr)
            return 1
        projects.setdefault(name_version(f.name)[0], []).append(f)
    simple = root / "simple"
    for name, wheels in projects.items():
        links = []
        for w in sorted(wheels):
            href = f"../../files/{w.name}#sha256={hashes[w.name][2]}"
            links.append(f'<a href="{html.escape(href)}">{html.escape(w.name)}</a><br>')
        write_if_changed(simple / name / "index.html", page(f"Links for {name}", links))
    for stale in simple.iterdir() if simple.exists() else ():
        if stale.is_dir() and stale.name not in projects:
            shutil.rmtree(stale)
    write_if_changed(
        simple / "index.html", page("Simple index", [f'<a href="{n}/">{n}</a><br>' for n in sorted(projects)])
    )
    write_if_changed(manifest_path, json.dumps(hashes, indent=1, sort_keys=True) + "\n")
    served = {name: h[2] for name, h in hashes.items()}
    write_if_changed(root / SERVED_HASHES, json.dumps(served, indent=1, sort_keys=True) + "\n")
    print(f"{len(files)} wheels, {len(projects)} projects, {sum(h[0] for h in hashes.values())} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))

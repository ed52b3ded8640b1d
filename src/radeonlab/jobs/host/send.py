"""Send files of a job folder to the laptop in one stream, each with the sha256 of what was sent.

    python3 -m radeonlab.jobs.host.send ROOT

The laptop's side is jobs/ssh/transfer.py. On one exec channel:
  in   {"names": [relative paths] | null, "under": [folders] | null}   the named files and every file
                                                                      under those folders (neither: all)
  out  {"files": [{"name", "size", "sha256" | null}], "missing": [...]}  sha256 from the cache, if current
  in   {"send": [{"name", "offset"}]}                                   what the laptop still needs
  out  per file: {"name", "size", "offset"}\\n, size-offset raw bytes, then {"sha256": HEX}\\n of the WHOLE
       file (the prefix before offset is read once to hash it; the rest is hashed as it is sent)
Each file is read once: hashing happens while sending. Digests are cached in ROOT/.radeonlab-sha256.json by
(size, mtime), so a later fetch of unchanged files can be skipped by the laptop without a read here.
Stdlib only.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

CACHE = ".radeonlab-sha256.json"
BLOCK = 1 << 20
PARTIAL = ".part"


def safe(root: str, name: str) -> str:
    """ROOT/name, refusing a name that leaves ROOT."""
    path = os.path.realpath(os.path.join(root, name))
    if not path.startswith(os.path.realpath(root) + os.sep):
        raise ValueError(f"refusing {name!r}: outside the job folder")
    return path


def listing(root: str, names: list[str] | None, under: list[str] | None) -> tuple[list[str], list[str]]:
    """The named files (and every file under the `under` folders); (present, missing names)."""
    found = [n for n in names or [] if os.path.isfile(safe(root, n))]
    missing = [n for n in names or [] if n not in found]
    if names is not None and under is None:
        return found, missing
    for top in under or [""]:
        base = safe(root, top) if top else root
        for folder, _, files in os.walk(base):
            for name in files:
                rel = os.path.relpath(os.path.join(folder, name), root)
                if rel != CACHE and not rel.endswith(PARTIAL) and ".tmp." not in name and rel not in found:
                    found.append(rel)
    return sorted(found), missing


def main(argv: list[str] | None = None) -> int:
    root = os.path.abspath((argv if argv is not None else sys.argv[1:])[0])
    stdin, out = sys.stdin.buffer, sys.stdout.buffer
    request = json.loads(stdin.readline())
    names, missing = listing(root, request.get("names"), request.get("under"))
    cache_path = os.path.join(root, CACHE)
    try:
        with open(cache_path) as f:
            cache = json.load(f)
    except (OSError, ValueError):
        cache = {}
    files = []
    for name in names:
        st = os.stat(safe(root, name))
        known = cache.get(name)
        current = known and known[0] == st.st_size and known[1] == st.st_mtime_ns
        files.append({"name": name, "size": st.st_size, "sha256": known[2] if current else None})
    out.write((json.dumps({"files": files, "missing": missing}) + "\n").encode())
    out.flush()
    plan = json.loads(stdin.readline() or '{"send": []}')["send"]
    buf = bytearray(BLOCK)
    view = memoryview(buf)
    for item in plan:
        name, offset = item["name"], int(item.get("offset") or 0)
        with open(safe(root, name), "rb") as f:
            st = os.fstat(f.fileno())
            offset = min(offset, st.st_size)
            h = hashlib.sha256()
            rest = offset
            while rest:
                n = f.readinto(view[: min(rest, BLOCK)])
                if not n:
                    break
                h.update(view[:n])
                rest -= n
            out.write((json.dumps({"name": name, "size": st.st_size, "offset": offset}) + "\n").encode())
            left = st.st_size - offset
            while left:
                n = f.readinto(view[: min(left, BLOCK)])
                if not n:  # the laptop counts on `size` bytes: end the stream rather than desync it
                    raise SystemExit(f"{name} shrank while it was being sent")
                h.update(view[:n])
                out.write(view[:n])
                left -= n
            digest = h.hexdigest()
            out.write((json.dumps({"sha256": digest}) + "\n").encode())
            out.flush()
        cache[name] = [st.st_size, st.st_mtime_ns, digest]
    if plan:
        try:
            tmp = f"{cache_path}.tmp.{os.getpid()}"
            with open(tmp, "w") as f:
                json.dump(cache, f)
            os.replace(tmp, cache_path)
        except OSError:
            pass  # a read-only job folder: the cache is an optimisation
    return 0


if __name__ == "__main__":
    sys.exit(main())

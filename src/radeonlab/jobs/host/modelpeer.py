"""A Hub model copied from one workstation's cache to another's, each file verified against the Hub.

Runs on the workstation with the TRAINING VENV's python (it shares jobs/host/models.py's cache layout, which
imports huggingface_hub). The laptop holds one SSH channel to each side and relays the bytes
(jobs/fleet/modelcopy.py); neither host needs a login on the other, and the Hub token goes to neither.

    python -m radeonlab.jobs.host.modelpeer send MODEL
      in   {"blobs": [BLOB...]}                 blob names of the client's cache (the files' ETags)
      out  per blob: {"blob", "size"}\\n then size raw bytes, or {"blob", "missing": true}\\n
    python -m radeonlab.jobs.host.modelpeer receive MODEL SHA [--ref REF]
      in   {"files": [{"path", "size", "etag", "lfs"}]}   the Hub's answer for commit SHA, asked by the laptop
      out  {"event": "need", "blobs": [{"blob", "size"}]}  what this cache lacks of the files a job needs
      in   what `send` wrote, for those blobs
      out  {"event": "done", "stored": [...], "failed": {BLOB: why}, "complete": bool, "fetched": bytes}

A received blob is written beside the cache's blobs as <blob>.peer and only renamed into place when its
bytes hash to what the Hub says: an LFS file's sha256 (its ETag, the blob's name), a regular file's git blob
sha1 (sha1 over "blob <size>\\0" + content: the Hub's ETag for it). A mismatch is deleted and reported, never
linked. When every file is there the snapshot links, the ref and the manifest are written as `models.py pull`
writes them, so `complete` and a job's HF_HUB_OFFLINE run see the same cache as after a Hub pull.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, BinaryIO

from huggingface_hub import constants

from radeonlab.jobs.host import modelcache, models

BLOCK = 1 << 20
BLOB = re.compile(r"^[0-9a-f]{40}$|^[0-9a-f]{64}$")  # git sha1 or sha256: never a path


def out(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def send(cache: Path, repo_id: str, stdin: BinaryIO, stdout: BinaryIO) -> None:
    blobs = models.storage(cache, repo_id) / "blobs"
    for name in json.loads(stdin.readline())["blobs"]:
        path = blobs / name
        if not BLOB.match(name) or not path.is_file():
            stdout.write((json.dumps({"blob": name, "missing": True}) + "\n").encode())
            continue
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            stdout.write((json.dumps({"blob": name, "size": size}) + "\n").encode())
            while chunk := f.read(BLOCK):
                stdout.write(chunk)
    stdout.flush()


def hasher(entry: dict[str, Any], size: int) -> Any:
    """The hash the Hub's ETag is of: sha256 of an LFS file, git's blob sha1 of a regular one."""
    if entry["lfs"]:
        return hashlib.sha256()
    return hashlib.sha1(b"blob %d\0" % size)


def take(stdin: BinaryIO, dest: Path, size: int, digest: Any) -> int:
    """Write the next `size` bytes of stdin to dest, hashing them; the bytes read."""
    got = 0
    with dest.open("wb") as f:
        while got < size:
            chunk = stdin.read(min(BLOCK, size - got))
            if not chunk:
                break
            digest.update(chunk)
            f.write(chunk)
            got += len(chunk)
        f.flush()
        os.fsync(f.fileno())
    return got


def link(folder: Path, sha: str, path: str, blob: str) -> None:
    """snapshots/<sha>/<path> -> ../../blobs/<blob>, relative as the client makes it."""
    pointer = folder / "snapshots" / sha / path
    pointer.parent.mkdir(parents=True, exist_ok=True)
    target = os.path.relpath(folder / "blobs" / blob, pointer.parent)
    if pointer.is_symlink() and os.readlink(pointer) == target:
        return
    if pointer.is_symlink() or pointer.exists():
        pointer.unlink()
    os.symlink(target, pointer)


def receive(cache: Path, repo_id: str, sha: str, ref: str | None, stdin: BinaryIO) -> dict[str, Any]:
    hub_files = {f["path"]: f for f in json.loads(stdin.readline())["files"]}
    files = {p: hub_files[p] for p in models.wanted(sorted(hub_files), all_files=False)}
    folder = models.storage(cache, repo_id)
    blobs = folder / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    by_blob = {f["etag"]: f for f in files.values() if BLOB.match(f["etag"])}
    if len(by_blob) != len(files):
        raise models.PullError("bad_input", f"{repo_id}@{sha}: a file without a usable ETag from the Hub")
    for path in files:  # the snapshot's links stay inside the snapshot, whatever the names say
        if path.startswith("/") or ".." in Path(path).parts:
            raise models.PullError("bad_input", f"{repo_id}@{sha}: refusing the file name {path!r}")
    need = [{"blob": b, "size": f["size"]} for b, f in sorted(by_blob.items()) if not (blobs / b).is_file()]
    out({"event": "need", "blobs": need})
    stored: list[str] = []
    failed: dict[str, str] = {}
    fetched = 0
    while line := stdin.readline():
        header = json.loads(line)
        name = header["blob"]
        entry = by_blob.get(name)
        if entry is None:
            raise models.PullError("bad_input", f"{name}: not a blob of {repo_id}@{sha}")
        if header.get("missing"):
            failed[name] = "not in the source's cache"
            continue
        part = blobs / f"{name}.peer"
        digest = hasher(entry, header["size"])
        got = take(stdin, part, header["size"], digest)
        fetched += got
        if got != header["size"]:
            part.unlink(missing_ok=True)
            failed[name] = f"cut off after {got} of {header['size']} bytes"
            break
        if got != entry["size"] or digest.hexdigest() != name:
            part.unlink(missing_ok=True)
            what = "sha256" if entry["lfs"] else "git blob sha1 (ETag)"
            failed[name] = f"{entry['path']}: {what} differs from the Hub's; refused"
            continue
        os.replace(part, blobs / name)
        stored.append(name)
    complete = all((blobs / f["etag"]).is_file() for f in files.values())
    if complete:
        for path, f in files.items():
            link(folder, sha, path, f["etag"])
        for name in {ref} - {sha, None}:
            models.write_atomic(folder / "refs" / str(name), sha)
        manifest = {
            "repo": repo_id, "sha": sha, "revision": ref or sha, "pulled_at": models.now(),
            "files": [{"path": p, "size": f["size"]} for p, f in files.items()],
        }  # fmt: skip
        models.write_atomic(folder / models.MANIFEST_DIR / f"{sha}.json", json.dumps(manifest))
    return {"event": "done", "stored": stored, "failed": failed, "complete": complete, "fetched": fetched}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Copy a Hub model between workstations' caches")
    parser.add_argument("--cache", type=Path, help="default: the client's own (HF_HUB_CACHE, HF_HOME)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("send").add_argument("model")
    rx = sub.add_parser("receive")
    rx.add_argument("model")
    rx.add_argument("sha")
    rx.add_argument("--ref")
    args = parser.parse_args(argv)
    cache = (args.cache or Path(constants.HF_HUB_CACHE)).expanduser()
    try:
        if args.command == "send":
            send(cache, args.model, sys.stdin.buffer, sys.stdout.buffer)
        else:
            if not modelcache.COMMIT.match(args.sha):
                raise models.PullError("bad_input", f"{args.sha}: not a commit sha")
            out(receive(cache, args.model, args.sha, args.ref, sys.stdin.buffer))
    except models.PullError as exc:
        out({"event": "error", "kind": exc.kind, "message": str(exc)})
        return models.EXIT[exc.kind]
    return 0


if __name__ == "__main__":
    sys.exit(main())

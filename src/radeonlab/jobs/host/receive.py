"""Receive files into the host's content store in one stream, verifying each sha256 as it is written.

    python3 -m radeonlab.jobs.host.receive BLOBS_DIR

The laptop's side is jobs/ssh/transfer.py. On stdin, then stdout (one exec channel, one round trip when
nothing is missing):
  in   {"files": [{"sha256": HEX, "size": N}, ...]}                    what the job needs
  out  {"have": [HEX...], "partial": {HEX: bytes already in HEX.part}}  the rest is sent
  in   per file: {"sha256": HEX, "size": N, "offset": K}\\n then N-K raw bytes (K = resume from the .part)
  out  {"stored": [HEX...], "failed": {HEX: why}}                       after stdin ends
A blob is stored as <BLOBS_DIR>/sha256/<HEX> only when the bytes hash to HEX: the hash is computed on the
stream as it is written (a resumed .part's prefix is read once), so verifying costs no second read, and
flushed to disk while it arrives (writeback.py), so the closing fsync waits only for the tail. Blobs
are read-only (0444): jobs share them by hard links. <BLOBS_DIR>/manifest.json remembers size and mtime of
verified blobs, so "have" answers without re-hashing; an unknown or changed blob is re-hashed (a damaged
one is deleted). Stdlib only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys

from radeonlab.jobs.host.writeback import Writeback

ALGORITHM = "sha256"
BLOCK = 1 << 20
# Nobody outside the training user's group reads uploads (datasets, models; on a shared Slurm lab other users
# have logins): blobs 0440 in 0750 folders, and older stores (0444 in 0755) are repaired when written to.
BLOB_MODE = 0o440
DIR_MODE = 0o750


class Store:
    """<BLOBS_DIR>/sha256/<hex> files and the manifest of the verified ones."""

    def __init__(self, blobs_dir: str) -> None:
        self.dir = os.path.join(blobs_dir, ALGORITHM)
        self.manifest_path = os.path.join(blobs_dir, "manifest.json")  # the folders appear with a first blob
        try:
            with open(self.manifest_path) as f:
                self.manifest = json.load(f)
        except (OSError, ValueError):
            self.manifest = {}
        self.changed = False

    def make_private(self) -> None:
        """The store's folders, 0750 (made so, or repaired), and its older 0444 blobs made 0440."""
        blobs_dir = os.path.dirname(self.dir)
        os.makedirs(self.dir, mode=DIR_MODE, exist_ok=True)
        for folder in (blobs_dir, self.dir):
            if os.stat(folder).st_mode & 0o777 != DIR_MODE:
                os.chmod(folder, DIR_MODE)
                if folder == self.dir:  # first write since an older radeonlab: its blobs too
                    for name in os.listdir(folder):
                        with contextlib.suppress(OSError):
                            os.chmod(os.path.join(folder, name), BLOB_MODE)

    def path(self, digest: str) -> str:
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise ValueError(f"not a sha256: {digest!r}")
        return os.path.join(self.dir, digest)

    def remember(self, digest: str) -> None:
        st = os.stat(self.path(digest))
        self.manifest[digest] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
        self.changed = True

    def has(self, digest: str) -> bool:
        """The blob is there and intact (trusted by size+mtime from the manifest, else hashed once)."""
        path = self.path(digest)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return False
        known = self.manifest.get(digest)
        if known and known["size"] == st.st_size and known["mtime_ns"] == st.st_mtime_ns:
            return True
        if sha256_of(path) == digest:
            self.remember(digest)
            return True
        os.unlink(path)
        self.manifest.pop(digest, None)
        self.changed = True
        return False

    def save(self) -> None:
        if self.changed:
            tmp = f"{self.manifest_path}.tmp.{os.getpid()}"
            with open(tmp, "w") as f:
                json.dump(self.manifest, f)
            os.replace(tmp, self.manifest_path)


def sha256_of(path: str, limit: int | None = None) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        rest = limit
        while rest is None or rest > 0:
            block = f.read(BLOCK if rest is None else min(rest, BLOCK))
            if not block:
                break
            h.update(block)
            if rest is not None:
                rest -= len(block)
    return h.hexdigest()


def receive_one(store: Store, stdin, digest: str, size: int, offset: int) -> str | None:  # noqa: ANN001
    """Write one file's bytes from stdin into <hex>.part, hashing as it goes; None when stored, else why."""
    final = store.path(digest)
    part = final + ".part"
    store.make_private()
    h = hashlib.sha256()
    with open(part, "ab+") as f, Writeback(f.fileno()) as flushing:
        have = os.fstat(f.fileno()).st_size
        if offset > have:
            offset = 0  # the laptop's idea of the .part is stale: the bytes it sends would leave a hole
        f.truncate(offset)
        f.seek(0)
        rest = offset
        while rest:  # the kept prefix, read once
            block = f.read(min(rest, BLOCK))
            if not block:
                break
            h.update(block)
            rest -= len(block)
        f.seek(offset)
        buf = bytearray(BLOCK)
        view = memoryview(buf)
        left = size - offset
        while left:
            n = stdin.readinto(view[: min(left, BLOCK)])
            if not n:
                return f"stream ended {left} bytes early; {part} is kept for resume"
            f.write(view[:n])
            h.update(view[:n])
            flushing.wrote(n)
            left -= n
        f.flush()
        flushing.finish()
    if h.hexdigest() != digest:
        os.unlink(part)
        return f"sha256 mismatch: the bytes received hash to {h.hexdigest()}, not {digest}"
    os.chmod(part, BLOB_MODE)
    os.replace(part, final)
    store.remember(digest)
    return None


def main(argv: list[str] | None = None) -> int:
    blobs_dir = (argv if argv is not None else sys.argv[1:])[0]
    stdin = sys.stdin.buffer
    store = Store(blobs_dir)
    wanted = json.loads(stdin.readline())["files"]
    have = [w["sha256"] for w in wanted if store.has(w["sha256"])]
    partial = {}
    for w in wanted:
        with contextlib.suppress(OSError):
            partial[w["sha256"]] = os.path.getsize(store.path(w["sha256"]) + ".part")
    store.save()
    print(json.dumps({"have": have, "partial": partial}), flush=True)
    stored, failed = [], {}
    while line := stdin.readline():
        head = json.loads(line)
        try:
            why = receive_one(store, stdin, head["sha256"], int(head["size"]), int(head.get("offset") or 0))
        except OSError as e:  # disk full, permissions: say so and stop reading
            failed[head["sha256"]] = f"cannot write into {store.dir}: {e.strerror or e}"
            break
        if why is None:
            stored.append(head["sha256"])
        else:
            failed[head["sha256"]] = why
            if why.startswith("stream ended"):
                break
    if stored:
        dfd = os.open(store.dir, os.O_RDONLY)
        os.fsync(dfd)  # the renames survive a crash
        os.close(dfd)
    store.save()
    print(json.dumps({"stored": stored, "failed": failed}), flush=True)
    return 0 if not failed else 4


if __name__ == "__main__":
    sys.exit(main())

"""Moving job data: content-addressed uploads into the host's blob store, checksummed fetches back.

Upload: every file is named by its sha256 in `<blobs_dir>/sha256/<hex>`; one remote round trip asks which
blobs the host already holds (a manifest of size + mtime + sha256 spares re-hashing unchanged blobs), only
the missing ones are sent (resumable, verified on the host before they get their name), and one more round
trip hard-links them into the job's data folder. Re-submitting unchanged data sends 0 bytes.

Fetch: one round trip lists the wanted files with size and sha256 computed on the host; each file is
downloaded to `<name>.part` (resumed if present), checked against that sha256 and renamed; a local file
that already has the host's hash is skipped, and no complete local file is ever replaced by a partial one.
"""

from __future__ import annotations

import contextlib
import json
import posixpath
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import ClassVar

from radeonlab.jobs.ssh.connection import SETTINGS as TRANSPORT_SETTINGS
from radeonlab.jobs.ssh.connection import Progress, Remote, TransportError, sha256_file

STORE = {
    "algorithm": "sha256",  # blobs live in <blobs_dir>/<algorithm>/<hex>
    "manifest": "manifest.json",  # <blobs_dir>/manifest.json: {hex: {"size", "mtime_ns"}} of verified blobs
    "blob_mode": 0o444,  # blobs are shared by hard links: read-only so a job cannot edit them in place
}


class SyncError(TransportError):
    """A transfer that cannot proceed (bad file names, files missing on the host)."""


@dataclass(frozen=True)
class FileTransfer:
    name: str
    sha256: str
    size: int
    transferred: int  # bytes that went over the wire for this file (0 when skipped)
    skipped: bool  # the other side already had this exact content


@dataclass
class TransferReport:
    """What one upload or fetch moved; subclasses only word it for their direction."""

    files: list[FileTransfer] = field(default_factory=list)
    _moved: ClassVar[str] = "moved"
    _skipped_note: ClassVar[str] = "already there"

    @property
    def bytes_transferred(self) -> int:
        return sum(f.transferred for f in self.files)

    @property
    def bytes_skipped(self) -> int:
        return sum(f.size for f in self.files if f.skipped)

    def summary(self) -> str:
        skipped = sum(f.skipped for f in self.files)
        return (
            f"{len(self.files)} file(s): {self._moved} {_human(self.bytes_transferred)}; "
            f"{skipped} {self._skipped_note} ({_human(self.bytes_skipped)} not {self._moved})"
        )


class UploadReport(TransferReport):
    _moved = "sent"
    _skipped_note = "already on the host"

    @property
    def bytes_sent(self) -> int:
        return self.bytes_transferred


class FetchReport(TransferReport):
    _moved = "received"
    _skipped_note = "already here with the same sha256"

    @property
    def bytes_received(self) -> int:
        return self.bytes_transferred


# Host side of "which of these blobs do you have?": stdin {"blobs", "want": [hex...]} -> {"present": [...]}.
# A blob whose size+mtime match the manifest is trusted; otherwise it is re-hashed (and removed if damaged).
_CHECK = r"""
import hashlib, json, os, sys
req = json.load(sys.stdin)
store = os.path.join(req["blobs"], req["algorithm"])
manifest_path = os.path.join(req["blobs"], req["manifest"])
try:
    with open(manifest_path) as f:
        manifest = json.load(f)
except (FileNotFoundError, ValueError):
    manifest = {}
present, changed = [], False
for hexd in req["want"]:
    path = os.path.join(store, hexd)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        continue
    known = manifest.get(hexd)
    if known and known["size"] == st.st_size and known["mtime_ns"] == st.st_mtime_ns:
        present.append(hexd)
        continue
    h = hashlib.new(req["algorithm"])
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    if h.hexdigest() == hexd:
        manifest[hexd] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
        present.append(hexd)
    else:
        os.unlink(path)
        manifest.pop(hexd, None)
    changed = True
if changed:
    tmp = manifest_path + ".tmp.%d" % os.getpid()
    with open(tmp, "w") as f:
        json.dump(manifest, f)
    os.replace(tmp, manifest_path)
print(json.dumps({"present": present}))
"""

# Host side of "put these blobs into the job folder": hard links (copies across filesystems), record the
# freshly uploaded (already verified) blobs in the manifest.
_LINK = r"""
import errno, json, os, shutil, sys
req = json.load(sys.stdin)
store = os.path.join(req["blobs"], req["algorithm"])
manifest_path = os.path.join(req["blobs"], req["manifest"])
os.makedirs(req["dest"], exist_ok=True)
try:
    with open(manifest_path) as f:
        manifest = json.load(f)
except (FileNotFoundError, ValueError):
    manifest = {}
copied = 0
for item in req["files"]:
    src = os.path.join(store, item["sha256"])
    os.chmod(src, req["mode"])
    dst = os.path.join(req["dest"], item["name"])
    if os.path.lexists(dst):
        os.unlink(dst)
    try:
        os.link(src, dst)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
        shutil.copyfile(src, dst)
        copied += 1
for hexd in req["fresh"]:
    st = os.stat(os.path.join(store, hexd))
    manifest[hexd] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
if req["fresh"]:
    tmp = manifest_path + ".tmp.%d" % os.getpid()
    with open(tmp, "w") as f:
        json.dump(manifest, f)
    os.replace(tmp, manifest_path)
print(json.dumps({"copied": copied}))
"""

# Host side of "what would I fetch?": stdin {"dir", "names": [...] | null}
# -> {"files": [{"name", "size", "sha256"}], "missing": [...]}.
_LIST = r"""
import hashlib, json, os, sys
req = json.load(sys.stdin)
root = req["dir"]
names = req["names"]
if names is None:
    names = sorted(
        os.path.relpath(os.path.join(d, n), root)
        for d, _, files in os.walk(root) for n in files if not n.endswith(req["partial"])
    )
files, missing = [], []
for name in names:
    path = os.path.join(root, name)
    if not os.path.isfile(path):
        missing.append(name)
        continue
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    files.append({"name": name, "size": os.path.getsize(path), "sha256": h.hexdigest()})
print(json.dumps({"files": files, "missing": missing}))
"""


def _remote_json(remote: Remote, snippet: str, request: dict) -> dict:
    """Run a python3 snippet on the host with `request` as JSON on stdin; its last stdout line is JSON."""
    result = remote.run([TRANSPORT_SETTINGS["remote_python"], "-c", snippet], stdin_text=json.dumps(request))
    return json.loads(result.stdout.strip().splitlines()[-1])


def _check_name(name: str, *, nested: bool) -> str:
    """A file name that stays inside its folder on both sides (no '..', no absolute path, no NUL)."""
    parts = PurePosixPath(name).parts
    if (
        not name
        or "\0" in name
        or name.startswith("/")
        or any(p in ("..", ".") for p in parts)
        or (not nested and len(parts) != 1)
    ):
        raise SyncError(f"refusing unsafe file name {name!r}")
    return name


def upload_files(
    remote: Remote,
    files: Sequence[Path],
    blobs_dir: str,
    dest_dir: str,
    progress: Progress | None = None,
) -> UploadReport:
    """Send `files` into the host's content store and hard-link them into `dest_dir` under their names."""
    names = [_check_name(Path(f).name, nested=False) for f in files]
    if len(set(names)) != len(names):
        raise SyncError(f"two files share a name: {sorted(n for n in names if names.count(n) > 1)}")
    digests = [sha256_file(Path(f)) for f in files]
    sizes = [Path(f).stat().st_size for f in files]
    request = {"blobs": blobs_dir, "algorithm": STORE["algorithm"], "manifest": STORE["manifest"]}
    present = set(_remote_json(remote, _CHECK, {**request, "want": sorted(set(digests))})["present"])

    total = sum(size for digest, size in _unique(digests, sizes) if digest not in present)
    report, done, fresh = UploadReport(), 0, []
    store = posixpath.join(blobs_dir, STORE["algorithm"])
    for path, name, digest, size in zip(files, names, digests, sizes, strict=True):
        if digest in present or digest in fresh:
            report.files.append(FileTransfer(name, digest, size, 0, skipped=digest in present))
            continue
        sent = remote.put_file(
            path, posixpath.join(store, digest), _offset(progress, done, total), expected_sha256=digest
        )
        done += size
        fresh.append(digest)
        report.files.append(FileTransfer(name, digest, size, sent, skipped=False))

    link = [{"name": n, "sha256": d} for n, d in zip(names, digests, strict=True)]
    _remote_json(
        remote,
        _LINK,
        {**request, "dest": dest_dir, "files": link, "fresh": fresh, "mode": STORE["blob_mode"]},
    )
    return report


def fetch_files(
    remote: Remote,
    remote_dir: str,
    names: Sequence[str] | None,
    local_dir: Path,
    progress: Progress | None = None,
) -> FetchReport:
    """Download `names` (relative to `remote_dir`; None = every file under it) into `local_dir`, verified."""
    if names is not None:
        names = [_check_name(n, nested=True) for n in names]
    listing = _remote_json(
        remote, _LIST, {"dir": remote_dir, "names": names, "partial": TRANSPORT_SETTINGS["partial_suffix"]}
    )
    if listing["missing"]:
        raise SyncError(f"{remote.target.name}: not found in {remote_dir}: {', '.join(listing['missing'])}")
    report = FetchReport()
    wanted = []
    for item in listing["files"]:
        name = _check_name(item["name"], nested=True)
        local = Path(local_dir) / name
        if local.is_file() and local.stat().st_size == item["size"] and sha256_file(local) == item["sha256"]:
            report.files.append(FileTransfer(name, item["sha256"], item["size"], 0, skipped=True))
        else:
            wanted.append((item, local))
    total, done = sum(item["size"] for item, _ in wanted), 0
    for item, local in wanted:
        received = remote.get_file(
            posixpath.join(remote_dir, item["name"]),
            local,
            _offset(progress, done, total),
            expected_sha256=item["sha256"],
        )
        done += item["size"]
        report.files.append(FileTransfer(item["name"], item["sha256"], item["size"], received, skipped=False))
    return report


def _unique(digests: Sequence[str], sizes: Sequence[int]) -> list[tuple[str, int]]:
    return list(dict(zip(digests, sizes, strict=True)).items())


def _offset(progress: Progress | None, done: int, total: int) -> Progress | None:
    """Turn a per-file progress callback into one over the whole batch."""
    if progress is None:
        return None
    return lambda n, _size: progress(done + n, total)


def _human(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"


@contextlib.contextmanager
def rich_progress(description: str) -> Iterator[Callable[[int, int], None]]:
    """A progress callback that draws a rich bar with bytes done, total and speed (for the CLI)."""
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )
    from rich.progress import (
        Progress as RichProgress,
    )

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with RichProgress(*columns, transient=False) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update

"""Files to and from a workstation, many per stream, verified by sha256 on the way.

Upload (`upload_blobs`): the files go into the host's content store through one `receive` tool channel
(jobs/host/receive.py): one exchange says which blobs the host has and how much of each partial upload it
kept; the rest is sent back to back, each resumed where its .part ends; the host hashes what it writes and
keeps a blob only when it hashes to its name. Download (`fetch`): one `send` tool channel
(jobs/host/send.py) lists the files with their cached digests, the laptop says which it needs (and from which
offset a kept .part resumes), and each arrives followed by the sha256 the host computed while reading it;
the laptop hashes what it writes and keeps a file only when both agree. No file is read twice on either
side, and a complete local file is never replaced by a partial one.

Bulk copies (over jobs/ssh/openssh.py's threshold) move through OpenSSH's client where the laptop has one:
the first exchange on paramiko says how many bytes would move; when that is bulk, the tool is told there is
nothing more and the same request runs again on the OpenSSH channel, so the protocol is one and the same.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import ClassVar

from radeonlab.errors import TransportError
from radeonlab.jobs.host.receive import sha256_of
from radeonlab.jobs.host.writeback import Writeback
from radeonlab.jobs.plan.localfile import LocalFile
from radeonlab.jobs.ssh import openssh
from radeonlab.jobs.ssh.connection import Channel, Remote
from radeonlab.jobs.ssh.openssh import SshChannel

Progress = Callable[[int, int], None]  # (bytes_done, total)
BLOCK = 1 << 20
PARTIAL = ".part"


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
            f"{len(self.files)} file(s): {self._moved} {human_bytes(self.bytes_transferred)}; "
            f"{skipped} {self._skipped_note} ({human_bytes(self.bytes_skipped)} not {self._moved})"
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


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"


def sha256_file(path: Path, limit: int | None = None) -> str:
    """sha256 of a local file (or of its first `limit` bytes), streamed: the receiver's own function."""
    return sha256_of(str(path), limit)


def check_name(name: str, *, nested: bool) -> str:
    """A file name that stays inside its folder on both sides (no '..', no absolute path, no NUL)."""
    parts = PurePosixPath(name).parts
    if not name or "\0" in name or name.startswith("/") or any(p in ("..", ".") for p in parts):
        raise TransportError(f"refusing unsafe file name {name!r}")
    if not nested and len(parts) != 1:
        raise TransportError(f"refusing unsafe file name {name!r}")
    return name


def _open(
    remote: Remote, tool: str, root: str, request: dict, planned: Callable[[dict], int]
) -> tuple[Channel | SshChannel, dict | None]:
    """The tool's channel after its first exchange (request -> answer), moved to OpenSSH when the bytes
    `planned(answer)` says would move are bulk: the paramiko run is ended cleanly (no more input: nothing
    moves) and the same request is asked again over OpenSSH, whose answer is the one used."""
    chan = remote.open_tool(tool, [root])
    chan.send_json(request)
    try:
        answer = chan.read_json()
        if answer is None or not openssh.wanted(planned(answer)):
            return chan, answer
    except BaseException:
        chan.close()
        raise
    with chan:
        chan.close_input()
        while chan.read_json() is not None:
            pass
        chan.finish()
    bulk = openssh.open_tool(remote, tool, [root])
    bulk.send_json(request)
    answer = bulk.read_json()
    if answer is None:
        code, err = bulk.finish()
        bulk.close()
        # OpenSSH is stricter than paramiko in places (a key file readable by others): say how to copy anyway
        hint = f"{openssh.SETTINGS['env']}=paramiko copies through paramiko instead"
        raise TransportError(f"{remote.target.name}: OpenSSH copy failed: {err or f'exit {code}'} ({hint})")
    return bulk, answer


# ------------------------------------------------------------------------------------------------ upload


def blobs_present(remote: Remote, files: Sequence[LocalFile], blobs_dir: str) -> set[str]:
    """Which of these contents the host's store already holds (the upload's first exchange, alone)."""
    unique = list({f.sha256: f for f in files}.values())
    if not unique:
        return set()
    with remote.open_tool("receive", [blobs_dir]) as chan:
        chan.send_json({"files": [{"sha256": f.sha256, "size": f.size} for f in unique]})
        have = set((chan.read_json() or {}).get("have") or [])
        chan.close_input()
        chan.read_json()
        chan.finish()
    return have


def upload_blobs(
    remote: Remote, files: Sequence[LocalFile], blobs_dir: str, progress: Progress | None = None
) -> tuple[set[str], int]:
    """Make the host's content store hold every file; returns (digests already there, bytes sent)."""
    unique = list({f.sha256: f for f in files}.values())
    if not unique:
        return set(), 0
    for attempt in range(2):  # a blob whose kept .part turned out damaged is sent again from zero
        request = {"files": [{"sha256": f.sha256, "size": f.size} for f in unique]}

        def planned(answer: dict, unique: list[LocalFile] = unique) -> int:
            there = set(answer.get("have") or [])
            return sum(f.size for f in unique if f.sha256 not in there)

        chan, first = _open(remote, "receive", blobs_dir, request, planned)
        with chan:
            answer = first or {}
            have = set(answer.get("have") or [])
            partial = {k: int(v) for k, v in (answer.get("partial") or {}).items()} if attempt == 0 else {}
            missing = [f for f in unique if f.sha256 not in have]
            total = sum(f.size - _resumable(partial, f) for f in missing)
            sent = _send_blobs(chan, missing, partial, progress, total)
            result = chan.read_json() or {}
            code, err = chan.finish()
        failed = result.get("failed") or {}
        if code not in (0, 4) or (not result and missing):
            raise TransportError(f"{remote.target.name}: upload failed: {err or f'exit {code}'}")
        damaged = {h for h, why in failed.items() if why.startswith("sha256 mismatch")}
        if failed.keys() - damaged or (damaged and attempt):
            h, why = next(iter(failed.items()))
            name = next((str(f.path) for f in unique if f.sha256 == h), h)
            raise TransportError(f"{remote.target.name}: upload of {name} failed: {why}")
        if not damaged:
            return have, sent
        unique = [f for f in unique if f.sha256 in damaged]
    return have, sent


def _resumable(partial: dict[str, int], f: LocalFile) -> int:
    kept = partial.get(f.sha256, 0)
    return kept if 0 < kept < f.size else 0


def _send_blobs(
    chan: Channel | SshChannel,
    missing: Sequence[LocalFile],
    partial: dict[str, int],
    progress: Progress | None,
    total: int,
) -> int:
    sent = 0
    buf = bytearray(BLOCK)
    view = memoryview(buf)
    try:
        for f in missing:
            offset = _resumable(partial, f)
            chan.send_json({"sha256": f.sha256, "size": f.size, "offset": offset})
            with open(f.path, "rb") as src:
                src.seek(offset)
                while n := src.readinto(view):
                    chan.send(view[:n])
                    sent += n
                    if progress:
                        progress(sent, total)
        chan.close_input()
    except TransportError:
        code, err = chan.finish(wait_s=1.0)  # the receiver may have stopped on its own (disk full)
        reason = (chan.read_json() or {}).get("failed") if code not in (-1,) else None
        if reason:
            raise TransportError(
                f"{chan.remote.target.name}: upload failed: {next(iter(reason.values()))}"
            ) from None
        raise TransportError(
            f"{chan.remote.target.name}: connection lost after {human_bytes(sent)} of {human_bytes(total)}; "
            "what arrived is kept on the host and the next upload resumes it"
        ) from None
    return sent


# ------------------------------------------------------------------------------------------------- fetch


def fetch(
    remote: Remote,
    root: str,
    local_dir: Path,
    names: Sequence[str] | None = None,
    under: Sequence[str] | None = None,
    progress: Progress | None = None,
) -> FetchReport:
    """Download `names` (relative to `root` on the host), or every file under `under` folders, verified."""
    if names is not None:
        names = [check_name(n, nested=True) for n in names]
    report = FetchReport()
    for attempt in range(2):  # a kept .part that turned out not to be a prefix is fetched again from zero
        retry: list[str] = []
        request = {"names": list(names) if names is not None else None, "under": under}
        chan, listing = _open(remote, "send", root, request, lambda ls: _unfetched_bytes(ls, Path(local_dir)))
        with chan:
            if listing is None:  # the tool stopped before answering (it refused a name): say why
                code, err = chan.finish()
                raise TransportError(
                    f"{remote.target.name}: fetch from {root} failed: {err or f'exit {code}'}"
                )
            if listing.get("missing"):
                chan.close()
                raise TransportError(
                    f"{remote.target.name}: not found in {root}: {', '.join(listing['missing'])}"
                )
            plan, skipped = _fetch_plan(listing.get("files") or [], Path(local_dir), fresh=attempt > 0)
            report.files += skipped
            chan.send_json({"send": [{"name": item["name"], "offset": off} for item, off in plan]})
            total = sum(item["size"] - off for item, off in plan)
            done = 0
            for item, _ in plan:
                moved, ok = _receive_file(chan, Path(local_dir), progress, done, total)
                done += moved
                if ok:
                    report.files.append(FileTransfer(item["name"], ok, item["size"], moved, skipped=False))
                else:
                    retry.append(item["name"])
            code, err = chan.finish()
        if code != 0:
            raise TransportError(f"{remote.target.name}: fetch from {root} failed: {err or f'exit {code}'}")
        if not retry:
            return report
        if attempt:
            raise TransportError(f"{remote.target.name}: {retry[0]} arrived damaged twice (sha256 mismatch)")
        names, under = retry, None
    return report


def _unfetched_bytes(listing: dict, local_dir: Path) -> int:
    """Bytes a fetch may move, from sizes alone (no local file is read for this estimate)."""
    total = 0
    for item in listing.get("files") or []:
        local = local_dir / check_name(item["name"], nested=True)
        if not (local.is_file() and local.stat().st_size == item["size"]):
            total += item["size"]
    return total


def _fetch_plan(
    files: list[dict], local_dir: Path, fresh: bool
) -> tuple[list[tuple[dict, int]], list[FileTransfer]]:
    plan, skipped = [], []
    for item in files:
        name = check_name(item["name"], nested=True)
        local = local_dir / name
        same_size = local.is_file() and local.stat().st_size == item["size"]
        if item.get("sha256") and same_size and sha256_file(local) == item["sha256"]:
            skipped.append(FileTransfer(name, item["sha256"], item["size"], 0, skipped=True))
            continue
        part = local.with_name(local.name + PARTIAL)
        kept = part.stat().st_size if part.exists() and not fresh else 0
        plan.append((item, kept if kept < item["size"] else 0))
    return plan, skipped


def _receive_file(
    chan: Channel | SshChannel, local_dir: Path, progress: Progress | None, done: int, total: int
) -> tuple[int, str | None]:
    """One file of the send stream into <name>.part, then renamed; (bytes received, sha256 or None)."""
    head = chan.read_json()
    if head is None:
        raise TransportError(f"{chan.remote.target.name}: the download stream ended early")
    local = local_dir / check_name(head["name"], nested=True)
    part = local.with_name(local.name + PARTIAL)
    local.parent.mkdir(parents=True, exist_ok=True)
    offset, size = int(head["offset"]), int(head["size"])
    h = hashlib.sha256()
    received = 0
    buf = bytearray(BLOCK)
    view = memoryview(buf)
    # flushed to disk while the rest arrives (writeback.py): the closing fsync waits only for the tail
    with open(part, "ab+") as f, Writeback(f.fileno()) as flushing:
        f.truncate(offset)
        f.seek(0)
        while prefix := f.read(min(BLOCK, offset - f.tell())):
            h.update(prefix)
        f.seek(offset)
        left = size - offset
        try:
            while left:
                n = chan.read_into(view[: min(left, BLOCK)])
                if not n:
                    raise TransportError("the stream ended")
                f.write(view[:n])
                h.update(view[:n])
                flushing.wrote(n)
                left -= n
                received += n
                if progress:
                    progress(done + received, total)
        except TransportError:
            raise TransportError(
                f"{chan.remote.target.name}: connection lost downloading {head['name']} at "
                f"{human_bytes(offset + received)} of {human_bytes(size)}; {part} is kept and the next fetch "
                "resumes it"
            ) from None
        f.flush()
        flushing.finish()
    trailer = chan.read_json() or {}
    if trailer.get("sha256") != h.hexdigest():
        part.unlink()
        return received, None
    os.replace(part, local)
    return received, h.hexdigest()

"""The data rows of the bench: radeonlab's verified transfers (jobs/ssh/transfer.py) against plain `scp`.

Per size and round, with new random content each round (the content store would skip a known blob), each
timed from connect to close and alternating in one round:
- scp up; `upload_blobs` (content-addressed, the host hashes what it writes and keeps the blob only when it
  hashes to its name); a raw exec-channel stream `cat >file` on the same kind of connection (no hashing,
  no tool start: the transport's ceiling, to show where the time goes);
- scp down; `fetch` of that file from a folder the host never hashed (the host hashes while sending, the
  laptop while writing: both must agree); raw `cat file` down;
then the re-upload of the unchanged file (bytes sent, time, ratio to one scp up).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.ssh.connection import Channel, connect, quote_argv
from radeonlab.jobs.ssh.transfer import BLOCK, LocalFile, fetch, sha256_file, upload_blobs
from radeonlab.sandbox.hosts import Sandbox, SandboxHost

LAB_HOME = "/home/lab/radeonlab"
BLOBS = f"{LAB_HOME}/blobs"
SCRATCH = "/home/lab/bench-data"  # scp's copies and the raw streams' files: a folder no tool has hashed


def scp_options(sbx: Sandbox, port: int) -> list[str]:
    """Plain scp with the sandbox's key and known_hosts only (no ~/.ssh/config), strict host keys."""
    return ["-F", "/dev/null", "-i", str(sbx.key), "-o", f"UserKnownHostsFile={sbx.known_hosts}",
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-P", str(port)]  # fmt: skip


def random_file(path: Path, size_mb: int) -> None:
    """`size_mb` MB of random bytes at `path`."""
    with open(path, "wb") as f:
        for _ in range(size_mb):
            f.write(os.urandom(1_000_000))


def _timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def _open_raw(target: HostTarget, script: str, path: str) -> tuple[Any, Channel]:
    """A connection and one exec channel running `sh -c script sh path` (no host tool, no hashing).

    Uses the connection's private channel opener: the bench measures the bare transport, which the product
    never exposes on its own."""
    remote = connect(target)
    return remote, Channel(remote, remote._channel(quote_argv(["sh", "-c", script, "sh", path])))


def raw_up(target: HostTarget, src: Path, dest: str) -> None:
    remote, chan = _open_raw(target, 'cat >"$1"', dest)
    with remote, chan:
        buf = bytearray(BLOCK)
        view = memoryview(buf)
        with open(src, "rb") as f:
            while n := f.readinto(view):
                chan.send(view[:n])
        chan.close_input()
        code, err = chan.finish()
    if code != 0:
        raise RuntimeError(f"raw upload failed: {err or code}")


def raw_down(target: HostTarget, path: str, dest: Path) -> None:
    remote, chan = _open_raw(target, 'exec cat "$1"', path)
    with remote, chan, open(dest, "wb") as out:
        buf = bytearray(BLOCK)
        view = memoryview(buf)
        while n := chan.read_into(view):
            out.write(view[:n])
        code, err = chan.finish()
    if code != 0:
        raise RuntimeError(f"raw download failed: {err or code}")


def _round(
    scp: list[str], at: str, target: HostTarget, work: Path, local: LocalFile, name: str, raw_name: str
) -> dict[str, float]:
    """One round of every method on one new content; each arrival checked against what was sent."""
    size, src, remote_copy = local.size, local.path, f"{SCRATCH}/{name}"

    def upload() -> None:
        with connect(target) as remote:
            _have, sent = upload_blobs(remote, [local], BLOBS)
        if sent != size:
            raise RuntimeError(f"upload_blobs sent {sent} of {size} bytes")

    def down() -> None:
        with connect(target) as remote:
            report = fetch(remote, SCRATCH, work / "fetched", names=[name])
        if report.bytes_received != size:
            raise RuntimeError(f"fetch received {report.bytes_received} of {size} bytes")

    arrived = (work / "fetched" / name, work / "scp-down.bin", work / "raw-down.bin")
    times = {
        "scp_up": _timed(lambda: subprocess.run([*scp, str(src), at + remote_copy], check=True)),
        "upload_blobs": _timed(upload),
        "raw_up": _timed(lambda: raw_up(target, src, f"{SCRATCH}/{raw_name}")),
        "scp_down": _timed(lambda: subprocess.run([*scp, at + remote_copy, str(arrived[1])], check=True)),
        "fetch": _timed(down),
        "raw_down": _timed(lambda: raw_down(target, remote_copy, arrived[2])),
    }
    for got in arrived:
        if sha256_file(got) != local.sha256:
            raise RuntimeError(f"{got.name} arrived different from what was sent")
        got.unlink()
    return times


def bench_size(
    sbx: Sandbox, host: SandboxHost, target: HostTarget, work: Path, size_mb: int, rounds: int
) -> dict[str, Any]:
    """One file size: every method's seconds per round, MB/s medians, ratios to scp, and the re-upload."""
    work.mkdir(parents=True, exist_ok=True)
    src = work / "dataset.bin"
    random_file(src, size_mb)
    size = src.stat().st_size
    at = f"{target.user}@{target.hostname}:"
    scp = ["scp", "-q", *scp_options(sbx, target.port)]
    host.exec(["mkdir", "-p", SCRATCH, BLOBS], user=target.user)
    times: dict[str, list[float]] = {
        k: [] for k in ("scp_up", "upload_blobs", "raw_up", "scp_down", "fetch", "raw_down")
    }
    local = LocalFile.of(src)
    for r in range(rounds):
        with open(src, "r+b") as f:
            f.write(os.urandom(16))
        local = LocalFile.of(src)  # hashing on the laptop is part of planning a job, timed apart below
        for key, seconds in _round(scp, at, target, work, local, f"scp-{r}.bin", f"raw-{r}.bin").items():
            times[key].append(seconds)
        if r + 1 < rounds:  # keep the host's disk small: the last blob stays for the re-upload row
            host.exec(["rm", "-f", f"{BLOBS}/sha256/{local.sha256}", f"{SCRATCH}/scp-{r}.bin",
                       f"{SCRATCH}/raw-{r}.bin"])  # fmt: skip
    hash_s = _timed(lambda: LocalFile.of(src))
    again: dict[str, Any] = {}

    def reupload() -> None:
        with connect(target) as remote:
            _have, again["sent"] = upload_blobs(remote, [local], BLOBS)

    again_s = _timed(reupload)
    host.exec(["rm", "-rf", SCRATCH, f"{BLOBS}/sha256/{local.sha256}"])
    src.unlink()
    rate = {k: size / statistics.median(v) / 1e6 for k, v in times.items()}
    return {
        "size_mb": size_mb,
        "rounds": rounds,
        "seconds": times,
        "mb_per_s": rate,
        "upload_over_scp": rate["upload_blobs"] / rate["scp_up"],
        "raw_up_over_scp": rate["raw_up"] / rate["scp_up"],
        "fetch_over_scp": rate["fetch"] / rate["scp_down"],
        "raw_down_over_scp": rate["raw_down"] / rate["scp_down"],
        "laptop_sha256_s": hash_s,
        "reupload_bytes_sent": again["sent"],
        "reupload_s": again_s,
        "reupload_over_scp_s": again_s / statistics.median(times["scp_up"]),
    }


def bench_data(
    sbx: Sandbox, host: SandboxHost, target: HostTarget, work: Path, sizes_mb: list[int], rounds: int
) -> dict[str, Any]:
    """Every size in `sizes_mb` (e.g. 100 and 1000), each in its own folder, the cipher used."""
    with connect(target) as remote:
        cipher = remote._client.get_transport().local_cipher  # type: ignore[union-attr]
    sizes = {str(mb): bench_size(sbx, host, target, work / f"{mb}mb", mb, rounds) for mb in sizes_mb}
    return {"cipher": cipher, "sizes": sizes}

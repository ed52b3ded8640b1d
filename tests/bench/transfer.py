"""Measure radeonlab.jobs.ssh.connection's put/get against plain `scp` on a sandbox host (a measurement,
not a test).

    .venv/bin/python -m tests.bench.transfer [--size-mb 200] [--rounds 3]

Creates one SIMULATED workstation (radeonlab/sandbox) in a temporary state dir, moves the same random file
up and down with `scp` and with radeonlab.jobs.ssh.connection (each timed from connect to close),
alternating per round, and
prints the medians in MB/s and as ratios to scp. The host is destroyed at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from radeonlab.jobs.fleet.inventory import HostTarget, load_inventory
from radeonlab.jobs.ssh.connection import connect, sha256_file

from radeonlab.sandbox import reap
from radeonlab.sandbox.hosts import Sandbox

INVENTORY = Path(__file__).resolve().parents[2] / "inventories" / "sandbox.py"
REMOTE = "/home/lab/bench.bin"


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def scp_options(sbx: Sandbox, port: int) -> list[str]:
    """Plain scp with the sandbox's key and known_hosts only (no ~/.ssh/config), strict host keys."""
    return ["-F", "/dev/null", "-i", str(sbx.key), "-o", f"UserKnownHostsFile={sbx.known_hosts}",
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-P", str(port)]  # fmt: skip


def random_file(path: Path, size_mb: int) -> str:
    """`size_mb` MB of random bytes at `path`; returns its sha256."""
    with open(path, "wb") as f:
        for _ in range(size_mb):
            f.write(os.urandom(1_000_000))
    return sha256_file(path)


def measure(sbx: Sandbox, target: HostTarget, work: Path, size_mb: int, rounds: int) -> dict[str, object]:
    """put/get of jobs.ssh.connection vs scp on `target`; MB/s medians (connect to close), ratios to scp."""
    src = work / "src.bin"
    digest = random_file(src, size_mb)
    size = src.stat().st_size
    ssh_opts = scp_options(sbx, target.port)
    at = f"{target.user}@{target.hostname}:"

    def ours_up() -> None:
        with connect(target) as remote:
            remote.run(["rm", "-f", REMOTE, REMOTE + ".part"])
            remote.put_file(src, REMOTE)

    def ours_down() -> None:
        with connect(target) as remote:
            remote.get_file(REMOTE, work / "down-ours.bin")

    # as jobs.apply.sync uses them: the host checks the sha256 before the blob gets its name; a fetch
    # already knows the host's sha256 from its listing round trip (not timed here)
    def ours_up_hashed() -> None:
        with connect(target) as remote:
            remote.run(["rm", "-f", REMOTE, REMOTE + ".part"])
            remote.put_file(src, REMOTE, expected_sha256=digest)

    def ours_down_hash_known() -> None:
        with connect(target) as remote:
            remote.get_file(REMOTE, work / "down-ours.bin", expected_sha256=digest)

    def scp(*paths: str) -> Callable[[], object]:
        return lambda: subprocess.run(["scp", "-q", *ssh_opts, *paths], check=True)

    runs = {
        "scp up": scp(str(src), at + REMOTE + ".scp"),
        "put": ours_up,
        "put, sha256 checked on host": ours_up_hashed,
        "scp down": scp(at + REMOTE + ".scp", str(work / "down-scp.bin")),
        "get, host hashes while sending": ours_down,
        "get, sha256 known (fetch_files)": ours_down_hash_known,
    }
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(rounds):
        for name, action in runs.items():
            times[name].append(timed(action))
    assert sha256_file(work / "down-ours.bin") == sha256_file(src) == sha256_file(work / "down-scp.bin")
    with connect(target) as remote:
        cipher = remote._client.get_transport().local_cipher
    rate = {k: size / statistics.median(v) / 1e6 for k, v in times.items()}
    ups = ("scp up", "put", "put, sha256 checked on host")
    ratio = {k: rate[k] / rate["scp up" if k in ups else "scp down"] for k in runs}
    return {"size_mb": size_mb, "rounds": rounds, "cipher": cipher, "mb_per_s": rate, "ratio_to_scp": ratio}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="rl-bench-") as tmp:
        work = Path(tmp)
        sbx = Sandbox(work / "sandbox")
        reap.claim(sbx.state_dir)
        sbx.ensure_base()
        try:
            host = sbx.create_host("bench")
            os.environ["RADEONLAB_SANDBOX_DIR"] = str(sbx.state_dir)
            target = load_inventory(INVENTORY)[host.name]
            result = measure(sbx, target, work, args.size_mb, args.rounds)
        finally:
            sbx.destroy_all()
    cipher = result["cipher"]
    print(f"{args.size_mb} MB file, {args.rounds} rounds, medians (connect to close), cipher {cipher}:")
    for name, rate in result["mb_per_s"].items():  # type: ignore[union-attr]
        print(f"  {name:34} {rate:6.1f} MB/s   {result['ratio_to_scp'][name]:.2f}x scp")  # type: ignore[index]


if __name__ == "__main__":
    main()

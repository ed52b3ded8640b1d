"""The `models pull` rows of the bench (issue 28): a lab downloads each Hub file once, and the LAN fan-out
against the raw host-to-host stream of the same bytes, in one run (a measurement, not a test).

On N provisioned SIMULATED workstations, with the SIMULATED Hub (radeonlab/sandbox/hub.py) serving the Hub
row's model over its SIMULATED link (tests/bench/jobs.py HUB_LINK_MBIT_S):
1. every host's cache emptied of the model, then `radeonlab models pull MODEL --limit h1,...,hN --json` as a
   user types it, timed; the Hub's own counters give the body bytes it served during the command (the
   laptop's resolve included) and how many times each file was sent whole;
2. the fan-out alone: the other hosts' copies removed (`models rm`), then the product's copy
   (jobs/fleet/modelcopy.copy_model, what `models pull` runs after the Hub download: the laptop relays a
   `send` stream from the source to a `receive` stream on each other host, which checks every file against
   the Hub's sha256 or ETag) to those hosts in parallel, timed;
3. the raw stream of the same bytes: on the same kind of connections, `cat` of the source's snapshot files
   relayed by the laptop into `cat >file` on each other host, in parallel (`ssh hostB cat file | ssh hostC
   'cat > file'`, without tool, hash or check: what the fan-out would take with no verification), timed.
`fanout_over_raw_stream` is the raw stream's seconds over the fan-out's (its speed relative to the raw
stream: 1.0 is as fast, lower is slower).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from radeonlab.jobs.fleet import modelcopy
from radeonlab.jobs.fleet.inventory import HostTarget, load_inventory
from radeonlab.jobs.fleet.probe import read_host
from radeonlab.jobs.spec import hub as resolver
from radeonlab.jobs.ssh.connection import connect
from radeonlab.jobs.ssh.transfer import BLOCK
from radeonlab.sandbox.hosts import SandboxHost
from radeonlab.sandbox.hub import spawn
from tests.bench.data import _open_raw
from tests.bench.jobs import HUB_LINK_MBIT_S, INVENTORY, cli, hub_model

ENDPOINT = "radeonlab_hf_endpoint"  # the inventory key `models pull` reads the Hub's address from
RAW_COPY = "bench-raw-model.bin"  # the raw stream's file, in the receiving user's home


def _parallel(dests: list[HostTarget], one: Callable[[HostTarget], Any]) -> tuple[float, list[Any]]:
    """`one` on every destination at once (as `models pull` copies to the other hosts); wall seconds."""
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(dests)) as pool:
        results = list(pool.map(one, dests))
    return time.perf_counter() - start, results


def fan_out(
    source: HostTarget,
    record: Any,
    dests: list[HostTarget],
    repo_id: str,
    sha: str,
    files: list[dict[str, Any]],
) -> tuple[float, list[dict[str, Any]]]:
    """The product's copy from `source`'s cache to every host of `dests`, in parallel, as `models pull` runs
    it after the Hub download: the source's host record already read (`record`), each receiver's read."""

    def one(dest: HostTarget) -> dict[str, Any]:
        with connect(source) as tx, connect(dest) as rx:
            src = modelcopy.Side.of(tx, record)
            dst = modelcopy.Side.of(rx, read_host(rx, jobs="none").record)
            done = modelcopy.copy_model(src, dst, repo_id, sha, "main", files)
        if not done["complete"] or done["refused"]:
            raise RuntimeError(f"bench: the copy to {dest.name} did not complete: {done}")
        return done

    return _parallel(dests, one)


def raw_stream(source: HostTarget, dests: list[HostTarget], snapshot: str) -> tuple[float, list[int]]:
    """`cat` of every file of the source's snapshot folder (through its links) relayed into `cat >file` on
    every host of `dests`, in parallel; the bytes each received."""
    send = 'cd "$1" && find -L . -type f | sort | while read -r f; do cat "$f"; done'

    def one(dest: HostTarget) -> int:
        tx_conn, tx = _open_raw(source, send, snapshot)
        rx_conn, rx = _open_raw(dest, 'cat >"$1"', RAW_COPY)
        total = 0
        with tx_conn, tx, rx_conn, rx:
            view = memoryview(bytearray(BLOCK))
            while n := tx.read_into(view):
                rx.send(view[:n])
                total += n
            rx.close_input()
            codes = (tx.finish(), rx.finish())
        if any(code != 0 for code, _err in codes):
            raise RuntimeError(f"bench: the raw stream to {dest.name} failed: {codes}")
        return total

    return _parallel(dests, one)


def _in_home(path: str) -> str:
    """A host path as the exec channel's shell finds it (it starts in the user's home)."""
    return path[2:] if path.startswith("~/") else path


def bench_models_pull(
    hosts: list[SandboxHost],
    work: Path,
    env: Mapping[str, str],
    model: str = "bench",
    link_mbit_s: float = HUB_LINK_MBIT_S,
) -> dict[str, Any]:
    """Issue 28's two rows on `hosts` (3 in the full run): Hub bytes per model byte, fan-out vs raw."""
    if len(hosts) < 2:
        raise RuntimeError("bench: models_pull needs at least 2 provisioned hosts")
    catalog, repo_id, main = hub_model(work, model)
    model_bytes = sum(f.size for f in main.files)
    rate = round(link_mbit_s * 1_000_000 / 8)  # bytes per second
    names = [h.name for h in hosts]
    with spawn(catalog) as hub:
        hub.set_rate(rate)
        for h in hosts:
            h.set_data(**{ENDPOINT: hub.url})  # as a user sets it in the inventory
        try:
            # earlier rows (the Hub row's jobs) may have cached it: every host starts without the model
            cli(env, "models", "rm", repo_id, "-i", INVENTORY, "--limit", ",".join(names), check=False)
            mark = len(hub.transfers())
            start = time.perf_counter()
            done = cli(env, "models", "pull", repo_id, "-i", INVENTORY, "--limit", ",".join(names), "--json")
            pull_s = time.perf_counter() - start
            sent = [t for t in hub.transfers()[mark:] if t.repo_id == repo_id]
            # the Hub's answer the copies are checked against (sizes, sha256s, ETags), as `models pull` has it
            answer = resolver.resolve_model(repo_id, endpoint=hub.url, cache_dir=work / "laptop-cache")
        finally:
            for h in hosts:
                h.drop_data(ENDPOINT)
    pulled = {r["host"]: r for r in json.loads(done.stdout)}
    source_name = next(name for name, r in pulled.items() if "from" not in r)
    inventory = load_inventory(INVENTORY)
    source = inventory[source_name]
    dests = [inventory[n] for n in names if n != source_name]
    sha = str(pulled[source_name]["sha"])
    cli(env, "models", "rm", repo_id, "-i", INVENTORY, "--limit", ",".join(d.name for d in dests))
    with connect(source) as remote:
        record = read_host(remote, jobs="none").record
    fanout_s, copies = fan_out(source, record, dests, repo_id, sha, modelcopy.hub_files(answer.files))
    cache = record.model_cache or "~/.cache/huggingface/hub"
    snapshot = f"{_in_home(cache)}/models--{repo_id.replace('/', '--')}/snapshots/{sha}"
    raw_s, received = raw_stream(source, dests, snapshot)
    for h in hosts:
        h.exec(["rm", "-f", f"/home/{h.user}/{RAW_COPY}"], check=False)
    if any(n != model_bytes for n in received):
        raise RuntimeError(f"bench: the raw stream moved {received} bytes, the model has {model_bytes}")
    hub_bytes = sum(t.sent for t in sent)
    download_at_link_s = model_bytes / rate
    return {
        "model": repo_id,
        "model_bytes": model_bytes,
        "hosts": len(hosts),
        "link_mbit_s": link_mbit_s,
        "pull_s": pull_s,
        "pulled": pulled,
        "hub_bytes": hub_bytes,
        # per file, how many times the Hub sent it whole during the command (1: once per lab)
        "hub_downloads": {f.path: sum(t.path == f.path and t.complete for t in sent) for f in main.files},
        "download_at_link_s": download_at_link_s,  # what the SIMULATED link alone costs the download
        "fanout_s": fanout_s,
        "fanout_copied": [c["copied"] for c in copies],
        "raw_stream_s": raw_s,
        # where the pull's time goes: the Hub download at the link, the fan-out (measured apart), the rest
        # (the CLI's start, the laptop's resolve, reading every host's record, the source's tool start)
        "rest_s": pull_s - download_at_link_s - fanout_s,
        "hub_bytes_over_model_bytes": hub_bytes / model_bytes,
        "fanout_over_raw_stream": raw_s / fanout_s,
    }

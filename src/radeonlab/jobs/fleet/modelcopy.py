"""Each Hub file downloaded once per lab: a model one workstation's cache holds is copied to the others.

`models pull` to several hosts pulls from the Hub on one of them (the lab cache host when the inventory
names one, else the first selected host) and copies it from there to the rest; a job placed on a host
whose cache lacks its model first takes it from another host of the inventory that holds it
(jobs/apply/submit.py), and asks the Hub only when none does.

The laptop holds one SSH channel to each side and relays the bytes (jobs/host/modelpeer.py on both ends):
the hosts need no login on each other, the copy is encrypted by SSH, and the Hub token goes to no host
that does not download from the Hub itself. The receiving host verifies every file against the Hub's own
answer, which the laptop asked for (an LFS file's sha256, a regular file's git blob sha1: the Hub's ETags):
a copy that differs is refused, asked for once more from the source, then taken from the Hub.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from radeonlab.errors import ModelError, RadeonlabError, one_line
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.spec.hub import RepoFile
from radeonlab.jobs.ssh.connection import Channel, Remote

CACHE_HOST_KEY = "wheel_cache_host"  # roles/wheel_cache: the lab's cache host, the one with the uplink
BUFFER = 1 << 20
PEER_PROBE_S = 30.0  # a job's submit waits this long at most for the other hosts to say what they hold
Progress = Callable[[int], None]


@dataclass(frozen=True)
class Side:
    """One end of a copy: the open connection, the host's venv python and its model cache."""

    remote: Remote
    python: str
    cache: str | None

    @classmethod
    def of(cls, remote: Remote, record: Any) -> Side:
        return cls(remote, f"{record.venv}/bin/python", record.model_cache or None)

    def open(self, args: Sequence[str]) -> Channel:
        env = {"HF_HUB_CACHE": self.cache} if self.cache else None
        return self.remote.open_tool("modelpeer", list(args), python=self.python, env=env)


def hub_files(files: Sequence[RepoFile]) -> list[dict[str, Any]]:
    """The Hub's answer as the receiving host checks it."""
    return [{"path": f.path, "size": f.size, "etag": f.etag, "lfs": f.lfs} for f in files]


def pick_source(selected: Sequence[HostTarget], inventory: Mapping[str, HostTarget]) -> HostTarget:
    """Which host downloads from the Hub: the lab cache host (wheel_cache_host) when the inventory names
    one (selected or not: it is the host with the uplink), else the first selected host."""
    named = {str(t.data.get(CACHE_HOST_KEY) or "") for t in selected} - {""}
    for name in sorted(named):
        if name in inventory:
            return inventory[name]
    return selected[0]


def _relay(tx: Channel, rx: Channel, count: int, progress: Progress | None) -> int:
    """Forward `count` blobs of a `send` stream to a `receive` stream; the bytes relayed."""
    buffer = bytearray(BUFFER)
    view = memoryview(buffer)
    total = 0
    for _ in range(count):
        header = tx.read_json()
        if header is None:
            raise ModelError(f"{tx.remote.target.name}: the model's sender stopped early")
        rx.send_json(header)
        left = 0 if header.get("missing") else int(header["size"])
        while left:
            n = tx.read_into(view[: min(BUFFER, left)])
            if n == 0:
                raise ModelError(f"{tx.remote.target.name}: the model's sender stopped early")
            rx.send(view[:n])
            left -= n
            total += n
            if progress:
                progress(n)
    return total


def copy_once(
    source: Side, dest: Side, repo_id: str, sha: str, ref: str | None, files: list[dict[str, Any]],
    progress: Progress | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One copy: the receiver names the blobs it lacks, the source streams them, the receiver verifies."""
    args = ["receive", repo_id, sha, *(["--ref", ref] if ref and ref != sha else [])]
    with dest.open(args) as rx:
        rx.send_json({"files": files})
        need = rx.read_json() or {}
        if need.get("event") != "need":
            _code, err = rx.finish()
            raise ModelError(f"{dest.remote.target.name}: {need.get('message') or err or 'no answer'}")
        blobs = [b["blob"] for b in need["blobs"]]
        if blobs:
            with source.open(["send", repo_id]) as tx:
                tx.send_json({"blobs": blobs})
                tx.close_input()
                _relay(tx, rx, len(blobs), progress)
                tx.finish()
        rx.close_input()
        done = rx.read_json() or {}
        code, err = rx.finish()
    if code != 0 or done.get("event") != "done":
        raise ModelError(f"{dest.remote.target.name}: {done.get('message') or err or f'exit {code}'}")
    return done


def copy_model(
    source: Side, dest: Side, repo_id: str, sha: str, ref: str | None, files: list[dict[str, Any]],
    progress: Progress | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Copy, and once more for what the receiver refused; `complete` false: the caller asks the Hub.
    The result: copied bytes, and `refused` {file: why} for every copy that did not match the Hub."""
    refused: dict[str, str] = {}
    copied = 0
    for _ in range(2):
        done = copy_once(source, dest, repo_id, sha, ref, files, progress)
        copied += int(done.get("fetched") or 0)
        refused.update(done.get("failed") or {})
        if done.get("complete"):
            break
    return {"complete": bool(done.get("complete")), "copied": copied, "refused": refused}


def from_peers(
    model: Any, dest: Remote, record: Any, peers: Sequence[HostTarget], say: Callable[[str], None]
) -> bool:
    """Before a job on `dest` asks the Hub for its model: copy the commit from another host of the inventory
    whose cache holds it whole (asked in parallel, PEER_PROBE_S at most). True: `dest` now holds it."""
    from radeonlab.jobs.fleet.probe import read_host
    from radeonlab.jobs.ssh.connection import connect
    from radeonlab.jobs.ssh.group import each_host

    others = [t for t in peers if t.name != dest.target.name]
    if not (model.hub and model.sha and model.hub_files and others):
        return False

    def holder(remote: Remote) -> Any:
        peer = read_host(remote, jobs="none").record
        if peer is None:
            return None
        side = Side.of(remote, peer)
        env = {"HF_HUB_CACHE": side.cache} if side.cache else None
        done = remote.tool(
            "models", ["complete", model.name, model.sha], python=side.python, env=env, check=False
        )
        return peer if done.exit_code == 0 and done.last_json().get("complete") else None

    files = hub_files(model.hub_files)
    for found in each_host(others, holder, PEER_PROBE_S):
        if found.value is None:
            continue
        source = next(t for t in others if t.name == found.host)
        try:
            with connect(source) as remote:
                done = copy_model(Side.of(remote, found.value), Side.of(dest, record), model.name, model.sha,
                                  model.revision or "main", files)  # fmt: skip
        except RadeonlabError as exc:
            say(f"{model.name}: no copy from {source.name}: {one_line(exc)}")
            continue
        for why in done["refused"].values():
            say(f"{model.name}: {dest.target.name} refused a copy from {source.name}: {why}")
        if done["complete"]:
            say(
                f"{model.name}: copied from {source.name}'s model cache to {dest.target.name} "
                f"({done['copied']:,} bytes, each file checked against the Hub's sha256 or ETag); "
                "the job runs offline"
            )
            return True
    return False

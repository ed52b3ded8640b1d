"""Following a running job: one poll per interval over one kept-open connection, reconnecting when it drops.

A poll is one round trip: a python3 snippet on the host returns the job's state (asked of the job's own
launcher.py), and whatever bytes were appended to train.log / output/trainer_log.jsonl since the last
offsets. GPU readings are a second, optional round trip (jobs/host/readings.py). The training itself never
depends on the connection: the launcher runs detached on the host.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from radeonlab.jobs.apply import launch
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.host.readings import GpuReading, parse_readings_output, readings_script
from radeonlab.jobs.ssh.connection import SETTINGS as TRANSPORT_SETTINGS
from radeonlab.jobs.ssh.connection import (
    ChangedHostKeyError,
    Remote,
    RemoteCommandError,
    TransportError,
    UnknownHostKeyError,
    connect,
)

from radeonlab.contract.records import JobPaths, StateRecord

FOLLOW: dict[str, float] = {
    "poll_s": 1.0,  # between polls while the job runs
    "reconnect_every_s": 2.0,  # between reconnect attempts
    "reconnect_timeout_s": 900.0,  # give up after this long without a connection
    "max_chunk_bytes": 4 << 20,  # per file per poll: a huge log arrives over several polls
}
TRAINER_LOG = "output/trainer_log.jsonl"
TRAIN_LOG = "train.log"

# stdin {"dir", "files": {relative name: offset}, "max"} ->
#   {"state": {...}, "alive": bool|null, "job": {job.json}|null, "files": {name: {"size": n, "data": base64}}}
_POLL = r"""
import base64, importlib.util, json, os, sys
req = json.load(sys.stdin)
d = req["dir"]
try:
    with open(os.path.join(d, "state.json")) as f:
        state = json.load(f)
except (OSError, ValueError):
    state = {"state": "queued"}
alive = None
try:
    spec = importlib.util.spec_from_file_location("radeonlab_launcher", os.path.join(d, "launcher.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    alive = mod.pid_alive(state.get("pid"), "launcher.py") or mod.group_alive(state.get("pgid"))
except Exception:
    pass
try:
    with open(os.path.join(d, "job.json")) as f:
        job = json.load(f)  # its attempts: the host-side supervisor appends them as it retries
except (OSError, ValueError):
    job = None
files = {}
for name, offset in req["files"].items():
    path = os.path.join(d, name)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if offset > size:
                offset = 0
            f.seek(offset)
            data = f.read(req["max"])
    except OSError:
        size, data = 0, b""
    files[name] = {"size": size, "offset": offset, "data": base64.b64encode(data).decode()}
print(json.dumps({"state": state, "alive": alive, "job": job, "files": files}))
"""

T = TypeVar("T")
Say = Callable[[str], None]


@dataclass
class PollResult:
    state: StateRecord
    alive: bool | None
    chunks: dict[str, bytes] = field(default_factory=dict)
    restarted: set[str] = field(default_factory=set)  # files that shrank (rewritten): read from 0
    job: dict[str, Any] | None = None  # job.json as the host has it now (attempts grow during the run)


def poll(remote: Remote, paths: JobPaths, offsets: dict[str, int]) -> PollResult:
    """The job's reconciled state and the new bytes of the files in `offsets` (updated in place)."""
    request = {"dir": str(paths.root), "files": offsets, "max": int(FOLLOW["max_chunk_bytes"])}
    result = remote.run([TRANSPORT_SETTINGS["remote_python"], "-c", _POLL], stdin_text=json.dumps(request))
    answer: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    state = StateRecord.from_dict(answer["state"])
    if answer["alive"] is not None:
        state = launch.reconcile(state, answer["alive"])
    out = PollResult(state, answer["alive"], job=answer.get("job"))
    for name, item in answer["files"].items():
        data = base64.b64decode(item["data"])
        if item["offset"] != offsets[name]:
            out.restarted.add(name)
        offsets[name] = item["offset"] + len(data)
        out.chunks[name] = data
    return out


def readings(remote: Remote, host_gpus: list[dict[str, Any]]) -> list[GpuReading]:
    """VRAM and temperature of the host's cards (drm sysfs), indexed like the host record."""
    result = remote.run_script(readings_script(), check=False)
    return parse_readings_output(result.stdout, host_gpus) if result.ok else []


class Link:
    """A connection that comes back: a dropped SSH connection is re-opened and the call retried.

    Only a lost connection is retried; a command that fails, or a host key that is unknown or changed,
    is an error as usual.
    """

    def __init__(self, target: HostTarget, remote: Remote, say: Say, timeout_s: float | None = None) -> None:
        self.target = target
        self.remote = remote
        self.say = say
        self.timeout_s = FOLLOW["reconnect_timeout_s"] if timeout_s is None else timeout_s
        self.reconnects = 0

    def call(self, fn: Callable[[Remote], T]) -> T:
        while True:
            try:
                return fn(self.remote)
            except (RemoteCommandError, UnknownHostKeyError, ChangedHostKeyError):
                raise
            except TransportError as exc:
                self.say(f"connection to {self.target.name} lost ({exc}); reconnecting")
                self.remote.close()
                self.remote = self._reconnect()

    def _reconnect(self) -> Remote:
        start = time.monotonic()
        while True:
            try:
                remote = connect(self.target)
            except (UnknownHostKeyError, ChangedHostKeyError):
                raise
            except TransportError as exc:
                if time.monotonic() - start > self.timeout_s:
                    raise TransportError(
                        f"{self.target.name}: no connection for {self.timeout_s:.0f}s, giving up ({exc}); "
                        "the job keeps running on the host"
                    ) from None
                time.sleep(FOLLOW["reconnect_every_s"])
                continue
            self.reconnects += 1
            self.say(f"reconnected to {self.target.name} after {time.monotonic() - start:.1f}s")
            return remote

    def close(self) -> None:
        self.remote.close()


def stream_log(link: Link, paths: JobPaths, write: Callable[[bytes], None], *, follow: bool) -> StateRecord:
    """Write train.log to `write`; with follow, keep writing what is appended until the job has finished
    and everything it wrote was shown. Returns the job's last state."""
    offsets = {TRAIN_LOG: 0}
    while True:
        result = link.call(lambda r: poll(r, paths, offsets))
        data = result.chunks[TRAIN_LOG]
        if data:
            write(data)
        more = len(data) >= FOLLOW["max_chunk_bytes"]
        if more:
            continue
        if not follow or result.state.state.is_finished():
            return result.state
        time.sleep(FOLLOW["poll_s"])

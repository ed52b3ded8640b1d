"""Following a job: one long-lived stream from its host, re-opened from where it stopped when SSH drops.

The host side is jobs/host/stream.py (JSON lines: state, appended file data, GPU readings, end). This reads
them as typed events; on a lost connection it reconnects (every `reconnect_every_s`, for up to
`reconnect_timeout_s`) and starts the stream again with the offsets already received, so nothing is shown
twice and nothing is skipped. The training itself never depends on the connection.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from radeonlab.contract.records import JobRecord, StateRecord
from radeonlab.errors import HostKeyError, RemoteCommandError, TransportError
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.host.readings import GpuReading
from radeonlab.jobs.ssh.connection import Remote, connect

FOLLOW: dict[str, float] = {
    "interval_s": 1.0,  # how often the host looks for changes (its cost, not the laptop's)
    "gpus_every_s": 5.0,  # GPU readings while watching
    "reconnect_every_s": 2.0,  # between reconnect attempts
    "reconnect_timeout_s": 900.0,  # give up after this long without a connection
    "peers_end_s": 60.0,  # a multi-node job: how long watch waits for the other ranks after rank 0 ended
}
TRAINER_LOG = "output/trainer_log.jsonl"
TRAIN_LOG = "train.log"
Say = Callable[[str], None]


@dataclass
class Event:
    """One line of the host's stream."""

    kind: str  # "state" | "data" | "gpus" | "end"
    state: StateRecord | None = None
    alive: bool | None = None
    job: JobRecord | None = None
    file: str = ""
    data: bytes = b""
    restarted: bool = False  # the file was rewritten: its data starts over from 0
    gpus: list[GpuReading] = field(default_factory=list)


def parse_event(line: dict[str, Any]) -> Event:
    kind = str(line.get("t"))
    if kind == "state":
        state = StateRecord.from_dict(line.get("state") or {})
        alive = line.get("alive")
        job = JobRecord.from_dict(line["job"]) if line.get("job") else None
        return Event(kind, state=state.reconciled(alive), alive=alive, job=job)
    if kind == "data":
        return Event(kind, file=str(line["file"]), data=base64.b64decode(line["data"]))
    if kind == "gpus":
        return Event(kind, gpus=[GpuReading(**g) for g in line.get("gpus") or []])
    return Event(kind)


class Link:
    """A connection that comes back: a dropped connection is re-opened (host-key errors are not retried)."""

    def __init__(self, target: HostTarget, remote: Remote, say: Say, timeout_s: float | None = None) -> None:
        self.target, self.remote, self.say = target, remote, say
        self.timeout_s = FOLLOW["reconnect_timeout_s"] if timeout_s is None else timeout_s
        self.reconnects = 0

    def reconnect(self, why: TransportError) -> Remote:
        self.say(f"connection to {self.target.name} lost ({why}); reconnecting")
        self.remote.close()
        start = time.monotonic()
        while True:
            try:
                self.remote = connect(self.target)
            except HostKeyError:
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
            return self.remote


def events(
    link: Link,
    job_dir: str,
    files: dict[str, int],
    *,
    follow: bool,
    gpus_every: float = 0.0,
    interval: float | None = None,
) -> Iterator[Event]:
    """The job's events until it ended (follow) or one round (no follow); `files` offsets advance in place."""
    while True:
        args = [job_dir, "--interval", str(FOLLOW["interval_s"] if interval is None else interval)]
        args += [a for name, offset in files.items() for a in ("--from", f"{name}={offset}")]
        args += ["--follow"] if follow else []
        args += ["--gpus-every", str(gpus_every)] if gpus_every else []
        try:
            with link.remote.open_tool("stream", args) as chan:
                while (line := chan.read_json()) is not None:
                    event = parse_event(line)
                    if event.kind == "data":
                        event.restarted = int(line["offset"]) != files.get(event.file, 0)
                        files[event.file] = int(line["offset"]) + len(event.data)
                    yield event
                    if event.kind == "end":
                        return
                code, err = chan.finish()
            if code == -1:  # the channel closed without an exit status: the connection died under it
                raise TransportError(f"{link.target.name}: the stream ended without an exit status")
            raise RemoteCommandError(f"{link.target.name}: following the job failed: {err or f'exit {code}'}")
        except (HostKeyError, RemoteCommandError):
            raise
        except TransportError as exc:
            link.reconnect(exc)


def last_lines(data: bytes, count: int) -> bytes:
    """The last `count` lines of a log as a terminal shows them: a progress bar's `\\r` frames (tqdm rewrites
    its line in place) are one line, its last frame, not `count` frames of one line."""
    lines = data.split(b"\n")
    ended = data.endswith(b"\n")
    shown = [line.rstrip(b"\r").rsplit(b"\r", 1)[-1] for line in (lines[:-1] if ended else lines)]
    return b"".join(line + b"\n" for line in shown[-count:]) if ended else b"\n".join(shown[-count:])

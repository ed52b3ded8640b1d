"""Follow one job from its host: one long-lived process per watcher, printing JSON lines as things change.

    python3 -m radeonlab.jobs.host.stream JOB_DIR [--from NAME=OFFSET ...] [--follow] [--interval S]
                                          [--gpus-every S]

--from names the files to send and where to start (default: train.log and output/trainer_log.jsonl from 0;
a negative offset starts that many bytes before the end).

Lines (stdout, one JSON object each, flushed):
  {"t": "state", "state": {state.json}, "alive": bool, "job": {job.json}}   first, then whenever state.json
                                                                           or job.json change or alive flips
  {"t": "data", "file": NAME, "offset": N, "data": base64}   bytes appended to NAME (train.log,
                                                             output/trainer_log.jsonl) since the last line
  {"t": "gpus", "gpus": [readings]}                          every --gpus-every seconds (0: never)
  {"t": "end"}                                               the job has finished and everything was sent
Without --follow: one round of the above, then "end" (what `status` and `logs` without -f need).

Why a long-lived process: `radeonlab watch` used to start python3 once per poll (~6% of a host core). Here
an idle round is a few stat() calls; the host pays for what changed, not for being watched. Stdlib only.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
from dataclasses import asdict

from radeonlab.contract.jobdir import FILES, FINISHED_STATES, job_alive, read_json
from radeonlab.contract.records import HOST_RECORD_PATH
from radeonlab.contract.state import JobState
from radeonlab.jobs.host.readings import read_gpus

CHUNK = 1 << 20  # bytes of one file per line: a huge log arrives over several lines
DEFAULT_FILES = (FILES["train_log"], FILES["trainer_log"])


def emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0


class Follower:
    """What the watcher has been sent so far, and the rounds that send the rest."""

    def __init__(self, job_dir: str, offsets: dict[str, int]) -> None:
        self.dir = job_dir
        self.offsets = dict(offsets)
        self.seen: tuple = ()
        self.record_gpus = (read_json(HOST_RECORD_PATH) or {}).get("gpus") or []

    def state_round(self) -> dict:
        """Send the state when it changed; returns state.json."""
        state_path, job_path = os.path.join(self.dir, FILES["state"]), os.path.join(self.dir, FILES["job"])
        state = read_json(state_path) or {"state": JobState.QUEUED.value}
        alive = job_alive(state)
        key = (_mtime(state_path), _mtime(job_path), alive)
        if key != self.seen:
            self.seen = key
            emit({"t": "state", "state": state, "alive": alive, "job": read_json(job_path)})
        return state

    def data_round(self) -> bool:
        """Send what was appended to each file; True when a file had more than one chunk left."""
        more = False
        for name, offset in self.offsets.items():
            path = os.path.join(self.dir, name)
            try:
                with open(path, "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    if offset < 0:  # "the last N bytes" (logs --tail)
                        offset = max(0, size + offset)
                    elif size < offset:  # rewritten (a remedy trimmed trainer_log.jsonl): start over
                        offset = 0
                    if size == offset:
                        continue
                    f.seek(offset)
                    data = f.read(CHUNK)
            except OSError:
                continue
            emit({"t": "data", "file": name, "offset": offset, "data": base64.b64encode(data).decode()})
            self.offsets[name] = offset + len(data)
            more = more or self.offsets[name] < size
        return more

    def gpus_round(self) -> None:
        emit({"t": "gpus", "gpus": [asdict(g) for g in read_gpus(self.record_gpus)]})


def follow(
    job_dir: str, offsets: dict[str, int], keep_going: bool, interval: float, gpus_every: float
) -> int:
    f = Follower(job_dir, offsets)
    next_gpus = 0.0
    while True:
        state = f.state_round()
        while f.data_round():
            pass
        if gpus_every > 0 and time.monotonic() >= next_gpus:
            f.gpus_round()
            next_gpus = time.monotonic() + gpus_every
        finished = state.get("state") in FINISHED_STATES
        if not keep_going or (finished and not job_alive(state)):
            if keep_going:  # the last words written between the final state and now
                f.state_round()
                while f.data_round():
                    pass
            emit({"t": "end"})
            return 0
        time.sleep(interval)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="radeonlab.jobs.host.stream", description=__doc__.split("\n")[0])
    parser.add_argument("job_dir")
    parser.add_argument("--from", dest="starts", action="append", default=[], metavar="NAME=OFFSET")
    parser.add_argument("--follow", action="store_true")
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--gpus-every", type=float, default=0.0)
    args = parser.parse_args(argv)
    offsets = {} if args.starts else {name: 0 for name in DEFAULT_FILES}  # --from names the files wanted
    for item in args.starts:
        name, _, offset = item.rpartition("=")
        offsets[name] = int(offset)
    try:
        return follow(os.path.abspath(args.job_dir), offsets, args.follow, args.interval, args.gpus_every)
    except BrokenPipeError:  # the watcher went away
        return 0


if __name__ == "__main__":
    sys.exit(main())

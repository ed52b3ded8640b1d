"""A job's TensorBoard event files, fetched, and the command that shows them (`radeonlab tensorboard JOB`).

A job run with `report_to: tensorboard` (which needs `python_stack_extras: [tensorboard]` on the host) writes
event files under its logging_dir (jobs/host/events.py finds them); `fetch_events` brings them into the
local results folder with their job-folder layout (jobs/ssh/transfer.py: verified; a file that grew since
the last fetch is fetched again, so it works on a running job too). `view_command` is the TensorBoard
command line for one or several jobs' folders (`--logdir_spec job:folder,...` names each run by its job).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from radeonlab.errors import JobStateError
from radeonlab.jobs.ssh.transfer import FetchReport, Progress, fetch
from radeonlab.jobs.track.handle import JobHandle

TENSORBOARD: dict[str, Any] = {"port": 6006, "bind_all": False}


def event_listing(handle: JobHandle) -> dict[str, Any]:
    return handle.remote.tool("events", [handle.dir.root]).last_json()


def fetch_events(handle: JobHandle, local_dir: Path, progress: Progress | None = None) -> FetchReport:
    """The job's event files into local_dir (same relative layout as on the host); refused, with the
    reason, when there are none."""
    listing = event_listing(handle)
    files = listing.get("files") or []
    if not files:
        raise JobStateError(no_events_reason(handle, listing))
    local_dir.mkdir(parents=True, exist_ok=True)
    return fetch(handle.remote, handle.dir.root, local_dir, names=files, progress=progress)


def no_events_reason(handle: JobHandle, listing: dict[str, Any]) -> str:
    """Why a job has no event files, in one line with what to do."""
    report_to = listing.get("report_to")
    reporting = report_to if isinstance(report_to, list) else [report_to]
    if "tensorboard" not in reporting and "all" not in reporting:
        return (
            f"{handle.id} has no TensorBoard event files: it ran with report_to: {report_to} (set "
            "`report_to: tensorboard` in the spec; the host needs python_stack_extras: [tensorboard])"
        )
    where = listing.get("logging_dir")
    if where and not str(where).startswith(handle.dir.root):
        return f"{handle.id}: logging_dir {where} is outside the job folder; radeonlab fetches only that"
    return f"{handle.id} has no TensorBoard event files yet ({handle.state.summary()})"


def view_command(runs: Sequence[tuple[str, Path]], port: int | None = None) -> list[str]:
    """`tensorboard --logdir DIR` for one job, `--logdir_spec id:DIR,...` for several (one run name each)."""
    args = ["tensorboard"]
    if len(runs) == 1:
        args += ["--logdir", str(runs[0][1])]
    else:
        args += ["--logdir_spec", ",".join(f"{job}:{folder}" for job, folder in runs)]
    args += ["--port", str(port or TENSORBOARD["port"])]
    if TENSORBOARD["bind_all"]:
        args.append("--bind_all")
    return args


def one_liner(argv: Sequence[str]) -> str:
    return shlex.join(argv)

"""`radeonlab resume JOB`: a job whose process died (host rebooted, launcher killed) runs again as a new
attempt from its newest complete checkpoint.

The laptop only checks that nothing of the job is alive and starts the job's launcher detached with
`--resume`; the host-side supervisor (jobs/host/supervisor.py) records the dead attempt, picks the
checkpoint, trims trainer_log.jsonl to the steps it holds and runs. The launcher and its shipped code are
uploaded again first, so a job submitted by an older radeonlab resumes with the current supervisor.

Secrets: the new launcher has none in memory (the old one read and deleted env.secret), so resume writes
env.secret again with the job's `secret_names` taken from the laptop's environment; a name that is not set
there is named in a warning (the job resumes without it).

A multi-node job (found on its rank 0) resumes on every rank: each rank's checkpoints are on its own disk,
so every rank resumes from the newest checkpoint ALL of them hold (none in common: a fresh start on all),
and the ranks start without queueing, rank 0 first, as at submit; if one refuses, every rank is cancelled.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from radeonlab.jobs.apply import bundle as hostbundle
from radeonlab.jobs.apply import launch, secrets
from radeonlab.jobs.apply.submit import SUBMIT, JobSession, open_job, write_secrets
from radeonlab.jobs.fleet.hostrecord import read_host_record
from radeonlab.jobs.fleet.inventory import get_host, load_inventory
from radeonlab.jobs.host import remedies
from radeonlab.jobs.plan import nodes as multinode
from radeonlab.jobs.ssh.connection import Remote, connect
from radeonlab.jobs.track import hostjobs

from radeonlab.contract.records import JobPaths, StateRecord
from radeonlab.contract.state import JobState
from radeonlab.errors import RadeonlabError


class NotResumableError(RadeonlabError):
    """The job is alive, or it succeeded: there is nothing to resume."""


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)  # stderr: `resume --json` keeps stdout for the JSON


@dataclass
class Copy:
    """One host's copy of the job (a multi-node job has one per rank)."""

    name: str  # what messages call it: the job id, or "rank 1 on ws2"
    remote: Remote
    paths: JobPaths
    job: hostjobs.HostJobState
    venv: str


def resume(
    job_id: str,
    inventory: str | Path,
    host: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    say: Callable[[str], None] = warn,
) -> tuple[JobSession, object]:
    """Start the new attempt (on every rank of a multi-node job); returns (session, the state rank 0's
    launcher recorded).

    environ: where the job's secrets are read from again (default: the laptop's environment)."""
    with open_job(job_id, inventory, host) as session:
        first = Copy(job_id, session.remote, session.paths, session.job, session.record["venv"])
        check_resumable(first)
        names = [str(n) for n in session.job.host_job.job.get("secret_names") or []]
        values = secrets.from_environment(names, os.environ if environ is None else environ)
        missing = [n for n in names if n not in values]
        if missing:
            say(f"{job_id}: {', '.join(missing)} not set in this environment: the job resumes without it")
        peers = multinode.peer_hosts(session.job.host_job.job)
        if peers:
            started = resume_ranks(first, peers, inventory, values)
        else:
            restart(first, values)
            started = wait_new_launcher(first.remote, first.paths, first.job.state.pid)
        session.refresh()
    return session, started


def check_resumable(copy: Copy) -> None:
    state = copy.job.state  # reconciled: "running" with nothing alive is failed, process gone
    if copy.job.alive or not state.state.is_finished():
        raise NotResumableError(
            f"{copy.name} is {state.state.value} and its processes are alive: nothing to resume"
        )
    if state.state is JobState.SUCCEEDED:
        raise NotResumableError(f"{copy.name} succeeded: nothing to resume (submit it again to retrain)")


def restart(
    copy: Copy, values: Mapping[str, str], *, queue: bool = True, max_step: int | None = None
) -> None:
    """Ship the current launcher and code, write the secrets again, start the launcher with --resume."""
    copy.remote.write_text_atomic(str(copy.paths.launcher), launch.launcher_source())
    argv, stdin_text = hostbundle.install_request(copy.paths)
    copy.remote.run(argv, stdin_text=stdin_text)
    write_secrets(copy.remote, copy.paths, values)
    copy.remote.run(
        launch.start_argv(
            launch.launcher_argv(copy.paths, copy.venv, resume=True, queue=queue, resume_max_step=max_step)
        )
    )


def resume_ranks(
    first: Copy, peers: Iterable[tuple[int, str]], inventory: str | Path, values: Mapping[str, str]
) -> StateRecord:
    """Every rank from the newest checkpoint all ranks hold; rank 0's new state."""
    job_id = first.name
    targets = load_inventory(inventory)
    with contextlib.ExitStack() as stack:
        copies = [first]
        for rank, name in peers:
            remote = stack.enter_context(connect(get_host(targets, name)))
            record = read_host_record(remote, str(inventory))
            found = hostjobs.read_jobs(remote, record["jobs_dir"], [job_id])
            if not found:
                raise NotResumableError(f"{job_id}: rank {rank}'s copy is not on {name}: cannot resume")
            paths = JobPaths.for_job(record["jobs_dir"], job_id)
            copies.append(Copy(f"{job_id} (rank {rank} on {name})", remote, paths, found[0], record["venv"]))
        for copy in copies[1:]:
            if copy.job.alive:  # a peer that finished its part is fine; a live one is not
                raise NotResumableError(f"{copy.name} is still running: cancel the job first")
        step = common_checkpoint_step(
            c.remote.run(remedies.listing_argv(str(c.paths.output)), check=False).stdout.splitlines()
            for c in copies
        )
        for copy in copies:  # rank 0 first: its torchrun serves the rendezvous store
            restart(copy, values, queue=False, max_step=step)
        states = [wait_new_launcher(c.remote, c.paths, c.job.state.pid) for c in copies]
        refused = [(c.name, s) for c, s in zip(copies, states, strict=True) if s.state.is_finished()]
        if refused:
            for copy in copies:
                copy.remote.run(launch.cancel_argv(copy.paths), check=False)  # a lone rank would wait
            why = "; ".join(f"{name}: {s.state.value} ({s.reason})" for name, s in refused)
            raise RadeonlabError(f"{job_id}: a rank did not start, every rank cancelled: {why}")
    return states[0]


def common_checkpoint_step(listings: Iterable[Iterable[str]]) -> int:
    """The newest step of which every node holds a complete checkpoint; 0 when they share none."""
    held = [{c.step for c in remedies.checkpoints(listing) if c.complete} for listing in listings]
    return max(set.intersection(*held), default=0) if held else 0


def wait_new_launcher(remote: Remote, paths: JobPaths, old_pid: int | None) -> StateRecord:
    """Poll state.json until the new launcher wrote it (queued in line, or running); the old record until."""
    deadline = time.monotonic() + SUBMIT["start_wait_s"]
    state = StateRecord(JobState.QUEUED)
    while time.monotonic() < deadline:
        result = remote.run(launch.status_argv(paths), check=False)
        if result.ok and result.stdout.strip():
            state, _alive = launch.parse_state_output(result.stdout)
            if state.pid is not None and state.pid != old_pid:
                return state
        time.sleep(SUBMIT["start_poll_s"])
    return state

"""`radeonlab resume JOB`: a job whose process died (host rebooted, launcher killed) or that failed runs
again, as a new attempt from its newest complete checkpoint.

The laptop checks that nothing of the job is alive, ships the current host code into the job folder (so a
job submitted by an older radeonlab resumes with the current supervisor), writes env.secret again (the new
launcher has none in memory: the names come from job.json `secret_names`, the values from the laptop's
environment; a name not set there is named in a warning) and starts the launcher with `--resume`, all in one
stage round trip per rank. The host-side supervisor records the dead attempt, picks the checkpoint, trims
trainer_log.jsonl to the steps it holds and runs.

A multi-node job resumes on every rank: each rank's checkpoints are on its own disk, so every rank resumes
from the newest checkpoint ALL of them hold (none in common: a fresh start on all), started without
queueing, rank 0 first; if one refuses, every rank is cancelled.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping

from radeonlab.contract.messages import LaunchOptions, StageAnswer, StageRequest
from radeonlab.contract.parts import JsonValue
from radeonlab.contract.records import HostRecord, StateRecord
from radeonlab.contract.state import JobState
from radeonlab.errors import JobStateError, RadeonlabError
from radeonlab.jobs.apply import secrets
from radeonlab.jobs.fleet.probe import read_host, require_record
from radeonlab.jobs.host import remedies
from radeonlab.jobs.ssh import hostcode
from radeonlab.jobs.ssh.connection import SETTINGS as SSH_SETTINGS
from radeonlab.jobs.ssh.connection import Remote, connect
from radeonlab.jobs.track.handle import JobHandle

Say = Callable[[str], None]


def check_resumable(name: str, state: StateRecord, alive: bool | None) -> None:
    if alive or not state.state.is_finished():
        raise JobStateError(f"{name} is {state.state.value} and its processes are alive: nothing to resume")
    if state.state is JobState.SUCCEEDED:
        raise JobStateError(f"{name} succeeded: nothing to resume (submit it again to retrain)")


def common_checkpoint_step(listings: Iterable[Iterable[str]]) -> int:
    """The newest step of which every node holds a complete checkpoint; 0 when they share none."""
    held = [{c.step for c in remedies.checkpoints(listing) if c.complete} for listing in listings]
    return max(set.intersection(*held), default=0) if held else 0


def restart_request(
    handle: JobHandle, record: HostRecord, values: Mapping[str, str], *, queue: bool, max_step: int | None
) -> StageRequest:
    files: dict[str, JsonValue] = dict(hostcode.file_digests())
    return StageRequest(
        record.job_dir(handle.id).root,
        code=f"{SSH_SETTINGS['code_dir']}/{hostcode.digest()}",
        job_update={"code": {"digest": hostcode.digest(), "files": files}},
        secret=dict(values) or None,
        launch=LaunchOptions(record.venv, queue=queue, resume=True, resume_max_step=max_step),
    )


def restart(remote: Remote, request: StageRequest) -> StateRecord:
    return StageAnswer.from_dict(remote.tool("stage", stdin_text=request.to_json()).last_json()).state


def resume(handle: JobHandle, *, environ: Mapping[str, str] | None = None, say: Say = print) -> StateRecord:
    """Start the new attempt (on every rank of a multi-node job); the state rank 0's launcher recorded."""
    check_resumable(handle.id, handle.state, handle.alive)
    names = list(handle.job.secret_names)
    values = secrets.from_environment(names, os.environ if environ is None else environ)
    if secrets.NOTIFY_ENV in names and secrets.NOTIFY_ENV not in values:
        # the URLs came from the inventory, not the laptop's environment: take them from there again
        values.update(secrets.notify_secret(None, handle.target.data))
    missing = [n for n in names if n not in values]
    if missing:
        say(
            f"warning: {handle.id}: {', '.join(missing)} not set in this environment: "
            "the job resumes without it"
        )
    if not handle.job.peers():
        state = restart(
            handle.remote, restart_request(handle, handle.record, values, queue=True, max_step=None)
        )
        handle.refresh()
        return state
    return resume_ranks(handle, values)


def resume_ranks(handle: JobHandle, values: Mapping[str, str]) -> StateRecord:
    """Every rank from the newest checkpoint all ranks hold; rank 0's new state."""
    copies: list[tuple[str, Remote, HostRecord]] = [(handle.target.name, handle.remote, handle.record)]
    opened: list[Remote] = []
    try:
        for rank, target in handle.peers():
            remote = connect(target)
            opened.append(remote)
            view = read_host(remote, jobs="full", ids=[handle.id])
            found = [j for j in view.jobs if j.id == handle.id]
            if not found:
                raise JobStateError(f"{handle.id}: rank {rank}'s copy is not on {target.name}: cannot resume")
            if found[0].alive:
                raise JobStateError(
                    f"{handle.id} (rank {rank} on {target.name}) is still running: cancel it first"
                )
            copies.append((target.name, remote, require_record(view, handle.inventory)))
        listings = [
            remote.tool("housekeeping", ["checkpoints", record.job_dir(handle.id).root]).last_json()[
                "listing"
            ]
            for _, remote, record in copies
        ]
        step = common_checkpoint_step(listings)
        states = [
            restart(remote, restart_request(handle, record, values, queue=False, max_step=step))
            for _, remote, record in copies
        ]
        refused = [(name, s) for (name, _, _), s in zip(copies, states, strict=True) if s.state.is_finished()]
        if refused:
            for _, remote, record in copies:  # a lone rank would wait for its peer
                remote.tool("launcher", ["cancel", record.job_dir(handle.id).root], check=False)
            why = "; ".join(f"{name}: {s.summary()}" for name, s in refused)
            raise RadeonlabError(f"{handle.id}: a rank did not start, every rank cancelled: {why}")
    finally:
        for remote in opened:
            remote.close()
    handle.refresh()
    return states[0]

"""A Slurm job as the verbs see it: where Slurm runs it, its state while the hosts cannot say, its cancel.

A job submitted through Slurm (jobs/apply/slurm.py) has a folder on every candidate node; the node Slurm
gave it (rank 0's, for a multi-node job) holds the truth once the launcher started (state.json, logs,
checkpoints), as for any job. Before
that, and for a job cancelled while pending, only Slurm knows: `squeue` (queued, running and, for MinJobAge
seconds, ended jobs) and the controller's job completion log (every ended job). The batch job's name is
radeonlab's job id, so a job is found by name as well as by the Slurm id its record keeps.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from radeonlab.contract.jobdir import FILES
from radeonlab.contract.parts import SlurmInfo
from radeonlab.contract.records import StateRecord
from radeonlab.contract.state import JobState
from radeonlab.errors import RadeonlabError, one_line
from radeonlab.jobs.apply.slurm import SlurmLab, lab_of
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.fleet.probe import read_host, require_record
from radeonlab.jobs.plan import slurm
from radeonlab.jobs.ssh.connection import Remote, connect


def slurm_jobs(lab: SlurmLab) -> dict[str, slurm.SlurmJob]:
    """radeonlab job id (the batch job's name) -> what Slurm says of it: squeue over the completion log."""
    with connect(lab.controller) as ctl:
        return read_slurm_jobs(ctl, lab.jobcomp_log)


def read_slurm_jobs(ctl: Remote, jobcomp_log: str) -> dict[str, slurm.SlurmJob]:
    ended = ctl.run(["cat", jobcomp_log], check=False, timeout=30) if jobcomp_log else None
    queue = ctl.run(["squeue", "-h", "-t", "all", "-o", slurm.SQUEUE_FORMAT], timeout=30).stdout
    jobs: dict[str, slurm.SlurmJob] = {}
    for job in slurm.parse_jobcomp_log(ended.stdout if ended and ended.ok else ""):
        jobs[job.name] = job
    for job in slurm.parse_squeue(queue):
        jobs[job.name] = job
    return jobs


def overlay(state: StateRecord, found: slurm.SlurmJob | None) -> StateRecord:
    """The state to show for a Slurm job whose folder (on the node read) says `state`. A folder that has
    not started (queued) shows what Slurm says: pending with Slurm's reason, or ended without running there
    (cancelled while pending). A folder that started is the truth."""
    if state.state is not JobState.QUEUED or found is None:
        return state
    said = found.radeonlab_state
    if said is JobState.QUEUED:
        why = f"Slurm job {found.job_id} pending" + (f" ({found.reason})" if found.reason else "")
        return StateRecord.from_dict({**state.to_dict(), "reason": why})
    if said is JobState.RUNNING:
        where = ",".join(found.nodes)
        why = f"Slurm job {found.job_id} starting on {where}"
        return StateRecord.from_dict({**state.to_dict(), "reason": why})
    data = {**state.to_dict(), "state": said.value, "reason": f"Slurm job {found.job_id}: {found.state}"}
    return StateRecord.from_dict(data)


def ran_on(lab: SlurmLab, found: slurm.SlurmJob | None) -> str | None:
    """The inventory host of the allocation's first node (None while pending): the node of a one-node job,
    rank 0 of a multi-node one (the batch script makes the first node rank 0; its folder holds the adapter,
    and the other ranks' folders say rank > 0, so `list` and the job handle pass over them)."""
    return lab.host_of(found.nodes[0]) if found and found.nodes else None


@dataclass
class Cancelled:
    host: str
    state: StateRecord | None = None
    error: str = ""


def cancel(
    job_id: str, info: SlurmInfo, targets: Mapping[str, HostTarget], lab: SlurmLab
) -> tuple[str, list[Cancelled]]:
    """Cancel a Slurm job, pending or running, on every rank: (1) the cancel marker in the job folder on
    every candidate node (a launcher that starts or is stopped from now on ends as cancelled), (2) `scancel`
    (a pending job leaves the queue; Slurm stops every rank of a running one, each supervisor records the
    cancel, and Slurm records CANCELLED, not the launchers' non-zero exit as FAILED), (3) the launcher's
    cancel on every candidate (stops what is left and makes sure each folder records the end).
    Returns scancel's word and one result per candidate."""
    candidates = list(info.candidates)
    opened: dict[str, tuple[Remote, str]] = {}
    errors: dict[str, str] = {}

    def mark(host: str) -> None:
        try:
            remote = connect(targets[host])
            root = require_record(read_host(remote, jobs="none"), "").job_dir(job_id).root
            opened[host] = (remote, root)
            remote.run(["touch", f"{root}/{FILES['cancel_marker']}"], timeout=30)
        except (RadeonlabError, KeyError) as exc:
            errors[host] = one_line(exc) if isinstance(exc, RadeonlabError) else f"{exc}"

    def stop(host: str) -> Cancelled:
        if host not in opened:
            return Cancelled(host, error=errors.get(host, "not reached"))
        remote, root = opened[host]
        try:
            done = remote.tool("launcher", ["cancel", root])
            return Cancelled(host, StateRecord.from_dict(done.last_json()))
        except RadeonlabError as exc:
            return Cancelled(host, error=one_line(exc))

    try:
        with ThreadPoolExecutor(max_workers=max(1, len(candidates))) as pool:
            list(pool.map(mark, candidates))
            slurm_id = info.job_id or ""
            which = [slurm_id] if slurm_id else ["--name", job_id]
            with connect(lab.controller) as ctl:
                done = ctl.run(["scancel", *which], check=False, timeout=30)
            results = list(pool.map(stop, candidates))
    finally:
        for remote, _root in opened.values():
            remote.close()
    word = "scancel " + shlex.join(which) + (": ok" if done.ok else f": {done.stderr_tail()}")
    return word, results


def lab_for(targets: Mapping[str, HostTarget], info: SlurmInfo) -> SlurmLab | None:
    """The lab a job's record names (its controller), as the inventory describes it now."""
    lab = lab_of(targets)
    if lab is None or lab.controller.name != info.controller:
        return None
    return lab


def fold(rows: Sequence[dict], jobs: Mapping[str, slurm.SlurmJob] | None) -> list[dict]:
    """`list`'s rows with each Slurm job once: the row of the node that started it (or the first
    candidate's while nothing started), its state overlaid with Slurm's (`overlay`)."""
    out: list[dict] = []
    by_id: dict[str, list[dict]] = {}
    for row in rows:
        if row.get("slurm"):
            by_id.setdefault(row["id"], []).append(row)
        else:
            out.append(row)
    for job_id, copies in by_id.items():
        started = [r for r in copies if r["state"] != JobState.QUEUED.value]
        row = dict((started or copies)[0])
        found = (jobs or {}).get(job_id)
        row["slurm"] = found.job_id if found else row["slurm"]
        if not started and found is not None:
            state = overlay(StateRecord.from_dict({"state": row["state"], "reason": row["reason"]}), found)
            row.update(state=state.state.value, reason=state.reason)
        out.append(row)
    return out

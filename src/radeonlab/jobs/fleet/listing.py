"""Listing jobs: one service for `radeonlab list` and the dashboard.

Both read the same thing from a host: its probe's job summaries (jobs/host/probe.py `--jobs full`). `jobs_of`
turns one host's summaries into typed jobs (rank 0 of a multi-node job only, its state reconciled with
whether its launcher is alive); `list_rows` is `list`'s table: every host probed in parallel, the local cache
refreshed from the hosts (the hosts are the truth) and read instead for a host that does not answer, Slurm's
jobs folded to one row each, filtered by state and newest first.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from radeonlab.contract.messages import JobProgress, ProbeJob
from radeonlab.contract.records import JobRecord, StateRecord
from radeonlab.contract.state import JobState
from radeonlab.jobs.fleet import store
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.fleet.probe import HostView, probe_hosts
from radeonlab.jobs.scheduler.choose import fold_rows, scheduler_of

# what a row read from the host has that the local cache does not keep
NOT_CACHED: dict[str, Any] = {
    "step": None, "total_steps": None, "loss": None, "duration_s": None, "overrides": {},
}  # fmt: skip


@dataclass(frozen=True)
class ListedJob:
    """One job as a host's probe shows it."""

    host: str
    job: JobRecord
    state: StateRecord  # reconciled: a live state whose launcher is gone reads as ended
    alive: bool
    probe: ProbeJob  # the probe's summary (progress, duration_s, ...)


def jobs_of(view: HostView) -> list[ListedJob]:
    """The jobs of one reachable host's probe; a multi-node job once, on its rank 0."""
    listed = []
    for item in view.jobs:
        if item.rank != 0 or item.job is None:  # a rank's copy; a summary without its record (not `full`)
            continue
        listed.append(ListedJob(view.name, item.job, item.reconciled(), item.alive, item))
    return listed


def row(listed: ListedJob) -> dict[str, Any]:
    """One `list` row: the job, its state, its latest logged step and loss, how long it has run, and its
    overrides (a sweep's values tell its jobs apart)."""
    job, state = listed.job, listed.state
    progress = listed.probe.progress or JobProgress()
    return {
        "id": job.id,
        "host": listed.host,
        "name": job.name,
        "state": state.state.value,
        "created_at": job.created_at,
        "attempts": len(job.attempts),
        "reason": state.reason,
        "end_reason": state.end,
        "step": progress.step,
        "total_steps": progress.total_steps,
        "loss": progress.loss,
        "duration_s": listed.probe.duration_s,
        "overrides": dict(job.overrides),
        "runtime": job.runtime or None,  # where the launcher ran it: "venv", or "container" in this image
        "image_digest": job.image_digest or None,
        "source": "host",
        # its scheduler's word (a Slurm job: its controller here, its Slurm id once `fold_rows` asked Slurm)
        "slurm": scheduler_of(job).job_word(job),
    }


def list_rows(
    inventory_hosts: Mapping[str, HostTarget],
    targets: Sequence[HostTarget],
    timeout: float,
    states: Sequence[JobState] = (),
    warn: Callable[[str], None] = print,
) -> tuple[list[dict[str, Any]], list[HostView]]:
    """`list`'s rows over `targets` (only `states`, when given), newest first, and each host's view."""
    views = probe_hosts(targets, timeout, jobs="full")
    rows = []
    with contextlib.closing(store.connect()) as conn:
        for view in views:
            if not view.reachable:
                for cached in store.list_jobs(conn, host=view.name):  # no step, loss or overrides there
                    fields = {**cached.__dict__, "attempts": len(cached.attempts), "source": "cached"}
                    rows.append({**NOT_CACHED, **fields})
                continue
            listed = jobs_of(view)
            found = [
                store.HostJob(
                    view.name,
                    f"{view.record.jobs_dir if view.record else ''}/{j.job.id}",
                    j.job.to_dict(),
                    j.state.to_dict(),
                )
                for j in listed
            ]
            rows += [row(j) for j in listed]
            store.rebuild(conn, found, hosts=[view.name])
    rows = fold_rows(rows, inventory_hosts, warn)  # one row per Slurm job, with Slurm's word while it waits
    wanted = {s.value for s in states}
    rows = [r for r in rows if not wanted or r["state"] in wanted]
    rows.sort(key=lambda r: (r["created_at"] or "", r["id"]), reverse=True)
    return rows, views

"""`radeonlab list`: the jobs on the inventory's hosts, read in parallel from their job folders."""

from __future__ import annotations

import contextlib
from typing import Any

import click

from radeonlab.cli.options import (
    echo_json,
    inventory_option,
    inventory_path,
    json_option,
    limit_option,
    limit_value,
)
from radeonlab.contract.state import JobState

STATES = [s.value for s in JobState]


@click.command("list")
@inventory_option
@limit_option
@click.option(
    "--state",
    "states",
    default=None,
    metavar="STATES",
    help=f"only jobs in these states, comma-separated ({', '.join(STATES)})",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="seconds a host may take before its rows come from the local cache",
)
@json_option
def command(
    inventory: str | None, limit: str | None, states: str | None, timeout: float, as_json: bool
) -> None:
    """List jobs across the hosts (the hosts are the truth; the local cache is refreshed from them). A host
    that does not answer in time is shown from the cache, its rows marked "cached". A multi-node job is one
    row, on its rank 0. Exit 1 when a host could not be read."""
    from radeonlab.cli.views import jobs_table
    from radeonlab.contract.records import JobRecord, StateRecord
    from radeonlab.errors import InputError
    from radeonlab.jobs.fleet import store
    from radeonlab.jobs.fleet.inventory import load_inventory, select_hosts
    from radeonlab.jobs.fleet.probe import probe_hosts

    wanted = [s.strip() for s in (states or "").split(",") if s.strip()]
    unknown = [s for s in wanted if s not in STATES]
    if unknown:
        raise InputError(f"--state {','.join(unknown)}: not a job state ({', '.join(STATES)})")
    inventory_hosts = load_inventory(inventory_path(inventory))
    targets = select_hosts(inventory_hosts, limit_value(limit))
    views = probe_hosts(targets, timeout, jobs="full")
    rows = []
    with contextlib.closing(store.connect()) as conn:
        for view in views:
            if not view.reachable:
                for row in store.list_jobs(conn, host=view.name):  # no step, loss or overrides in the cache
                    cached = {**row.__dict__, "attempts": len(row.attempts), "source": "cached"}
                    rows.append({**NOT_CACHED, **cached})
                continue
            found = []
            for item in view.jobs:
                if item["rank"] != 0:
                    continue
                state = StateRecord.from_dict(item["state"]).reconciled(item["alive"])
                job = JobRecord.from_dict(item["job"])
                found.append(
                    store.HostJob(
                        view.name,
                        f"{view.record.jobs_dir if view.record else ''}/{job.id}",
                        job.to_dict(),
                        state.to_dict(),
                    )
                )
                rows.append(host_row(view.name, item, job, state))
            store.rebuild(conn, found, hosts=[view.name])
    if any(r.get("slurm") for r in rows):  # one row per Slurm job, with Slurm's word while it waits
        rows = fold_slurm(rows, inventory_hosts)
    rows = [r for r in rows if not wanted or r["state"] in wanted]
    rows.sort(key=lambda r: (r["created_at"] or "", r["id"]), reverse=True)
    if as_json:
        echo_json(rows)
    else:
        from rich.console import Console

        Console(width=max(Console().width, 140)).print(jobs_table(rows))
        for view in views:
            if not view.reachable:
                click.echo(
                    f"{view.name}: unreachable ({view.error}); its rows are from the local cache", err=True
                )
    raise SystemExit(0 if all(v.reachable for v in views) else 1)


# what a row read from the host has that the local cache does not keep
NOT_CACHED: dict = {"step": None, "total_steps": None, "loss": None, "duration_s": None, "overrides": {}}


def host_row(host: str, item: dict, job: Any, state: Any) -> dict:  # (JobRecord, StateRecord)
    """One `list` row from a host's probe (a `full` job summary, jobs/host/probe.py): the job, its state, its
    latest logged step and loss, how long it has run, and its overrides (a sweep's values tell its jobs
    apart)."""
    progress = item.get("progress") or {}
    return {
        "id": job.id,
        "host": host,
        "name": job.name,
        "state": state.state.value,
        "created_at": job.created_at,
        "attempts": len(job.attempts),
        "reason": state.reason,
        "end_reason": state.end,
        "step": progress.get("step"),
        "total_steps": progress.get("total_steps"),
        "loss": progress.get("loss"),
        "duration_s": item.get("duration_s"),
        "overrides": dict(job.overrides),
        "source": "host",
        # a Slurm job: its controller here, its Slurm id once `fold_slurm` asked Slurm
        "slurm": str(job.slurm.get("job_id") or job.slurm.get("controller") or ""),
    }


def fold_slurm(rows: list[dict], targets: dict) -> list[dict]:
    from radeonlab.errors import RadeonlabError, one_line
    from radeonlab.jobs.apply.slurm import lab_of
    from radeonlab.jobs.track.slurm import fold, slurm_jobs

    try:
        lab = lab_of(targets)
        jobs = slurm_jobs(lab) if lab else None
    except RadeonlabError as exc:  # the hosts' rows still show; Slurm's word is missing
        from radeonlab.cli.options import say

        say(f"radeonlab: warning: Slurm not asked: {one_line(exc)}")
        jobs = None
    return fold(rows, jobs)

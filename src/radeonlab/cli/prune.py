"""`radeonlab prune --older-than 30d`: finished job folders, then the stored contents no job uses."""

from __future__ import annotations

import re

import click

from radeonlab.cli.options import (
    echo_json,
    inventory_option,
    inventory_path,
    json_option,
    limit_option,
    limit_value,
)

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def seconds(text: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smhdw])", text.strip())
    if not m:
        raise click.BadParameter(f"{text!r}: a duration like 30d, 12h, 90m")
    return float(m[1]) * UNITS[m[2]]


def age_text(seconds: float) -> str:
    """The largest whole unit: 45d, 12h, 1h (for 90 minutes), 40s."""
    for unit in "dhm":
        if seconds >= UNITS[unit]:
            return f"{int(seconds // UNITS[unit])}{unit}"
    return f"{int(seconds)}s"


def job_details(job: dict) -> str:
    """'ended 45d ago, 1.2 MB' from what the host reported (either may be missing)."""
    from radeonlab.jobs.ssh.transfer import human_bytes

    parts = [f"ended {age_text(job['age_s'])} ago"] if job.get("age_s") is not None else []
    parts += [human_bytes(job["bytes"])] if job.get("bytes") is not None else []
    return ", ".join(parts)


@click.command("prune")
@inventory_option
@limit_option
@click.option(
    "--older-than", "older", required=True, metavar="AGE", help="e.g. 30d, 12h: jobs that ended before"
)
@click.option("--dry-run", is_flag=True, help="say what would be removed, remove nothing")
@json_option
def command(inventory: str | None, limit: str | None, older: str, dry_run: bool, as_json: bool) -> None:
    """On every host (in parallel): remove the folders of jobs that ended more than AGE ago (queued, running
    or alive jobs are never touched), then the uploaded contents (datasets, models) no remaining job uses,
    and partial uploads older than AGE. Exit 1 when a host could not be reached."""
    import contextlib

    from radeonlab.jobs.fleet import store
    from radeonlab.jobs.fleet.inventory import load_inventory, select_hosts
    from radeonlab.jobs.fleet.probe import read_host, require_record
    from radeonlab.jobs.ssh.group import each_host

    age = seconds(older)
    inv = inventory_path(inventory)
    targets = select_hosts(load_inventory(inv), limit_value(limit))

    def prune_on(remote):  # Remote -> dict
        record = require_record(read_host(remote, jobs="none"), inv)
        args = ["prune", record.jobs_dir, "--older-than", str(age), *(["--dry-run"] if dry_run else [])]
        return remote.tool("housekeeping", args).last_json()

    results = each_host(targets, prune_on, 60.0)
    if not dry_run:
        with contextlib.closing(store.connect()) as conn:
            for r in results:
                for job_id in (r.value or {}).get("removed") or []:
                    store.delete(conn, job_id)
    if as_json:
        echo_json([{"host": r.host, "error": r.error, **(r.value or {})} for r in results])
    else:
        verb = "would remove" if dry_run else "removed"
        for r in results:
            if r.error:
                click.echo(f"{r.host}: {r.error}")
                continue
            v = r.value or {}
            # which jobs, how old, how big: a dry run is for deciding, a real one for the record (a host's
            # older housekeeping tool answers ids only)
            jobs = v.get("jobs") or [{"id": i} for i in v.get("removed") or []]
            click.echo(
                f"{r.host}: {verb} {len(jobs)} job folder(s) and {v.get('blobs', 0)} stored file(s), "
                f"{v.get('bytes', 0):,} bytes"
            )
            for job in jobs:
                click.echo(f"  {job['id']}  {job_details(job)}".rstrip())
    raise SystemExit(0 if all(r.ok for r in results) else 1)

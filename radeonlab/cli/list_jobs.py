"""`radeonlab list`: the jobs on every host of the inventory, read from the hosts' job folders."""

from __future__ import annotations

import contextlib

import click

from radeonlab.cli.options import echo_json, host_option, inventory_option, json_option, say


@click.command("list")
@inventory_option
@host_option
@json_option
def command(inventory: str, host: str | None, as_json: bool) -> None:
    """List jobs across the inventory's hosts (the hosts are the truth; the local cache is refreshed)."""
    from radeonlab.errors import RadeonlabError
    from radeonlab.jobs.fleet import store
    from radeonlab.jobs.fleet.hostrecord import read_host_record
    from radeonlab.jobs.fleet.inventory import load_inventory, select_hosts
    from radeonlab.jobs.plan.nodes import is_rank_zero
    from radeonlab.jobs.ssh.connection import TransportError, connect
    from radeonlab.jobs.track import hostjobs

    errors = []
    rows = []
    for target in select_hosts(load_inventory(inventory), host):
        try:
            with connect(target) as remote:
                record = read_host_record(remote, inventory)
                found = hostjobs.read_jobs(remote, record["jobs_dir"])
        except (TransportError, RadeonlabError) as exc:
            errors.append(f"{target.name}: {exc}")
            say(f"skipped {target.name}: {exc}")
            continue
        # a multi-node job is listed once, from its rank 0 (where status/watch/fetch go)
        found = [j for j in found if is_rank_zero(j.host_job.job)]
        with contextlib.closing(store.connect()) as conn:
            store.rebuild(conn, [j.host_job for j in found], hosts=[target.name])
            rows += store.list_jobs(conn, host=target.name)
    rows.sort(key=lambda r: (r.created_at, r.id), reverse=True)
    if as_json:
        echo_json([r.__dict__ for r in rows])
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table("JOB", "HOST", "STATE", "CREATED", "REASON", box=None)
        for r in rows:
            table.add_row(r.id, r.host, r.state, r.created_at, r.reason or "")
        Console(width=160).print(table) if rows else click.echo("no jobs")
    if errors and not rows:
        raise SystemExit(1)

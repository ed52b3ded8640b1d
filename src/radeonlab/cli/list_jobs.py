"""`radeonlab list`: the jobs on the inventory's hosts, read in parallel from their job folders
(jobs/fleet/listing.py, which the dashboard shares)."""

from __future__ import annotations

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
    from radeonlab.cli.options import say
    from radeonlab.cli.views import jobs_table
    from radeonlab.errors import InputError
    from radeonlab.jobs.fleet.inventory import load_inventory, select_hosts
    from radeonlab.jobs.fleet.listing import list_rows

    wanted = [s.strip() for s in (states or "").split(",") if s.strip()]
    unknown = [s for s in wanted if s not in STATES]
    if unknown:
        raise InputError(f"--state {','.join(unknown)}: not a job state ({', '.join(STATES)})")
    inventory_hosts = load_inventory(inventory_path(inventory))
    targets = select_hosts(inventory_hosts, limit_value(limit))
    rows, views = list_rows(inventory_hosts, targets, timeout, [JobState(s) for s in wanted], warn=say)
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

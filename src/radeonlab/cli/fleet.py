"""`radeonlab fleet`: every workstation at a glance (reachable, GPUs, VRAM, temperature, busy %, power, ROCm,
torch, provisioned, running and queued jobs)."""

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
from radeonlab.jobs.fleet.probe import FLEET_DEFAULTS


@click.command("fleet")
@inventory_option
@limit_option
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=FLEET_DEFAULTS["timeout_s"],
    show_default=True,
    help="seconds a host may take to answer before it is shown as unreachable",
)
@json_option
def command(inventory: str | None, limit: str | None, timeout: float, as_json: bool) -> None:
    """Every workstation at a glance, gathered in parallel (one SSH round trip per host).

    Exit status: 0 every host answered; 1 at least one host is unreachable; 2 bad inventory or --limit."""
    from rich.console import Console

    from radeonlab.cli.views import fleet_table
    from radeonlab.jobs.fleet.inventory import load_inventory, select_hosts
    from radeonlab.jobs.fleet.probe import probe_hosts
    from radeonlab.jobs.scheduler.choose import describe_hosts

    everything = load_inventory(inventory_path(inventory))
    views = probe_hosts(select_hosts(everything, limit_value(limit)), timeout)
    describe_hosts(everything, views)  # what each scheduler says of them, from the whole inventory
    if as_json:
        echo_json([v.to_dict() for v in views])
    else:
        Console(width=max(Console().width, 160)).print(fleet_table(views))
    raise SystemExit(0 if all(v.reachable for v in views) else 1)

"""`radeonlab fleet`: one table for every workstation (reachable, GPUs, VRAM, temperature, power, ROCm,
torch, provisioned, running job, queue). Exit 0 when every host answered, 1 when any is unreachable,
2 for a bad inventory or --limit."""

from __future__ import annotations

import json

import click
from rich import box
from rich.console import Console
from rich.table import Table

from radeonlab.cli.options import inventory_option
from radeonlab.jobs.fleet.inventory import InventoryError, load_inventory, select_hosts
from radeonlab.jobs.fleet.probe import FLEET_DEFAULTS, HostStatus, exit_code, gather

GIB = 1024**3


def _gib(value: int | None) -> str:
    return "?" if value is None else f"{value / GIB:.1f}"


def _row(s: HostStatus) -> list[str]:
    if not s.reachable:
        return [s.host, f"[red]no: {s.error}[/red]", *["-"] * 9]
    gpus = "\n".join(f"{g.name or '?'} ({g.gfx or '?'})" for g in s.gpus) or "-"
    vram = "\n".join(f"{_gib(g.vram_used)}/{_gib(g.vram_total)} GiB" for g in s.gpus) or "-"
    temp = "\n".join("?" if g.temp_c is None else f"{g.temp_c:.0f} °C" for g in s.gpus) or "-"
    power = "\n".join("?" if g.power_w is None else f"{g.power_w:.0f} W" for g in s.gpus) or "-"
    provisioned = "yes" if s.provisioned else f"[yellow]no: {s.provisioned_note}[/yellow]"
    running = "\n".join(s.running + [f"{j} (stale: process gone)" for j in s.stale]) or "-"
    reachable = "yes" if not s.error else f"yes ({s.error})"
    queued = "-" if s.queued is None else str(s.queued)
    return [
        s.host,
        reachable,
        gpus,
        vram,
        temp,
        power,
        s.rocm or "-",
        s.torch or "-",
        provisioned,
        running,
        queued,
    ]


COLUMNS = ("host", "reachable", "GPU(s)", "VRAM used/total", "temp", "power", "ROCm", "torch", "provisioned",
           "running job", "queued")  # fmt: skip


@click.command("fleet")
@inventory_option
@click.option("--limit", default=None, help="hosts, groups or glob patterns, comma-separated (as pyinfra)")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=FLEET_DEFAULTS["timeout_s"],
    show_default=True,
    help="seconds a host may take to answer before it is shown as unreachable",
)
@click.option("--json", "as_json", is_flag=True, help="print a JSON list of one object per host")
def command(inventory: str, limit: str | None, timeout: float, as_json: bool) -> None:
    """Every workstation at a glance, gathered in parallel (one SSH round trip per host).

    Exit status: 0 every host answered; 1 at least one host is unreachable; 2 bad inventory or --limit.
    """
    try:
        targets = select_hosts(load_inventory(inventory), limit)
    except InventoryError as exc:
        click.echo(f"radeonlab fleet: {exc}", err=True)
        raise SystemExit(2) from None
    statuses = gather(targets, timeout)
    if as_json:
        click.echo(json.dumps([s.to_dict() for s in statuses], indent=1))
    else:
        table = Table(box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False)
        for column in COLUMNS:
            table.add_column(column, overflow="fold")
        for s in statuses:
            table.add_row(*_row(s))
        Console(width=max(Console().width, 160)).print(table)
    raise SystemExit(exit_code(statuses))

"""`radeonlab dashboard`: a web page for the whole lab (fleet, jobs, live charts), served from this laptop."""

from __future__ import annotations

import click

from radeonlab.cli.options import inventory_option, inventory_path, limit_option, limit_value, say
from radeonlab.dashboard import DASHBOARD


@click.command("dashboard")
@click.option("--port", type=click.IntRange(0, 65535), default=DASHBOARD["port"], show_default=True,
              help="TCP port (0: any free one)")  # fmt: skip
@click.option("--bind", default=DASHBOARD["bind"], show_default=True,
              help="address to listen on; anything but loopback shows your lab to that network")  # fmt: skip
@click.option("--allow-cancel", is_flag=True, help="add cancel buttons (guarded against cross-site requests)")
@inventory_option
@limit_option
def command(port: int, bind: str, allow_cancel: bool, inventory: str | None, limit: str | None) -> None:
    """Serve one page for the lab: every host (reachable, GPUs, VRAM, temperature, busy %, running and queued
    jobs), every job (state, host, age, last loss) and, per job, a live chart of loss, learning rate and
    tokens/s (saved as PNG or SVG), its GPU readings, remedy attempts and log tail. It updates itself
    (server-sent events) over one SSH connection per host, shared by every browser tab. Read-only unless
    --allow-cancel. Ctrl-C stops it; the jobs keep running."""
    from radeonlab.dashboard import serve
    from radeonlab.jobs.fleet.inventory import load_inventory, select_hosts

    inv = inventory_path(inventory)
    targets = load_inventory(inv)
    selected = select_hosts(targets, limit_value(limit))
    if bind not in ("127.0.0.1", "::1", "localhost"):
        say(f"warning: listening on {bind}: anyone who reaches it sees the lab (there is no login)")
    serve(inv, targets, selected, port=port, bind=bind, allow_cancel=allow_cancel, say=click.echo)

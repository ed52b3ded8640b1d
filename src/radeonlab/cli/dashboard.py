"""`radeonlab dashboard`: a web page for the whole lab (fleet, jobs, live charts), served from this laptop."""

from __future__ import annotations

import os

import click

from radeonlab.cli.options import inventory_option, inventory_path, limit_option, limit_value, say
from radeonlab.dashboard import DASHBOARD, LOOPBACK_BINDS, PASSWORD_VARIABLE
from radeonlab.errors import InputError


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
    --allow-cancel. Ctrl-C stops it; the jobs keep running.

    It answers only to its own names (127.0.0.1, localhost, [::1], the --bind address), so a page of another
    site cannot read it through a rebound name. Listening beyond loopback with --allow-cancel needs a password
    in RADEONLAB_DASHBOARD_PASSWORD (every request then asks for it: HTTP Basic, any user name)."""
    from radeonlab.dashboard import serve
    from radeonlab.jobs.fleet.inventory import load_inventory, select_hosts

    password = os.environ.get(PASSWORD_VARIABLE) or None
    if allow_cancel and bind not in LOOPBACK_BINDS and not password:
        raise InputError(
            f"--allow-cancel on {bind} lets anyone who reaches it cancel jobs: set {PASSWORD_VARIABLE} "
            "(every request then needs it), or bind 127.0.0.1"
        )
    inv = inventory_path(inventory)
    targets = load_inventory(inv)
    selected = select_hosts(targets, limit_value(limit))
    if bind not in LOOPBACK_BINDS and not password:
        say(f"warning: listening on {bind}: anyone who reaches it sees the lab (no {PASSWORD_VARIABLE} set)")
    serve(inv, targets, selected, port=port, bind=bind, allow_cancel=allow_cancel, password=password,
          say=click.echo)  # fmt: skip

"""`radeonlab notify-test [URL...] --host H`: one test message from a workstation, as its jobs send theirs."""

from __future__ import annotations

import dataclasses

import click

from radeonlab.cli.options import echo_json, inventory_option, inventory_path, json_option


@click.command("notify-test")
@click.argument("urls", nargs=-1, metavar="[URL]...")
@click.option("--host", metavar="HOST", required=True, help="the workstation that sends it")
@inventory_option
@json_option
def command(urls: tuple[str, ...], host: str, inventory: str | None, as_json: bool) -> None:
    """Send a test message from HOST to each Apprise URL (json://, ntfys://, discord://, mailtos://...;
    none given: the host's `radeonlab_notify` inventory data), as its jobs' notifications are sent. A URL
    typed here is in this shell's history and process list: the inventory default avoids both. Exit 1 when a
    URL did not take the message."""
    from radeonlab.jobs.fleet.inventory import get_host, load_inventory
    from radeonlab.jobs.track.notify_test import send_test

    inv = inventory_path(inventory)
    outcomes = send_test(get_host(load_inventory(inv), host), inv, list(urls))
    if as_json:
        echo_json([dataclasses.asdict(o) for o in outcomes])
    else:
        for o in outcomes:
            said = "delivered" if o.ok else f"NOT delivered after {o.tries} tries"
            click.echo(f"{host}: url {o.url} ({o.scheme}): {said}")
    raise SystemExit(0 if all(o.ok for o in outcomes) else 1)

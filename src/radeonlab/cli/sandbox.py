"""`radeonlab sandbox up|down|status`: simulated workstations for trying radeonlab without a Radeon card.

A thin verb over radeonlab.sandbox (part of the installed package); it needs root.
"""

from __future__ import annotations

import sys

import click


@click.command(
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def command(args: tuple[str, ...]) -> None:
    """Create, list or destroy sandbox workstations (see `radeonlab sandbox --help`)."""
    from radeonlab.sandbox.__main__ import main

    sys.exit(main(list(args)))

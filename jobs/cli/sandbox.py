"""`radeonlab sandbox up|down|status`: simulated workstations for trying radeonlab without a Radeon card.

A thin verb over tests/sandbox (part of the checkout, not of the installed package): it needs a source
checkout and root.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

import jobs


@click.command(
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []},
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def command(args: tuple[str, ...]) -> None:
    """Create, list or destroy sandbox workstations (see `radeonlab sandbox --help`)."""
    repo = Path(jobs.__file__).resolve().parents[1]
    if not (repo / "tests" / "sandbox" / "__init__.py").is_file():
        raise click.ClickException(
            f"the sandbox needs a radeonlab source checkout; {repo}/tests/sandbox is missing"
        )
    sys.path.insert(0, str(repo))
    from tests.sandbox.__main__ import main

    sys.exit(main(list(args)))

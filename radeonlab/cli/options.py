"""Options shared by the job verbs, defined once; and the small output helpers they share."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any, TypeVar

import click

INVENTORY_ENV = "RADEONLAB_INVENTORY"
DEFAULT_INVENTORY = "inventories/home.py"

F = TypeVar("F", bound=Callable[..., Any])


def inventory_option(f: F) -> F:
    return click.option(
        "-i",
        "--inventory",
        default=lambda: os.environ.get(INVENTORY_ENV, DEFAULT_INVENTORY),
        show_default=f"${INVENTORY_ENV} or {DEFAULT_INVENTORY}",
        type=click.Path(dir_okay=False),
        help="the pyinfra inventory of the workstations (the same file provisioning uses)",
    )(f)


def host_option(f: F) -> F:
    return click.option("--host", help="a host name of the inventory")(f)


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")(f)


def _job_id(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """Refuse what is not a job id before any SSH: it becomes a folder name on the host."""
    from radeonlab.contract.jobid import is_job_id
    from radeonlab.errors import RadeonlabError

    if not is_job_id(value):
        raise RadeonlabError(f"not a radeonlab job id: {value!r} (ids look like demo-20250101-120000-ab12)")
    return value


def job_argument(f: F) -> F:
    return click.argument("job_id", metavar="JOB", callback=_job_id)(f)


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=1, default=str))


def say(message: str) -> None:
    """A progress message: to stderr, so --json output on stdout stays machine-readable."""
    click.echo(message, err=True)

"""Options every verb shares, defined once, and where their defaults come from.

Precedence for the inventory and --limit: the verb's own option > the same option before the verb
(`radeonlab -i inv.py list`) > $RADEONLAB_INVENTORY / $RADEONLAB_LIMIT > the user config file
(~/.config/radeonlab/config.toml, or $RADEONLAB_CONFIG: `inventory = "..."`, `limit = "..."`) >
./inventories/home.py when it exists (a checkout). Relative paths in the config file are relative to it.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from radeonlab.errors import InputError

INVENTORY_ENV, LIMIT_ENV, CONFIG_ENV = "RADEONLAB_INVENTORY", "RADEONLAB_LIMIT", "RADEONLAB_CONFIG"
CONFIG_FILE = Path("~/.config/radeonlab/config.toml")
CHECKOUT_INVENTORY = Path("inventories/home.py")

F = TypeVar("F", bound=Callable[..., Any])


def config_path() -> Path:
    return Path(os.environ.get(CONFIG_ENV) or CONFIG_FILE).expanduser()


def user_config() -> dict[str, Any]:
    """The user config file's settings ({} when there is none); a broken file is a one-line error."""
    path = config_path()
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"{path}: not a valid config file: {exc}") from None
    if isinstance(data.get("inventory"), str):
        data["inventory"] = str((path.parent / Path(data["inventory"]).expanduser()).resolve())
    return data


def _group_value(name: str) -> Any:
    ctx = click.get_current_context(silent=True)
    root = ctx.find_root() if ctx else None
    return (root.obj or {}).get(name) if root else None


def inventory_path(value: str | None) -> str:
    """The inventory to use, by the precedence above; an error naming every way to set one."""
    found = (
        value or _group_value("inventory") or os.environ.get(INVENTORY_ENV) or user_config().get("inventory")
    )
    if found:
        return str(found)
    if CHECKOUT_INVENTORY.is_file():
        return str(CHECKOUT_INVENTORY)
    raise InputError(
        f'no inventory: pass -i FILE, set {INVENTORY_ENV}, or put inventory = "..." in {config_path()}'
    )


def limit_value(value: str | None) -> str | None:
    return value or _group_value("limit") or os.environ.get(LIMIT_ENV) or user_config().get("limit")


def inventory_option(f: F) -> F:
    return click.option(
        "-i",
        "--inventory",
        default=None,
        metavar="FILE",
        help=f"the pyinfra inventory of the workstations [default: ${INVENTORY_ENV}, the config file, or "
        f"{CHECKOUT_INVENTORY}]",
    )(f)


def limit_option(f: F) -> F:
    return click.option(
        "--limit",
        default=None,
        metavar="HOSTS",
        help="hosts, groups or glob patterns, comma-separated (as pyinfra)",
    )(f)


def host_option(f: F) -> F:
    return click.option("--host", metavar="HOST", help="the host of the inventory to use")(f)


def to_dir_option(help: str) -> Callable[[F], F]:
    """--to DIR: where a job's files land on the laptop, always in DIR/JOB (fetch, export, tensorboard)."""
    path = click.Path(file_okay=False, path_type=Path)
    return click.option("--to", "to_dir", type=path, metavar="DIR", help=help)


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="print JSON for scripts instead of text")(f)


def complete_job(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """Shell completion of job ids from the laptop's cache (no SSH while typing)."""
    import contextlib

    from radeonlab.jobs.fleet import store

    try:
        with contextlib.closing(store.connect()) as conn:
            ids = [r.id for r in store.list_jobs(conn, limit=200)]
    except Exception:  # completion must never fail loudly
        return []
    return [i for i in ["@last", *ids] if i.startswith(incomplete)]


def job_argument(f: F) -> F:
    return click.argument("job_ref", metavar="JOB", shell_complete=complete_job)(f)


JOB_HELP = "JOB is a job id, a unique prefix of one, or @last (the newest job this laptop knows)."


def job_options(f: F) -> F:
    """What every verb acting on one job takes: JOB, -i/--inventory and --host (the host it is on)."""
    return job_argument(inventory_option(host_option(f)))


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=1, default=str))


def say(message: str) -> None:
    """A progress message: to stderr, so --json output on stdout stays machine-readable."""
    click.echo(message, err=True)

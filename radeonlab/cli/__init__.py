"""The `radeonlab` command: one thin module per verb under radeonlab/cli/, loaded only when called."""

from __future__ import annotations

import importlib

import click

# verb -> module under radeonlab.cli that defines `command`
VERBS: dict[str, str] = {
    "check": "check",
    "fleet": "fleet",
    "gpus": "gpus",
    "sandbox": "sandbox",
    "submit": "submit",
    "list": "list_jobs",
    "status": "status",
    "cancel": "cancel",
    "logs": "logs",
    "watch": "watch",
    "fetch": "fetch",
    "resume": "resume",
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(VERBS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in VERBS:
            return None
        return importlib.import_module(f"radeonlab.cli.{VERBS[name]}").command

    def invoke(self, ctx: click.Context) -> object:
        """Errors meant for the user (radeonlab/errors.py): one line on stderr, exit 1, no traceback."""
        from radeonlab.errors import one_line, user_error_types

        try:
            return super().invoke(ctx)
        except Exception as exc:
            if not isinstance(exc, user_error_types()):
                raise
            click.echo(f"radeonlab: error: {one_line(exc)}", err=True)
            ctx.exit(1)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="radeonlab")
def main() -> None:
    """radeonlab: a small LLM fine-tuning lab on AMD Radeon workstations.

    Provision with `pyinfra inventories/home.py deploy/setup.py`; run jobs with the verbs below.
    """

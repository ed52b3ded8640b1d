"""The `radeonlab` command: one thin module per verb under radeonlab/cli/, loaded only when called.

Every verb behaves the same way: options may also come before the verb (`radeonlab -i inv.py list`), errors
are one line `radeonlab: error: ...` on stderr, and the exit status is 0 ok, 1 a job or host failed, 2 a
usage or input error (nothing was sent). `--debug` shows the traceback behind an error.
"""

from __future__ import annotations

import importlib
import sys
import traceback

import click

# verb -> module under radeonlab.cli that defines `command`
VERBS: dict[str, str] = {
    "check": "check",
    "submit": "submit",
    "status": "status",
    "watch": "watch",
    "logs": "logs",
    "cancel": "cancel",
    "resume": "resume",
    "fetch": "fetch",
    "export": "export",
    "chat": "chat",
    "tensorboard": "tensorboard",
    "list": "list_jobs",
    "rm": "rm",
    "prune": "prune",
    "fleet": "fleet",
    "models": "models",
    "gpus": "gpus",
    "sandbox": "sandbox",
    "completion": "completion",
    "notify-test": "notify_test",
    "dashboard": "dashboard",
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(VERBS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in VERBS:
            return None
        return importlib.import_module(f"radeonlab.cli.{VERBS[name]}").command

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        """click's main, with radeonlab's one error format and exit codes (see run)."""
        code = run(
            self, list(sys.argv[1:] if args is None else args), prog_name or "radeonlab", complete_var, extra
        )
        if standalone_mode:
            sys.exit(code)
        return code


@click.group(
    cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110}
)
@click.version_option(package_name="radeonlab")
@click.option(
    "-i", "--inventory", default=None, metavar="FILE", help="the pyinfra inventory (for every verb)"
)
@click.option(
    "--limit", default=None, metavar="HOSTS", help="hosts, groups or globs (for verbs reading several)"
)
@click.option("--debug", is_flag=True, help="show the traceback behind an error")
@click.pass_context
def cli(ctx: click.Context, inventory: str | None, limit: str | None, debug: bool) -> None:
    """radeonlab: a small LLM fine-tuning lab on AMD Radeon workstations.

    Provision with `pyinfra inventories/home.py deploy/setup.py`; run jobs with the verbs below. Exit status:
    0 ok, 1 a job or host failed, 2 a usage or input error (nothing was sent).
    """
    ctx.obj = {"inventory": inventory, "limit": limit, "debug": debug}


def run(group: click.Group, args: list[str], prog_name: str, complete_var: str | None, extra: dict) -> int:
    """Run the command line; every failure becomes one `radeonlab: error: ...` line and an exit status."""
    from radeonlab.errors import EXIT_FAILURE, EXIT_USAGE, RadeonlabError, one_line

    debug = "--debug" in args
    try:
        click.Group.main(
            group, args=args, prog_name=prog_name, complete_var=complete_var, standalone_mode=False, **extra
        )
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("radeonlab: interrupted", err=True)
        return 130
    except click.UsageError as exc:
        verb = f" {exc.ctx.info_name}" if exc.ctx and exc.ctx.parent else ""
        click.echo(f"radeonlab: error: {exc.format_message()} (see radeonlab{verb} --help)", err=True)
        return EXIT_USAGE
    except click.ClickException as exc:
        click.echo(f"radeonlab: error: {exc.format_message()}", err=True)
        return EXIT_USAGE
    except RadeonlabError as exc:
        if debug:
            traceback.print_exc()
        click.echo(f"radeonlab: error: {one_line(exc)}", err=True)
        return exc.exit_code
    except KeyboardInterrupt:
        click.echo("radeonlab: interrupted (a job keeps running on its host)", err=True)
        return 130
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_FAILURE)
    except Exception as exc:  # a library's error nobody translated: still one line, the traceback on --debug
        if debug:
            traceback.print_exc()
        click.echo(f"radeonlab: error: {type(exc).__name__}: {one_line(exc)} (--debug shows where)", err=True)
        return EXIT_FAILURE
    return 0


main = cli  # the console script (pyproject) and tests call the group; its main() is `run` above

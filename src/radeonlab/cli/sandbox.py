"""`radeonlab sandbox up|provision|down|status|demo`: SIMULATED workstations for trying radeonlab without a
Radeon card (radeonlab.sandbox, part of the installed package; it needs root). `python -m radeonlab.sandbox`
is the same command.

`demo` is the README's main-job demo (radeonlab/sandbox/demo.py): provision one SIMULATED workstation, train
a LoRA on it through the radeonlab CLI, fetch and try the adapter, tear it down. `laptop-requirements` is
hidden: scripts/bootstrap.sh asks it which pip requirements the laptop side of the sandbox needs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from radeonlab.sandbox import config

DEFAULT_CARDS = "rx7900xtx,rx6700xt"


@contextmanager
def _one_line() -> Iterator[None]:
    """A sandbox failure as radeonlab's one error line (exit 1), like every other verb's."""
    from radeonlab.errors import RadeonlabError
    from radeonlab.sandbox.hosts import SandboxError

    try:
        yield
    except SandboxError as exc:
        raise RadeonlabError(f"sandbox: {exc}") from exc


def _sandbox(ctx: click.Context) -> Any:  # -> Sandbox
    from radeonlab.sandbox.hosts import Sandbox

    return Sandbox(ctx.meta["radeonlab.sandbox.state_dir"])


@click.group("sandbox")
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=config.STATE_DIR,
    show_default=True,
    help="where the hosts, keys and served files live ($RADEONLAB_SANDBOX_DIR)",
)
@click.pass_context
def command(ctx: click.Context, state_dir: Path) -> None:
    """SIMULATED workstations for trying radeonlab without a Radeon card (needs root)."""
    ctx.meta["radeonlab.sandbox.state_dir"] = state_dir


@command.command("up")
@click.option(
    "--hosts", "count", type=click.IntRange(min=1), default=2, show_default=True, help="how many hosts"
)
@click.option(
    "--cards",
    default=DEFAULT_CARDS,
    show_default=True,
    help=f"simulated card per host, comma-separated ({', '.join(config.CARDS)}, none)",
)
@click.option(
    "--provision",
    is_flag=True,
    help="then provision them with deploy/setup.py against the SIMULATED AMD servers (= `provision`)",
)
@click.pass_context
def up(ctx: click.Context, count: int, cards: str, provision: bool) -> None:
    """Create and start hosts (builds the base rootfs on first use)."""
    from radeonlab.errors import InputError
    from radeonlab.sandbox import reap

    chosen = [None if c in ("", "none") else c for c in cards.split(",")]
    unknown = [c for c in chosen if c is not None and c not in config.CARDS]
    if unknown:
        raise InputError(
            f"--cards {cards}: no simulated card {unknown[0]!r} ({', '.join(config.CARDS)}, none)"
        )
    sbx = _sandbox(ctx)
    with _one_line():
        reap.reap_stale()
        reap.keep(sbx.state_dir)
        t0 = time.monotonic()
        hosts = sbx.create_hosts(count, chosen)
        for host in hosts:
            click.echo(f"{host.name}: {host.user}@{host.address}:{host.port} card={host.card}")
        click.echo(f"ready in {time.monotonic() - t0:.1f}s; inventory: {sbx.inventory_file}")
        if provision:
            _provision(sbx, [h.name for h in hosts])
        else:  # the deploy needs the SIMULATED servers: the verb serves them for its run
            click.echo(f"  provision them: radeonlab sandbox --state-dir {sbx.state_dir} provision")
        _say_how_to_use(sbx)


@command.command("provision")
@click.argument("names", nargs=-1)
@click.pass_context
def provision_cmd(ctx: click.Context, names: tuple[str, ...]) -> None:
    """Provision hosts (default: every host) with deploy/setup.py, the SIMULATED apt repo and wheel index
    served meanwhile."""
    from radeonlab.errors import InputError

    sbx = _sandbox(ctx)
    unknown = [n for n in names if n not in sbx.hosts]
    if unknown or not sbx.hosts:
        raise InputError(f"no such host(s) {', '.join(unknown) or '(none up)'}: `radeonlab sandbox up` first")
    with _one_line():
        _provision(sbx, list(names) or list(sbx.hosts))
        _say_how_to_use(sbx)


@command.command("down")
@click.option(
    "--stale",
    is_flag=True,
    help="instead: destroy every sandbox host on this machine left behind by a killed run",
)
@click.pass_context
def down(ctx: click.Context, stale: bool) -> None:
    """Destroy every host (the base rootfs stays cached)."""
    from radeonlab.sandbox import reap

    with _one_line():
        if stale:
            removed = reap.reap_stale()
            click.echo(f"removed {len(removed)} stale sandbox host(s)" + "".join(f"\n  {r}" for r in removed))
            return
        sbx = _sandbox(ctx)
        sbx.destroy_all()
        click.echo(f"all hosts destroyed under {sbx.state_dir}")


@command.command("status")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """List the hosts."""
    with _one_line():
        hosts = _sandbox(ctx).status()
    if as_json:
        click.echo(json.dumps(hosts, indent=1))
        return
    for s in hosts:
        state = "up" if s["sshd"] else ("running, sshd off" if s["running"] else "stopped")
        where = f"{s['ssh_user']}@{s['ssh_hostname']}:{s['ssh_port']}"
        click.echo(f"{s['name']:8} {where}  card={s['card']}  {state}")


@command.command("demo")
@click.option("--keep", is_flag=True, help="keep the demo's sandbox host afterwards")
@click.pass_context
def demo(ctx: click.Context, keep: bool) -> None:
    """The README demo: provision, submit, watch, fetch --try, in the sandbox's state dir (--state-dir,
    $RADEONLAB_SANDBOX_DIR; one without other hosts). Short output: a line per phase, watch's live panel on a
    terminal (a line per 10 % of the steps otherwise), the tools' output in STATE/logs; at the end what was
    trained, the adapter's path and answer, and what is left behind."""
    from radeonlab.sandbox import demo as demo_module

    raise SystemExit(demo_module.run(ctx.meta["radeonlab.sandbox.state_dir"], keep=keep))


@command.command("laptop-requirements", hidden=True)  # internal: scripts/bootstrap.sh reads it
def laptop_requirements_cmd() -> None:
    """Print the pip requirements the laptop side of the sandbox needs (tiny model, adapter check)."""
    click.echo("\n".join(laptop_requirements()))


def laptop_requirements() -> list[str]:
    """The training-stack pins the laptop needs to make the tiny model and load adapters.

    Taken from roles/python_stack/defaults.py so the laptop and the workstations run the same versions;
    torch is the machine's local CPU wheel, the one every SIMULATED torch of the sandbox is made of.
    """
    from radeonlab.roles.python_stack.defaults import DEFAULTS
    from radeonlab.sandbox.wheelfiles import standin_torch_version

    wanted = {"transformers", "peft", "safetensors"}
    pins = [r for r in DEFAULTS["python_stack_requirements"] if r.split("==")[0] in wanted]
    return [f"torch=={standin_torch_version()}", *pins]


def _provision(sbx: Any, names: list[str]) -> None:
    """deploy/setup.py on these hosts, the one way the test bed provisions (sandbox/provision.py)."""
    from radeonlab.sandbox.provision import provision_hosts

    done = provision_hosts(sbx, {n: sbx.hosts[n].card for n in names}, quiet=False)
    seconds = next(iter(done.values())).seconds if done else 0.0
    click.echo(f"provisioned {', '.join(names)} in {seconds:.1f}s")


def _say_how_to_use(sbx: Any) -> None:
    from radeonlab.sandbox.provision import INVENTORY

    click.echo(
        f"  jobs: RADEONLAB_SANDBOX_DIR={sbx.state_dir} RADEONLAB_INVENTORY={INVENTORY} radeonlab fleet"
    )

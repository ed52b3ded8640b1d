"""One provisioned sandbox workstation: what the demo and the job-runner tests start from.

Builds (or reuses from the cache) the SIMULATED AMD apt repository and the local wheel index (CPU torch
standing in for the ROCm build), serves them on loopback, creates sandbox host(s) with a simulated card and
runs the real provisioning over SSH: `pyinfra -y inventories/sandbox.py deploy/setup.py`. The test bed's one
way to provision (`radeonlab sandbox up --provision` and `sandbox provision` included).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from radeonlab.sandbox import aptrepo, web, wheels
from radeonlab.sandbox.hosts import Sandbox, SandboxError, SandboxHost

# The installed package's own inventory file, and deploy/setup.py's function in pyinfra's `module.function`
# form (deploy/setup.py is that one call): an installed radeonlab has no checkout to point at.
INVENTORY = str(resources.files("radeonlab.sandbox").joinpath("inventory.py"))
DEPLOY = "radeonlab.deploy.setup.provision"
DEPLOY_TIMEOUT_S = 3600


@dataclass
class Provisioned:
    """A provisioned host and what it cost."""

    host: SandboxHost
    seconds: float  # the pyinfra run alone


def sandbox_env(sandbox: Sandbox) -> dict[str, str]:
    """The environment that points inventories/sandbox.py (pyinfra and radeonlab) at this sandbox."""
    return {**os.environ, "RADEONLAB_SANDBOX_DIR": str(sandbox.state_dir)}


@contextlib.contextmanager
def serving(sandbox: Sandbox, *, common: bool = True) -> Iterator[dict[str, object]]:
    """The SIMULATED AMD apt repository and wheel index (built, or taken from the cache) served on loopback
    while the block runs. Yields the host data (product settings) pointing at them; with `common`, every
    host's data gets them (sandbox.json, the inventory), else the caller gives them to its own hosts.

    Only a provisioning run needs them: jobs need nothing from them after. The one way the test bed
    provisions (with run_deploy): provision_hosts, `radeonlab sandbox provision` and `up --provision`,
    tests/support/provisioned.py.
    """
    repo = aptrepo.build_repo(sandbox.state_dir)
    index = wheels.build_wheel_index(sandbox.state_dir)
    with _spawn_on_the_sandbox_port(sandbox) as server:
        settings = {**repo.settings(server.url), **index.settings(server.url)}
        if common:
            sandbox.set_common_data(**settings)
        yield settings


def _spawn_on_the_sandbox_port(sandbox: Sandbox) -> web.WebProcess:
    """The web server on the port this sandbox served from last time (any free one if that is taken), so
    the URLs a lab's lock recorded stay valid from one provisioning run to the next, as a real lab's index
    URL does."""
    port_file = sandbox.state_dir / "web-port"
    try:
        server = web.spawn(sandbox.www_dir, port=int(port_file.read_text()))
    except (OSError, ValueError, RuntimeError):  # no port yet, or it is in use
        server = web.spawn(sandbox.www_dir)
    port_file.write_text(f"{server.url.rstrip('/').rsplit(':', 1)[1]}\n")
    return server


def run_deploy(
    sandbox: Sandbox,
    names: Iterable[str],
    deploy: str = DEPLOY,
    *,
    options: Sequence[str] = (),
    quiet: bool = True,
    cwd: Path | None = None,
    log: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """`pyinfra -y [options] --limit NAME... <the sandbox inventory> <deploy>` (real SSH), inside serving().
    `deploy`: pyinfra's `module.function` form, or a deploy file relative to `cwd` (a checkout).
    With `log`, pyinfra's whole output goes to that file instead (quiet or not)."""
    pyinfra = str(Path(sys.executable).with_name("pyinfra"))
    limit = [arg for n in names for arg in ("--limit", n)]
    with contextlib.ExitStack() as stack:
        sink = stack.enter_context(log.open("w")) if log else None
        return subprocess.run(
            [pyinfra, "-y", *options, *limit, INVENTORY, deploy],
            cwd=cwd or sandbox.state_dir,
            env=sandbox_env(sandbox),
            capture_output=quiet and sink is None,
            stdout=sink,
            stderr=subprocess.STDOUT if sink else None,
            text=True,
            timeout=DEPLOY_TIMEOUT_S,
        )


def provision_host(
    sandbox: Sandbox,
    name: str,
    card: str | None = "rx7900xtx",
    *,
    quiet: bool = True,
    log: Path | None = None,
) -> Provisioned:
    """Create host `name` with simulated `card` and provision it with deploy/setup.py (real SSH)."""
    return provision_hosts(sandbox, {name: card}, quiet=quiet, log=log)[name]


def provision_hosts(
    sandbox: Sandbox, cards: dict[str, str | None], *, quiet: bool = True, log: Path | None = None
) -> dict[str, Provisioned]:
    """Create the hosts (name -> simulated card) and provision them in ONE pyinfra run (hosts in parallel).

    Hosts that already exist are reused (a re-run on a provisioned host is a cheap no-op). The SIMULATED
    servers (serving) live only for the pyinfra run. With `log`, pyinfra's output goes to that file; a
    failure names it and quotes its last 20 lines.
    """
    with serving(sandbox):
        for name in cards:  # a host left stopped by an earlier run (machine restart): made again, not reused
            if name in sandbox.hosts and not sandbox.hosts[name].is_running():
                sandbox.destroy_host(name)
        hosts = {n: sandbox.hosts.get(n) or sandbox.create_host(n, card=c) for n, c in cards.items()}
        start = time.monotonic()
        done = run_deploy(sandbox, cards, quiet=quiet, log=log)
        seconds = time.monotonic() - start
    if done.returncode != 0:
        tail = (done.stderr or "")[-3000:] if quiet else ""
        if log:
            tail = f"(pyinfra's output: {log})\n" + "\n".join(log.read_text().splitlines()[-20:])
        raise SandboxError(f"provisioning {', '.join(cards)} failed (exit {done.returncode}):\n{tail}")
    return {n: Provisioned(h, seconds) for n, h in hosts.items()}


# One provisioned host shared by the end-to-end job modules of a test session (tests/e2e/test_jobs_e2e.py,
# test_jobs_health_e2e.py, faultlab.py): provisioning is the costly part of CI, a re-run on a provisioned
# host is a no-op. Modules leave it for the session's sandbox teardown.
SHARED_TRAINER = "lab1"


def shared_trainer(sandbox: Sandbox, card: str = "rx7900xtx") -> Provisioned:
    """The session's shared host, provisioned on first use; later users get it reachable and idle."""
    host = sandbox.hosts.get(SHARED_TRAINER)
    if host is not None:  # an earlier module's jobs end, so this module's are not queued behind them
        host.make_idle()
    return provision_host(sandbox, SHARED_TRAINER, card)

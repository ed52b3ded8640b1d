"""One provisioned SIMULATED workstation shared by the hardening suites (tests/e2e/test_faults.py,
tests/unit/test_security.py), and the small helpers they share.

Provisioning costs the most in CI, so these suites use the session's shared trainer host
(radeonlab/sandbox/provision.py `shared_trainer`, also used by the job e2e modules): provisioned by the first
module that asks, a no-op re-run (a few seconds) for the later ones, left for the session's teardown.
The tiny model (random weights, a stand-in) and the demo data are built once per session too.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

from click.testing import CliRunner, Result

from radeonlab.cli import main
from radeonlab.jobs.fleet.inventory import HostTarget, load_inventory
from radeonlab.sandbox import demodata, tinymodel
from radeonlab.sandbox.demo import write_spec
from radeonlab.sandbox.hosts import Sandbox, SandboxHost
from radeonlab.sandbox.provision import SHARED_TRAINER, shared_trainer

REPO = Path(__file__).resolve().parents[2]
INVENTORY = str(REPO / "inventories/sandbox.py")
HOST = SHARED_TRAINER
LAB_HOME = "/home/lab/radeonlab"
JOBS_DIR = f"{LAB_HOME}/jobs"
BLOBS_DIR = f"{LAB_HOME}/blobs"
LONG_STEPS = 5000  # a job still running whenever a test needs it (the test ends it)

_SHARED: dict[str, Lab] = {}  # sandbox state dir -> its lab (one per session)


@dataclass
class Lab:
    sandbox: Sandbox
    host: SandboxHost
    work: Path  # spec, data and the tiny model live here
    env: dict[str, str]  # what the CLI needs: the sandbox inventory's dir, a private laptop home
    provision_s: float
    jobs: dict[str, str] = field(default_factory=dict)

    def spec(self, name: str, overrides: dict[str, object]) -> Path:
        """A copy of the demo spec beside the shared model and data (file `name`, values replaced)."""
        return write_spec(self.work, overrides, name=name)


def shared_lab(sandbox: Sandbox, work: Path) -> Lab:
    """The session's shared trainer host (created and provisioned on first use, re-provisioned after)."""
    lab = _SHARED.get(str(sandbox.state_dir))
    if lab is not None and lab.host.is_running():
        lab.provision_s = shared_trainer(sandbox).seconds  # no-op re-run: cheap
        return lab
    provisioned = shared_trainer(sandbox)
    data = demodata.write_dataset(work / "data")
    tinymodel.build_model(work / "tiny-llama", data)
    env = {"RADEONLAB_SANDBOX_DIR": str(sandbox.state_dir), "RADEONLAB_HOME": str(work / "laptop")}
    lab = Lab(sandbox, provisioned.host, work, env, provisioned.seconds)
    _SHARED[str(sandbox.state_dir)] = lab
    return lab


def host_target(lab: Lab) -> HostTarget:
    """The shared host as the job runner sees it, from inventories/sandbox.py pointed at this sandbox."""
    with mock.patch.dict(os.environ, lab.env):
        return load_inventory(INVENTORY)[HOST]


def sshd_answers(host: SandboxHost) -> bool:
    try:
        socket.create_connection((host.address, host.port), timeout=0.5).close()
    except OSError:
        return False
    return True


def cli(lab: Lab, *args: str, env: dict[str, str] | None = None) -> Result:
    """Run a radeonlab verb in-process, exactly as typed (stderr kept apart from stdout)."""
    return CliRunner().invoke(main, list(args), env={**lab.env, **(env or {})}, catch_exceptions=False)


def submit(lab: Lab, spec: Path, env: dict[str, str] | None = None) -> str:
    result = cli(lab, "submit", str(spec), "-i", INVENTORY, "--host", HOST, env=env)
    assert result.exit_code == 0, result.output
    return re.search(r"submitted (\S+) to", result.stdout).group(1)  # type: ignore[union-attr]


def state_on_host(host: SandboxHost, job_id: str) -> dict:
    return json.loads(host.exec(["cat", f"{JOBS_DIR}/{job_id}/state.json"]).stdout)


def wait_for(predicate, timeout: float, what: str, every: float = 0.5):  # noqa: ANN001, ANN201
    """Poll `predicate()` until it returns something truthy; fail naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if got := predicate():
            return got
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def wait_logged_step(host: SandboxHost, job_id: str, timeout: float = 240) -> None:
    """Until the job's trainer_log.jsonl has a line (training really runs)."""
    log = f"{JOBS_DIR}/{job_id}/output/trainer_log.jsonl"
    wait_for(lambda: host.exec(["test", "-s", log], check=False).returncode == 0, timeout, f"{log}")


def kill_ssh_sessions(host: SandboxHost) -> None:
    """Cut the open SSH sessions of the lab user, by their pids (stop_sshd only stops new ones)."""
    for line in host.exec("ps -eo pid=,args=").stdout.splitlines():
        pid, args = line.split(None, 1)
        if args.startswith("sshd: lab"):
            host.exec(["kill", "-9", pid], check=False)


def listing(host: SandboxHost, path: str) -> list[str]:
    """Every path under `path` with its size and mode: a snapshot to compare (unchanged = unharmed)."""
    out = host.exec(f"find {path} -mindepth 1 -printf '%p %s %m %u\\n' 2>/dev/null | sort", check=False)
    return out.stdout.splitlines()

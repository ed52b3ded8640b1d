"""The session's provisioned SIMULATED workstations, shared by tests/test_provision.py,
tests/test_provision_coresdk.py and tests/test_provision_hub_e2e.py (a pytest plugin: tests/conftest.py
lists it), and the deploy runner the provisioning tests use.

One `pyinfra -y --json inventories/sandbox.py deploy/setup.py` provisions every host at once: one per default
card, and the variants the Core SDK tests read (the download.pytorch.org torch source on the RX 6700 XT, a
Strix Halo APU); a second run is the no-op. Tests that change a host put it back as they found it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from radeonlab.sandbox import aptrepo, web, wheels
from radeonlab.sandbox.hosts import Sandbox, SandboxHost

REPO = Path(__file__).resolve().parent.parent
CARDS = ("rx7900xtx", "rx6700xt", "rx9070xt")
# name -> (simulated card, host data): provisioned in the same runs as the default cards
VARIANTS: dict[str, tuple[str, dict]] = {
    "prov-6700xt-pt": ("rx6700xt", {"pytorch_source": "pytorch"}),
    "prov-strixhalo": ("strixhalo", {}),
}


@dataclass
class Run:
    returncode: int
    seconds: float
    stdout: str
    stderr: str
    results: dict = field(default_factory=dict)

    def changed_ops(self, host: str) -> list[str]:
        return [op["name"] for op in self.results.get("operations", []) if host in op["success"]]


def run_deploy(sandbox: Sandbox, hosts: list[SandboxHost], deploy: str = "deploy/setup.py") -> Run:
    """`pyinfra -y --json inventories/sandbox.py <deploy>` limited to these hosts (subprocess, real SSH)."""
    limit = [arg for h in hosts for arg in ("--limit", h.name)]
    start = time.monotonic()
    done = subprocess.run(
        [str(Path(sys.executable).with_name("pyinfra")), "-y", "--json", *limit,
         "inventories/sandbox.py", deploy],
        cwd=REPO, capture_output=True, text=True, timeout=3600,
        env={**os.environ, "RADEONLAB_SANDBOX_DIR": str(sandbox.state_dir)},
    )  # fmt: skip
    run = Run(done.returncode, time.monotonic() - start, done.stdout, done.stderr)
    if done.returncode == 0:
        run.results = json.loads(done.stdout)["results"]
    return run


@dataclass
class Provisioned:
    sandbox: Sandbox
    hosts: dict[str, SandboxHost]  # card -> host, the roles' defaults
    variants: dict[str, SandboxHost]  # VARIANTS' names -> host
    first: Run
    second: Run

    @property
    def every_host(self) -> list[SandboxHost]:
        return [*self.hosts.values(), *self.variants.values()]


@pytest.fixture(scope="session")
def provisioned(sandbox: Sandbox) -> Iterator[Provisioned]:
    repo = aptrepo.build_repo(sandbox.state_dir)
    index = wheels.build_wheel_index(sandbox.state_dir)
    with web.spawn(sandbox.www_dir) as server:
        sandbox.set_common_data(**repo.settings(server.url), **index.settings(server.url))
        hosts = {card: sandbox.create_host(f"prov-{card}", card=card) for card in CARDS}
        variants = {name: sandbox.create_host(name, card=c, data=d) for name, (c, d) in VARIANTS.items()}
        every = [*hosts.values(), *variants.values()]
        try:
            first = run_deploy(sandbox, every)
            assert first.returncode == 0, first.stderr[-5000:]
            second = run_deploy(sandbox, every)
            ratio = second.seconds / first.seconds
            print(f"\nprovisioning {len(every)} hosts: first {first.seconds:.1f}s, "
                  f"no-op {second.seconds:.1f}s, ratio {ratio:.3f}")  # fmt: skip
            yield Provisioned(sandbox, hosts, variants, first, second)
        finally:
            for h in every:
                sandbox.destroy_host(h.name)


def exports(text: str) -> dict[str, str]:
    """The `export NAME="value"` lines of a profile.d file, as a dict."""
    out = {}
    for line in text.splitlines():
        if line.startswith("export "):
            key, value = line.removeprefix("export ").split("=", 1)
            out[key] = value.strip('"')
    return out

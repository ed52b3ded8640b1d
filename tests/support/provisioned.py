"""The session's provisioned SIMULATED workstations, shared by tests/e2e/test_provision.py,
tests/e2e/test_provision_coresdk.py and tests/e2e/test_provision_hub_e2e.py (a pytest plugin:
tests/conftest.py
lists it), and the deploy runner the provisioning tests use.

One `pyinfra -y --json <the sandbox inventory> deploy/setup.py` (radeonlab.sandbox.provision, the test
bed's one way, its SIMULATED servers up for the session) provisions every host at once: one per default
card, and the variants the Core SDK tests read (the download.pytorch.org torch source on the RX 6700 XT, a
Strix Halo APU); a second run is the no-op. Tests that change a host put it back as they found it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from radeonlab.sandbox import provision
from radeonlab.sandbox.hosts import Sandbox, SandboxHost

REPO = Path(__file__).resolve().parents[2]
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
    """`pyinfra -y --json` with the sandbox's inventory and `deploy` limited to these hosts (real SSH), the
    test bed's one way (radeonlab.sandbox.provision.run_deploy), inside the fixture's serving()."""
    start = time.monotonic()
    done = provision.run_deploy(sandbox, [h.name for h in hosts], deploy, options=["--json"], cwd=REPO)
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
    with provision.serving(sandbox):
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

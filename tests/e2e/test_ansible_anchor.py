"""The benchmark's Ansible anchor does what deploy/setup.py does (end to end, SIMULATED workstations).

Two fresh sandbox hosts (one per simulated card) are provisioned by radeonlab (`pyinfra -y
inventories/sandbox.py deploy/setup.py`), two more by tests/bench/ansible/site.yml with ansible-core, from
the same SIMULATED AMD apt repository and wheel index at the same URLs. Then, card by card, the hosts must
not differ (tests/bench/equivalence.py: the roles' files, the host record minus volatile fields, the Debian
packages, the venv's pip freeze, the user's groups and folders) except where ACCEPTED says why. A second
playbook run must change nothing: the bench times it as Ansible's no-op.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from radeonlab.roles.rocm import repos
from radeonlab.sandbox.hosts import Sandbox, SandboxHost
from radeonlab.sandbox.provision import sandbox_env
from tests.bench.ansible_inventory import PlaybookRun, rocm_sources, settings
from tests.bench.equivalence import differences, host_state, unexplained
from tests.bench.provisioning import Provisioned, provision_both, served, table_rows

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

# RDNA3 (the default card) and the RX 6700 XT, whose gfx1031 is where the torch source decides the override;
# an RDNA4 card differs from the RDNA3 one only in values the same operations write.
CARDS = ("rx7900xtx", "rx6700xt")
# The pin file of the roles' default stream (the sandbox inventory sets only URLs).
PIN = "file " + rocm_sources(settings({}))["pin_path"]
# Differences between a radeonlab host and an Ansible host that are the engines', not the playbook's.
ACCEPTED: dict[str, str] = {
    "package python3-apt:amd64": "Ansible's apt module runs on the host's python3 and needs python3-apt: "
    "it installs it on first use",
    "package python-apt-common:all": "installed with python3-apt (a dependency)",
    "package distro-info-data:all": "installed with python3-apt (a dependency)",
    "package iso-codes:all": "installed with python3-apt (a recommendation)",
    "package lsb-release:all": "installed with python3-apt (a recommendation)",
    "package python3-packaging:all": "Ansible's pip module needs `packaging` (or setuptools) in the host's "
    "python3 to compare versions; the playbook installs it",
    "pip uv": "the installer radeonlab installs the hash lock with (python_stack_installer: uv, the default, "
    "itself hash-pinned); the playbook installs the same lock with pip",
    "record package uv": "the same installer, as the host record's package list shows it",
    PIN: "pyinfra renders templates with Jinja's keep_trailing_newline, Ansible's template module restores "
    "only as many trailing newlines as the template source has: roles/rocm's apt-pin.j2 ends with a value "
    "that ends in a newline, so pyinfra's file has one more, empty, last line (apt ignores it)",
}


@dataclass
class Pairs:
    hosts: dict[str, tuple[SandboxHost, SandboxHost]]  # card -> (radeonlab host, Ansible host)
    first: PlaybookRun
    second: PlaybookRun
    run: Provisioned


@pytest.fixture(scope="module")
def pairs(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pairs]:
    """The bench's own provisioning section (one round) on one host per card and engine: this module is
    also CI's run of that section (tests/unit/test_bench_report.py's reduced bench leaves it out)."""
    work = tmp_path_factory.mktemp("ansible")
    before = set(sandbox.hosts)
    try:
        with served(sandbox):
            run = provision_both(sandbox, list(CARDS), 1, sandbox_env(sandbox), work)
        made = zip(CARDS, run.ours, run.theirs, strict=True)
        hosts = {card: (sandbox.hosts[ours], sandbox.hosts[theirs]) for card, ours, theirs in made}
        yield Pairs(hosts, run.anchor_first, run.anchor_noops[0], run)
    finally:
        for name in set(sandbox.hosts) - before:
            sandbox.destroy_host(name)


def test_the_playbook_ran_on_every_host_and_changed_things(pairs: Pairs) -> None:
    for _, theirs in pairs.hosts.values():
        recap = pairs.first.recap[theirs.name]
        assert recap["failed"] == 0 and recap["unreachable"] == 0, recap
        assert recap["changed"] > 10, recap  # key, sources, pin, packages, profile files, venv, record...


def test_a_second_playbook_run_changes_nothing(pairs: Pairs) -> None:
    """What the bench times as Ansible's no-op re-provision really is one."""
    assert pairs.second.changed() == {h.name: 0 for _, h in pairs.hosts.values()}, pairs.second.output[-3000:]


def test_the_hosts_end_up_the_same_except_for_the_accepted_differences(pairs: Pairs) -> None:
    problems, stale = [], set(ACCEPTED)
    for card, (ours, theirs) in pairs.hosts.items():
        found = differences(host_state(ours), host_state(theirs))
        extra, missing = unexplained(found, ACCEPTED)
        problems += [f"{card}: {d}" for d in extra]
        stale &= set(missing)
    assert not problems, "\n".join(problems)
    assert not stale, f"listed as accepted but no longer different (remove them from ACCEPTED): {stale}"


def test_the_comparison_sees_what_matters(pairs: Pairs) -> None:
    """The compared state holds the profile.d exports, the record's card and torch, packages and pip pins:
    a comparison that read nothing would pass every host."""
    ours, theirs = pairs.hosts["rx6700xt"]
    state = host_state(theirs)
    # AMD's multi-arch wheels (the default torch source) carry gfx1031 code: the card needs no override.
    profile = state["file /etc/profile.d/radeonlab-gpu.sh"]
    assert 'export PYTORCH_ROCM_ARCH="gfx1031"' in profile and "HSA_OVERRIDE" not in profile, profile
    record = state["file /etc/radeonlab/host.json"]
    assert '"gfx": "gfx1031"' in record and '"cpu_build": true' in record, record
    assert state["pip torch"].startswith("2.14.0") and state["pip llamafactory"] == "0.9.5"
    assert state["record package torch"] == state["pip torch"], state  # the record's packages, one by one
    meta = repos.coresdk_packages(settings(theirs.inventory_entry()["data"]), ["gfx1031"])[0]
    installed = [v for k, v in state.items() if k.startswith(f"package {meta}:")]
    assert installed and installed[0].endswith("ii"), meta  # the ROCm package for the card's own target
    assert host_state(ours)[PIN].endswith("Pin-Priority: 600\n\n")  # the accepted difference, as described
    assert state[PIN].endswith("Pin-Priority: 600\n")


def test_the_playbook_is_driven_by_the_hosts_data(pairs: Pairs) -> None:
    """The sources point at the sandbox's SIMULATED repository (inventory data), not at AMD's default."""
    _, theirs = pairs.hosts["rx7900xtx"]
    data = theirs.inventory_entry()["data"]
    rocm = rocm_sources(settings(data))
    sources = (theirs.root / rocm["list_path"].lstrip("/")).read_text()
    assert any(line in sources for lines in rocm["sources"].values() for line in lines), sources
    assert any(url in sources for key, url in data.items() if key.endswith("_repo_url")), sources
    assert Path(theirs.root / rocm["keyring"].lstrip("/")).stat().st_size > 0


def test_the_bench_reads_this_run_as_its_provisioning_rows(pairs: Pairs) -> None:
    """The provisioning section's JSON and docs/benchmarks.md rows from this real run (both engines, first and
    no-op): timings are reported, never asserted; what is asserted is that each was measured and compared."""
    summary = pairs.run.summary()
    assert summary["hosts"] == len(CARDS)
    assert len(summary["noop_s"]) == 1 and len(summary["facts_only_s"]) == 1
    assert summary["first_s"] > summary["noop_s"][0] > 0 and summary["ansible"]["first_s"] > 0
    assert summary["over_ansible_first"] == summary["first_s"] / summary["ansible"]["first_s"]
    assert summary["ansible"]["first_changed"] == pairs.first.changed()
    assert any(name.startswith("Install") for name, _ in summary["phases"]["radeonlab_first"])
    rows = table_rows(summary)
    assert len(rows) == 2 and "goal <= 0.45" in rows[1][2] and "goal <= 0.13" in rows[1][2], rows

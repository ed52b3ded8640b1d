"""Provisioning benchmark: radeonlab (pyinfra, deploy/setup.py) against its Ansible anchor, in one run.

Two sets of N fresh SIMULATED workstations in one sandbox, served by one web server (the SIMULATED AMD apt
repository and the local wheel index, so both engines install the same bytes from the same URLs):
1. first provisioning: `pyinfra -y inventories/sandbox.py deploy/setup.py` on set R, then the Ansible
   anchor (tests/bench/ansible/site.yml) on set A. radeonlab goes first, on colder caches (the machine's
   page cache of the served files): an ordering bias, if any, favours Ansible.
2. no-op re-runs, alternating which engine goes first each round, with pyinfra's bare fact gathering
   (`--debug-facts` WITHOUT `-y`, see tests/bench/run.py) measured in the same rounds. A re-run that changes
   anything is not a no-op: the bench stops (Ansible's PLAY RECAP changed=0 is checked on every host).
Ratios are radeonlab / Ansible (lower is faster), from the first runs and from the medians of the no-ops.
"""

from __future__ import annotations

import importlib.metadata
import statistics
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from radeonlab.sandbox import provision
from radeonlab.sandbox.hosts import Sandbox
from tests.bench.ansible_inventory import PlaybookRun, run_playbook, write_inventory
from tests.bench.phases import PYINFRA_STEP, Timed, run_timed

REPO = Path(__file__).resolve().parents[2]
INVENTORY = str(REPO / "inventories/sandbox.py")
DEPLOY = "deploy/setup.py"
CARD = "rx7900xtx"
# Issue 28's goals, radeonlab / Ansible on 3 hosts (reported against, never asserted: timings are not tests);
# issue 15's were 0.6 and 0.25.
GOALS = {"first": 0.45, "noop": 0.13}


# The SIMULATED apt repository and wheel index served for the block; every host's data points at it (the
# test bed's one way, radeonlab.sandbox.provision.serving).
served = provision.serving


def run_pyinfra(hosts: Iterable[str], env: dict[str, str], *args: str) -> Timed:
    """`pyinfra -y` (or `args`) deploy/setup.py limited to `hosts`, timed from start to exit and per step."""
    pyinfra = str(Path(sys.executable).with_name("pyinfra"))
    limit = [a for h in hosts for a in ("--limit", h)]
    argv = [pyinfra, *(args or ("-y",)), *limit, INVENTORY, DEPLOY]
    run = run_timed(argv, REPO, env, PYINFRA_STEP)
    if run.returncode != 0:
        raise SystemExit(f"bench: {' '.join(argv[1:])} failed:\n{run.output[-3000:]}")
    return run


def run_anchor(sbx: Sandbox, hosts: list[str], work: Path, noop: bool = False) -> PlaybookRun:
    """The Ansible anchor on `hosts` (inventory regenerated from the sandbox's current data)."""
    run = run_playbook(write_inventory(sbx.state_dir, work, hosts), work)
    changed = {h: n for h, n in run.changed().items() if n}
    if noop and changed:
        raise SystemExit(f"bench: the Ansible re-run changed something (not a no-op): {changed}")
    return run


def ansible_core_version() -> str:
    return importlib.metadata.version("ansible-core")


@dataclass
class Provisioned:
    """Both engines' runs on their own fresh hosts, one per card each (host names in card order)."""

    ours: list[str]
    theirs: list[str]
    first: Timed
    anchor_first: PlaybookRun
    noops: list[Timed]
    anchor_noops: list[PlaybookRun]
    facts: list[float]

    def summary(self) -> dict[str, Any]:
        return summary(
            len(self.ours), self.first, self.anchor_first, self.noops, self.anchor_noops, self.facts
        )


def provision_both(
    sbx: Sandbox, cards: list[str], rounds: int, env: dict[str, str], work: Path
) -> Provisioned:
    """The first run and `rounds` no-op rounds of each engine (inside `served`). Shared by the bench and by
    tests/e2e/test_ansible_anchor.py, which then compares the hosts the two engines made."""
    work.mkdir(parents=True, exist_ok=True)
    ours = [sbx.create_host(f"rl{i + 1}-{card}", card=card).name for i, card in enumerate(cards)]
    theirs = [sbx.create_host(f"an{i + 1}-{card}", card=card).name for i, card in enumerate(cards)]
    first = run_pyinfra(ours, env)
    anchor_first = run_anchor(sbx, theirs, work)
    noops: list[Timed] = []
    anchor_noops: list[PlaybookRun] = []
    facts = []
    for r in range(rounds):
        if r % 2:
            anchor_noops.append(run_anchor(sbx, theirs, work, noop=True))
        noops.append(run_pyinfra(ours, env))
        facts.append(run_pyinfra(ours, env, "--debug-facts").seconds)  # no -y: see tests/bench/run.py
        if not r % 2:
            anchor_noops.append(run_anchor(sbx, theirs, work, noop=True))
    return Provisioned(ours, theirs, first, anchor_first, noops, anchor_noops, facts)


def bench_provisioning(sbx: Sandbox, n: int, rounds: int, env: dict[str, str], work: Path) -> dict[str, Any]:
    with served(sbx):
        return provision_both(sbx, [CARD] * n, rounds, env, work).summary()


def summary(
    n: int,
    first: Timed,
    anchor_first: PlaybookRun,
    noops: list[Timed],
    anchor_noops: list[PlaybookRun],
    facts: list[float],
) -> dict[str, Any]:
    """The provisioning part of the bench JSON: seconds, medians, ratios radeonlab/Ansible, per-step times."""
    noop, anchor_noop = [t.seconds for t in noops], [t.seconds for t in anchor_noops]
    med_noop, med_anchor = statistics.median(noop), statistics.median(anchor_noop)
    return {
        "hosts": n,
        "first_s": first.seconds,
        "noop_s": noop,
        "facts_only_s": facts,
        "noop_over_first": med_noop / first.seconds,
        "facts_over_noop": statistics.median(facts) / med_noop,
        "ansible": {
            "ansible_core": ansible_core_version(),
            "first_s": anchor_first.seconds,
            "first_changed": anchor_first.changed(),
            "noop_s": anchor_noop,
        },
        "over_ansible_first": first.seconds / anchor_first.seconds,
        "over_ansible_noop": med_noop / med_anchor,
        "goals": GOALS,
        # Where the time goes: each step's wall-clock seconds (all hosts in parallel), first run and the
        # last no-op of each engine (tests/bench/phases.py).
        "phases": {
            "radeonlab_first": first.phases,
            "ansible_first": anchor_first.phases,
            "radeonlab_noop": noops[-1].phases,
            "ansible_noop": anchor_noops[-1].phases,
        },
    }


def where_time_goes(steps: list[tuple[str, float]]) -> str:
    """ "slowest step `X` 75.9s, the rest 22.8s" from a run's phases (one engine's first run)."""
    name, longest = max(steps, key=lambda p: p[1])
    # pyinfra's names are "Role | operation (what changed: accelerate missing; ...)": the operation alone (a
    # "|" would also split docs/benchmarks.md's table cell)
    short = name.split(" (", 1)[0].rsplit(" | ", 1)[-1]
    return f"slowest step `{short}` {longest:.1f}s, the rest {sum(s for _, s in steps) - longest:.1f}s"


def table_rows(p: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The provisioning rows of tests/bench/run.py's table."""
    a = p["ansible"]
    noop, facts = statistics.median(p["noop_s"]), statistics.median(p["facts_only_s"])
    phases = p.get("phases", {})
    steps = ""  # where the first runs' time goes, in runs that recorded per-step times
    if phases.get("radeonlab_first") and phases.get("ansible_first"):
        steps = (f"; first runs: radeonlab's {where_time_goes(phases['radeonlab_first'])}; Ansible's "
                 f"{where_time_goes(phases['ansible_first'])}")  # fmt: skip
    return [
        ("provisioning", f"{p['hosts']} hosts: first {p['first_s']:.1f}s, no-op {noop:.1f}s, "
         f"facts only {facts:.1f}s",
         f"no-op/first {p['noop_over_first']:.2f}; facts/no-op {p['facts_over_noop']:.2f}"),
        ("vs Ansible", f"ansible-core {a['ansible_core']}: first {a['first_s']:.1f}s, "
         f"no-op {statistics.median(a['noop_s']):.1f}s{steps}",
         f"first {p['over_ansible_first']:.2f}x (goal <= {GOALS['first']}); "
         f"no-op {p['over_ansible_noop']:.2f}x (goal <= {GOALS['noop']})"),
    ]  # fmt: skip

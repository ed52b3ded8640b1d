"""Shared fixtures. Sandbox workstations (radeonlab/sandbox) are real hosts and need root.

Fixtures here:
  sandbox     (session)  a Sandbox with its own state dir; every host destroyed at session end, then
                         checked: no mount under the state dir, no process rooted in it.
  make_host   (function) make_host(card=None|"rx7900xtx"|"rx6700xt"|"rx9070xt", name=None, data=None)
                         -> a started SandboxHost, destroyed after the test (even when it fails).
  provisioned (session)  tests/support/provisioned.py: hosts provisioned once by deploy/setup.py, shared
                         by the provisioning tests (a plugin module, listed in `pytest_plugins` below).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from radeonlab.sandbox import reap
from radeonlab.sandbox.hosts import Sandbox, SandboxHost

pytest_plugins = ["tests.support.provisioned"]  # `provisioned` (session): the provisioning tests' hosts

NOT_ROOT = "sandbox hosts need root (mount, unshare, chroot): run the tests as root"
_TIMINGS: dict[str, float] = {}


# The longest test files (set-up and calls, from the full runs' --durations), started first so that no long
# file starts last and leaves the other worker idle at the end (longest-first scheduling); the rest keep
# their collection order (tests/e2e, then tests/unit's short files, which fill the end).
LONGEST_FIRST = (
    "tests/e2e/test_slurm.py",
    "tests/e2e/test_container_e2e.py",  # a deploy with an image build, then jobs in containers
    "tests/e2e/test_ansible_anchor.py",
    "tests/unit/test_bench_report.py",  # the reduced bench: every section on 2 hosts
    "tests/e2e/test_wheel_cache.py",
    "tests/e2e/test_provision.py",  # with the other PROVISIONED_FILES: the session's provisioned hosts
)


def _start_rank(item: pytest.Item) -> int:
    path = item.nodeid.split("::", 1)[0]
    if Path(path).name in PROVISIONED_FILES:
        path = "tests/e2e/test_provision.py"
    return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_start_rank)  # stable: each file's tests keep their order
    if os.geteuid() != 0:
        for item in items:
            if "sandbox" in item.keywords:
                item.add_marker(pytest.mark.skip(reason=NOT_ROOT))


# The test files that read the session's provisioned hosts (tests/support/provisioned.py): one worker runs
# them all, so the hosts are provisioned once (tests/unit/test_layout.py checks the list against the files).
PROVISIONED_FILES = ("test_provision.py", "test_provision_coresdk.py", "test_provision_hub_e2e.py")


def group_of(nodeid: str) -> str:
    """Which tests one pytest-xdist worker runs together: a whole file (its module-scoped hosts are made once,
    and its tests may build on each other in order), and the provisioning files as one."""
    path = nodeid.split("::", 1)[0]
    return "provisioned" if Path(path).name in PROVISIONED_FILES else path


@pytest.hookimpl(optionalhook=True)  # xdist's hook: unknown to a run with `-p no:xdist`
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Both lanes run in pytest-xdist workers (scripts/test.sh: three, the fast lane two) that take a test
    group at a time, in collection order: tests/e2e's long files first, tests/unit's short ones fill the end.
    Not xdist's
    `--dist loadgroup`: its marks do not reach the scheduler under pytest 9 (it rewrites `item._nodeid`,
    which pytest 9 no longer reads)."""
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False  # xdist would put the files with the most tests first

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return ByGroup(config, log)


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    if os.geteuid() != 0:
        pytest.skip(NOT_ROOT)
    reap.reap_stale()  # hosts of an earlier session that was killed (SIGKILL: no teardown ran)
    sbx = Sandbox(tmp_path_factory.mktemp("sandbox"))
    reap.claim(sbx.state_dir)
    sbx.ensure_base()  # once per machine (cached); a failure here is a clear setup error
    try:
        yield sbx
    finally:
        sbx.destroy_all()  # raises, listing what is left, if any mount or host process survives
        _TIMINGS.update(sbx.timings)
        assert sbx.leftovers() == []


@pytest.fixture
def make_host(sandbox: Sandbox) -> Iterator[Callable[..., SandboxHost]]:
    made: list[str] = []
    counter = itertools.count(1)

    def make(card: str | None = None, name: str | None = None, data: dict | None = None) -> SandboxHost:
        name = name or next(n for n in (f"t{i}" for i in counter) if n not in sandbox.hosts)
        made.append(name)
        return sandbox.create_host(name, card=card, data=data)

    yield make
    errors = []
    for name in made:
        if name in sandbox.hosts:
            try:
                sandbox.destroy_host(name)
            except Exception as exc:  # destroy the others first, then fail
                errors.append(f"{name}: {exc}")
    assert not errors, errors


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _TIMINGS:
        shown = ", ".join(f"{k} {v:.2f}s" for k, v in _TIMINGS.items())
        terminalreporter.write_line(f"sandbox timings (first of each): {shown}")


def inventory_target(sandbox: Sandbox, host: SandboxHost, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """`host` as the job runner sees it: through the project's own sandbox inventory file."""
    from radeonlab.jobs.fleet.inventory import load_inventory

    monkeypatch.setenv("RADEONLAB_SANDBOX_DIR", str(sandbox.state_dir))
    return load_inventory(Path(__file__).resolve().parents[1] / "inventories" / "sandbox.py")[host.name]


def module_host(name: str):  # noqa: ANN201
    """A module-scoped fixture: one bare sandbox host called `name`, destroyed after the module."""

    @pytest.fixture(scope="module")
    def host(sandbox: Sandbox) -> Iterator[SandboxHost]:
        made = sandbox.create_host(name)
        try:
            yield made
        finally:
            sandbox.destroy_host(made.name)

    return host

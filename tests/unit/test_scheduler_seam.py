"""The scheduler seam (issue 24 item 4): the scheduler is chosen once (jobs/scheduler/choose.py) and every
other module calls the `Scheduler` protocol; only the scheduler package reaches Slurm's job-runner modules,
and no module outside it branches on "is it Slurm"."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from radeonlab.contract.records import JobRecord, StateRecord
from radeonlab.contract.state import JobState
from radeonlab.errors import InputError, JobStateError
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.fleet.probe import HostView
from radeonlab.jobs.plan.slurm import SlurmError
from radeonlab.jobs.scheduler.choose import describe_hosts, fold_rows, scheduler_for, scheduler_of
from radeonlab.jobs.scheduler.queue import QueueScheduler
from radeonlab.jobs.scheduler.slurm import SlurmScheduler
from tests.unit.test_layout import product_modules

# Slurm's job-runner modules: only the scheduler package (and they themselves) may import them
SLURM_MODULES = {
    "radeonlab.jobs.apply.slurm",
    "radeonlab.jobs.track.slurm",
    "radeonlab.jobs.fleet.slurm",
    "radeonlab.jobs.plan.slurm",
}
# Where Slurm is not a choice of scheduler: the deploy's Slurm role and its composition (deploy/), the
# SIMULATED test bed, the job record (contract/: it writes its optional `slurm` part like any optional part)
# and the host's launcher (under Slurm's allocation it maps Slurm's ranks; launcher.py says so by the code)
NOT_A_CHOICE = (
    "radeonlab.jobs.scheduler", "radeonlab.roles.slurm", "radeonlab.sandbox", "radeonlab.deploy",
    "radeonlab.contract",
)  # fmt: skip
LAUNCHER = "radeonlab.jobs.host.launcher"
# calls that decide whether Slurm is the scheduler
DECIDERS = {"uses_slurm", "lab_of", "slurm_controller", "lab_for"}


def outside_the_seam() -> dict[str, Path]:
    return {
        name: path
        for name, path in product_modules().items()
        if not name.startswith(NOT_A_CHOICE) and name not in SLURM_MODULES and name != LAUNCHER
    }


def slurm_imports(source: str) -> list[str]:
    """Slurm's job-runner modules `source` imports (anywhere: top, functions, type-checking blocks)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name in SLURM_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            found += [n for n in names if n in SLURM_MODULES]
    return found


def branches_on_scheduler(source: str) -> list[int]:
    """Lines where `source` picks a code path by scheduler: an if / conditional expression / while /
    comprehension filter whose test reads a `.slurm` attribute, a "slurm" key or name, or calls a decider."""
    tests: list[ast.expr] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.If, ast.IfExp, ast.While)):
            tests.append(node.test)
        elif isinstance(node, ast.comprehension):
            tests += node.ifs
    lines = []
    for test in tests:
        for part in ast.walk(test):
            asks = (
                (isinstance(part, ast.Attribute) and "slurm" in part.attr.lower())
                or (isinstance(part, ast.Name) and "slurm" in part.id.lower())
                or (isinstance(part, ast.Constant) and isinstance(part.value, str) and part.value == "slurm")
                or (isinstance(part, ast.Call) and getattr(part.func, "attr", getattr(part.func, "id", ""))
                    in DECIDERS)
            )  # fmt: skip
            if asks:
                lines.append(test.lineno)
                break
    return lines


def test_the_checks_see_what_they_look_for() -> None:
    """The two walks below find an import of Slurm's modules and each way of asking "is it Slurm"."""
    assert slurm_imports("def f():\n    from radeonlab.jobs.track import slurm\n") == [
        "radeonlab.jobs.track.slurm"
    ]
    assert slurm_imports("import radeonlab.jobs.apply.slurm as s\n") == ["radeonlab.jobs.apply.slurm"]
    assert slurm_imports("from radeonlab.jobs.apply.submit import apply_plan\n") == []
    asking = "if job.slurm:\n  pass\nx = a if lab_of(t) else b\ny = [r for r in rows if r.get('slurm')]\n"
    assert branches_on_scheduler(asking) == [1, 3, 4]
    assert branches_on_scheduler("if job.scheduler_name:\n  pass\nz = job.slurm\n") == []


def test_only_the_scheduler_package_imports_slurms_job_runner_modules() -> None:
    found = {
        name: hits for name, path in outside_the_seam().items() if (hits := slurm_imports(path.read_text()))
    }
    assert not found, f"import jobs/scheduler (choose.py) instead: {found}"


def test_no_module_outside_the_scheduler_package_asks_which_scheduler() -> None:
    found = {
        name: lines
        for name, path in outside_the_seam().items()
        if (lines := branches_on_scheduler(path.read_text()))
    }
    assert not found, f"call the Scheduler protocol instead (jobs/scheduler/base.py): {found}"


def test_the_launcher_says_why_it_reads_slurms_environment() -> None:
    """The one module outside the package that names Slurm does so on the host, not as a choice."""
    text = (Path(product_modules()[LAUNCHER])).read_text()
    assert "not a choice of scheduler" in text


# --- choosing ------------------------------------------------------------------------------------------


def _targets(**hosts: tuple[tuple[str, ...], dict]) -> dict[str, HostTarget]:
    return {n: HostTarget(n, f"10.0.0.{i}", groups=g, data=d) for i, (n, (g, d)) in enumerate(hosts.items())}


ON = {"radeonlab_scheduler": "slurm"}
LAB = _targets(
    ctl=(("slurm_controller",), ON),
    ws1=(("slurm_nodes",), {**ON, "slurm_node_name": "gpu-a"}),
    solo=((), {}),
)
JOB = {"id": "x-20250331-232619-beef", "name": "x", "spec_file": "s.yaml", "created_at": "t", "host": "ws1"}


def test_the_inventory_chooses_the_scheduler_of_a_new_job() -> None:
    slurm = scheduler_for(LAB)
    assert isinstance(slurm, SlurmScheduler) and slurm.name == "slurm"
    assert slurm.lab is not None and slurm.lab.controller.name == "ctl"
    assert isinstance(scheduler_for(LAB, host="solo"), QueueScheduler)  # a built-in host, named
    assert isinstance(scheduler_for(LAB, host="ws1"), SlurmScheduler)
    assert isinstance(scheduler_for(_targets(ws1=((), {}))), QueueScheduler)
    assert scheduler_for(None).name == "builtin"  # no inventory: planning reports it after the spec
    with pytest.raises(SlurmError, match="no slurm_controller group"):
        scheduler_for(_targets(ws1=(("slurm_nodes",), ON)))


def test_each_scheduler_says_which_submit_options_it_takes() -> None:
    QueueScheduler().check_options(sweep=True, watch=True)
    with pytest.raises(InputError, match="not wired for Slurm"):
        scheduler_for(LAB).check_options(sweep=True, watch=False)
    scheduler_for(LAB).check_options(sweep=False, watch=False)


def test_a_jobs_record_chooses_the_scheduler_that_tracks_it() -> None:
    plain = JobRecord.from_dict(JOB)
    assert isinstance(scheduler_of(plain, LAB), QueueScheduler) and scheduler_of(plain).job_word(plain) == ""
    sent = JobRecord.from_dict({**JOB, "slurm": {"controller": "ctl", "candidates": ["ws1"], "job_id": "7"}})
    slurm = scheduler_of(sent, LAB)
    assert isinstance(slurm, SlurmScheduler) and slurm.lab is not None and slurm.info == sent.slurm
    assert scheduler_of(sent).job_word(sent) == "7"  # list's cell, without the inventory
    staged = JobRecord.from_dict({**JOB, "slurm": {"controller": "ctl", "candidates": ["ws1"]}})
    assert scheduler_of(staged).job_word(staged) == "ctl"
    # the inventory no longer names its controller: nothing to overlay, and cancel says why
    moved = JobRecord.from_dict({**JOB, "slurm": {"controller": "old-ctl", "candidates": ["ws1"]}})
    gone = scheduler_of(moved, LAB)
    queued = StateRecord(JobState.QUEUED)
    assert isinstance(gone, SlurmScheduler) and gone.lab is None
    assert gone.overlay(queued, moved).state is queued and gone.overlay(queued, moved).runs_on is None
    with pytest.raises(JobStateError, match="its Slurm controller old-ctl is no longer the inventory's"):
        gone.cancel(type("Handle", (), {"id": moved.id})())  # type: ignore[arg-type]


def test_the_built_in_queue_leaves_state_rows_and_hosts_as_they_are() -> None:
    queued = StateRecord(JobState.QUEUED)
    job = JobRecord.from_dict(JOB)
    assert QueueScheduler().overlay(queued, job).state is queued
    rows = [{"id": JOB["id"], "state": "queued", "slurm": ""}]
    assert fold_rows(rows, LAB, print) == rows  # no Slurm job among them: Slurm is not asked
    view = HostView("solo")
    describe_hosts(_targets(solo=((), {})), [view])  # no Slurm lab: nothing said, nothing asked
    assert (view.scheduler, view.scheduler_pending, view.no_stack_because) == ("", frozenset(), "")

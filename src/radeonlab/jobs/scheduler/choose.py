"""Which scheduler: asked once, here, and nowhere else.

`scheduler_for(targets, host)` when a job is planned (the inventory's `radeonlab_scheduler` key, of the named
host or, with none named, of any host); `scheduler_of(job, targets)` afterwards (the job's record says how
it was submitted: a `slurm` part, or none). The fleet-wide readings (`fleet`'s host words, `list`'s rows)
ask every scheduler, since one inventory may hold jobs of both. A new scheduler: a module beside slurm.py
and its lines in the functions below.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from radeonlab.contract.records import JobRecord
from radeonlab.jobs.apply.slurm import lab_of
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.fleet.probe import HostView
from radeonlab.jobs.scheduler.base import Rows, Say, Scheduler
from radeonlab.jobs.scheduler.queue import QueueScheduler
from radeonlab.jobs.scheduler.slurm import SlurmScheduler
from radeonlab.jobs.track.slurm import lab_for


def scheduler_for(targets: Mapping[str, HostTarget] | None, host: str | None = None) -> Scheduler:
    """The scheduler a new job goes through: Slurm when the named host (--host / radeonlab.host) says
    `radeonlab_scheduler: slurm`, or, with no host named, when any host does; else the built-in queue
    (also for an inventory that did not load: planning reports it after checking the spec). Refuses in one
    line Slurm without a slurm_controller group (SlurmError)."""
    lab = None if targets is None else lab_of(targets, host)
    return QueueScheduler() if lab is None else SlurmScheduler(lab)


def scheduler_of(job: JobRecord, targets: Mapping[str, HostTarget] | None = None) -> Scheduler:
    """The scheduler a submitted job went through, with the lab the inventory describes now (`targets`;
    without them, enough for the words of its record)."""
    if not job.slurm:
        return QueueScheduler()
    return SlurmScheduler(lab_for(targets, job.slurm) if targets is not None else None, job.slurm)


def every_scheduler() -> list[Scheduler]:
    """One of each, for the readings that cover the whole inventory."""
    return [QueueScheduler(), SlurmScheduler(None)]


def describe_hosts(targets: Mapping[str, HostTarget], views: Sequence[HostView]) -> None:
    for scheduler in every_scheduler():
        scheduler.describe_hosts(targets, views)


def fold_rows(rows: Rows, targets: Mapping[str, HostTarget], warn: Say) -> Rows:
    for scheduler in every_scheduler():
        rows = scheduler.fold_rows(rows, targets, warn)
    return rows

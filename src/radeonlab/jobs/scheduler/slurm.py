"""Slurm as the lab's scheduler (`radeonlab_scheduler: slurm`, docs/guide/slurm.md), behind the protocol.

The work is in the modules this one wraps: jobs/apply/slurm.py (plan on every candidate node, stage, sbatch),
jobs/track/slurm.py (squeue and the completion log over a job's state, where it runs, scancel) and
jobs/fleet/slurm.py (sinfo's word per host for `fleet`); jobs/plan/slurm.py holds their pure parts. Only
this package imports them. Sweeps and `submit --watch` are not wired for Slurm yet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from radeonlab.contract.parts import SlurmInfo
from radeonlab.contract.records import JobRecord, StateRecord
from radeonlab.errors import InputError, JobStateError, RadeonlabError, one_line
from radeonlab.jobs.apply.slurm import SlurmLab, SlurmPlan, apply_slurm, batch_script, lab_of, plan_slurm_job
from radeonlab.jobs.apply.submit import ProgressBar, SubmitResult
from radeonlab.jobs.fleet.context import Fleet
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.fleet.probe import HostView
from radeonlab.jobs.fleet.slurm import CONTROLLER, slurm_says
from radeonlab.jobs.scheduler.base import OpenJob, Overlaid, Planned, RankResult, Rows, Say
from radeonlab.jobs.track import slurm as slurm_track


@dataclass
class SlurmScheduler:
    """The inventory's Slurm lab (None when the inventory no longer names the job's controller), and the
    `slurm` part of a submitted job's record when the scheduler was read from one."""

    lab: SlurmLab | None
    info: SlurmInfo | None = None
    name = "slurm"

    def check_options(self, *, sweep: bool, watch: bool) -> None:
        if sweep or watch:
            raise InputError("--sweep and --watch are not wired for Slurm yet: submit each job, then look")

    def plan(
        self,
        spec: Path,
        fleet: Fleet,
        *,
        host: str | None,
        nodes: int | None,
        overrides: Sequence[str],
        strict: bool,
        allow_shared: bool,
        ask_blobs: bool,
        say: Say,
    ) -> SlurmPlan:
        """On every node Slurm may give the job (Slurm queues: allow_shared and the blob question do not
        apply; the host, when named, chose this lab)."""
        return plan_slurm_job(spec, fleet, self._lab(), nodes=nodes, overrides=overrides, strict=strict,
                              say=say)  # fmt: skip

    def preview(self, planned: Planned) -> tuple[dict[str, Any], list[str]]:
        script = batch_script(self._planned(planned))
        where = self._lab().controller.name
        return {"sbatch": script}, [f"  sbatch on {where}:", *(f"    {line}" for line in script.splitlines())]

    def submit(self, planned: Planned, fleet: Fleet, *, progress_bar: ProgressBar, say: Say) -> SubmitResult:
        return apply_slurm(self._planned(planned), fleet, progress_bar=progress_bar, say=say)

    def submitted_words(self, result: SubmitResult) -> list[str]:
        return [
            f"submitted {result.job_id} through Slurm: {result.state.summary()}",
            *(f"  {note}" for note in result.notes),
            f"  follow it: radeonlab status {result.job_id}  cancel: radeonlab cancel {result.job_id}",
        ]

    def overlay(self, state: StateRecord, job: JobRecord) -> Overlaid:
        """Slurm's word while the folder has not started; the host it runs on, if any."""
        if self.lab is None:
            return Overlaid(state)
        found = slurm_track.slurm_jobs(self.lab).get(job.id)
        return Overlaid(slurm_track.overlay(state, found), slurm_track.ran_on(self.lab, found))

    def cancel(self, handle: OpenJob) -> tuple[StateRecord, list[RankResult]]:
        """On every node it was staged on, then in Slurm (jobs/track/slurm.py cancel)."""
        if self.lab is None or self.info is None:
            ctl = self.info.controller if self.info else "?"
            raise JobStateError(f"{handle.id}: its Slurm controller {ctl} is no longer the inventory's")
        _word, done = slurm_track.cancel(handle.id, self.info, handle.targets, self.lab)
        handle.refresh()
        others = [RankResult(0, d.host, d.state, d.error) for d in done if d.host != handle.target.name]
        return handle.state, others

    def job_word(self, job: JobRecord) -> str:
        """Its Slurm id, or its controller until `fold_rows` asked Slurm."""
        return (job.slurm.job_id or job.slurm.controller) if job.slurm else ""

    def describe_hosts(self, targets: Mapping[str, HostTarget], views: Sequence[HostView]) -> None:
        """Each host's sinfo word and the jobs Slurm holds pending, from the whole inventory's controller
        (the lab as the deploy's groups make it, jobs/fleet/slurm.py)."""
        said = slurm_says(targets)
        for view in views:
            view.scheduler = said.words.get(view.name, "")
            view.scheduler_name = "Slurm" if view.scheduler else ""
            view.scheduler_pending = said.pending
            if view.scheduler.startswith(CONTROLLER):  # slurmctld alone: no GPU stack, no host record
                view.no_stack_because = f"{CONTROLLER} (no GPU stack)"

    def fold_rows(self, rows: Rows, targets: Mapping[str, HostTarget], warn: Say) -> Rows:
        """One row per Slurm job, with Slurm's word while it waits."""
        if not any(r.get("slurm") for r in rows):
            return rows
        try:
            lab = lab_of(targets)
            jobs = slurm_track.slurm_jobs(lab) if lab else None
        except RadeonlabError as exc:  # the hosts' rows still show; Slurm's word is missing
            warn(f"radeonlab: warning: Slurm not asked: {one_line(exc)}")
            jobs = None
        return slurm_track.fold(rows, jobs)

    def _lab(self) -> SlurmLab:
        if self.lab is None:
            raise JobStateError("no Slurm lab in this inventory")
        return self.lab

    @staticmethod
    def _planned(planned: Planned) -> SlurmPlan:
        if not isinstance(planned, SlurmPlan):
            raise TypeError(f"not a Slurm plan: {type(planned).__name__}")
        return planned

"""The built-in scheduler: radeonlab's own per-GPU queue (`radeonlab_scheduler: builtin`, the default).

The laptop places the job (jobs/plan/placement.py) and starts the host's launcher, which waits its turn on
the card (jobs/host/gpu_queue.py). Its state is the job folder's alone; cancel asks the launcher of every
rank. Sweeps and `submit --watch` are supported here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from radeonlab.contract.records import HostRecord, JobRecord, StateRecord
from radeonlab.jobs.apply.submit import ProgressBar, SubmitResult, apply_plan
from radeonlab.jobs.fleet.context import Fleet
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.fleet.observe import observe_job
from radeonlab.jobs.fleet.probe import HostView
from radeonlab.jobs.plan.plan import JobPlan, plan_job
from radeonlab.jobs.scheduler.base import OpenJob, Overlaid, Planned, RankResult, Rows, Say
from radeonlab.jobs.ssh.connection import Remote


@dataclass
class QueuePlan:
    """A job planned for the built-in queue: its plan alone (rank 0's host and each rank's GPU chosen)."""

    plan: JobPlan


class QueueScheduler:
    name = "builtin"

    def check_options(self, *, sweep: bool, watch: bool) -> None:
        return None  # both supported

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
    ) -> QueuePlan:
        job, views = observe_job(fleet, spec, os.environ, host=host, nodes=nodes, overrides=overrides,
                                 ask_blobs=ask_blobs)  # fmt: skip
        plan = plan_job(job, views, fleet.targets, inventory=fleet.inventory, host=host, nodes=nodes,
                        strict=strict, allow_shared=allow_shared, say=say)  # fmt: skip
        for node in plan.nodes:
            for note in [node.preflight.message] if node.preflight.fits is False else []:
                say(f"warning: {note}")
        return QueuePlan(plan)

    def preview(self, planned: Planned) -> tuple[dict[str, Any], list[str]]:
        return {}, []

    def submit(self, planned: Planned, fleet: Fleet, *, progress_bar: ProgressBar, say: Say) -> SubmitResult:
        plan = planned.plan
        say(f"{plan.job_id}: {plan.rank0.host}, {plan.rank0.rendered.why_precision}")
        return apply_plan(plan, fleet, progress_bar=progress_bar, say=say)

    def submitted_words(self, result: SubmitResult) -> list[str]:
        return [
            f"submitted {result.job_id} to {result.host}: {result.state.summary()}",
            f"  follow it: radeonlab watch {result.job_id}   results: radeonlab fetch {result.job_id}",
        ]

    def overlay(self, state: StateRecord, job: JobRecord) -> Overlaid:
        return Overlaid(state)  # the folder is the truth

    def cancel(self, handle: OpenJob) -> tuple[StateRecord, list[RankResult]]:
        """Every rank at once (each rank's launcher records the cancel before it signals)."""

        def cancel_on(remote: Remote, record: HostRecord) -> StateRecord:
            result = remote.tool("launcher", ["cancel", record.job_dir(handle.id).root])
            return StateRecord.from_dict(result.last_json())

        with ThreadPoolExecutor(max_workers=1) as pool:
            peers = pool.submit(handle.on_peers, cancel_on)
            state = cancel_on(handle.remote, handle.record)
            ranks = peers.result()
        handle.refresh()
        return state, ranks

    def job_word(self, job: JobRecord) -> str:
        return ""

    def describe_hosts(self, targets: Mapping[str, HostTarget], views: Sequence[HostView]) -> None:
        return None  # the probe's own readings say it all (GPUs, running and queued jobs)

    def fold_rows(self, rows: Rows, targets: Mapping[str, HostTarget], warn: Say) -> Rows:
        return rows  # one row per job already

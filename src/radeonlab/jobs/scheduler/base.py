"""What a scheduler does for radeonlab, as one protocol: plan a job, submit the plan, overlay its own word
on a job's state, cancel a job, describe the hosts it runs, fold its jobs in `list`.

The CLI verbs and the job handle get one `Scheduler` from choose.py (`scheduler_for` the inventory when a
job is planned, `scheduler_of` a job's record afterwards) and call these methods; none asks which
implementation it holds. Shaped like dstack's `Compute` and SkyPilot's `Backend`: the caller owns the
command, the implementation owns the calls to its system.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from radeonlab.contract.records import HostRecord, JobRecord, StateRecord

if TYPE_CHECKING:
    from radeonlab.jobs.apply.submit import ProgressBar, SubmitResult
    from radeonlab.jobs.fleet.context import Fleet
    from radeonlab.jobs.fleet.inventory import HostTarget
    from radeonlab.jobs.fleet.probe import HostView
    from radeonlab.jobs.plan.plan import JobPlan
    from radeonlab.jobs.ssh.connection import Remote

Say = Callable[[str], None]
Rows = list[dict[str, Any]]


@dataclass
class RankResult:
    """What an action did on one rank of a multi-node job (or one candidate node of a Slurm job)."""

    rank: int
    host: str
    state: StateRecord | None = None
    error: str | None = None


@dataclass(frozen=True)
class Overlaid:
    """A job's state as its scheduler shows it, and the host that runs it when the scheduler knows better
    than the folder read (None: the folder read is the one)."""

    state: StateRecord
    runs_on: str | None = None


class Planned(Protocol):
    """A job planned for one scheduler: the job's plan (what `submit --dry-run` prints), a value (the
    connections are the command's Fleet's)."""

    @property
    def plan(self) -> JobPlan: ...


class OpenJob(Protocol):
    """What a scheduler's cancel needs of a job the verbs opened (jobs/track/handle.py JobHandle)."""

    targets: dict[str, HostTarget]
    target: HostTarget
    remote: Remote
    record: HostRecord
    job: JobRecord
    state: StateRecord

    @property
    def id(self) -> str: ...

    def refresh(self) -> Any: ...

    def on_peers(self, action: Callable[[Remote, HostRecord], StateRecord | None]) -> list[RankResult]: ...


class Scheduler(Protocol):
    """One way jobs are queued onto the lab's GPUs."""

    name: str  # "builtin", "slurm": the inventory's radeonlab_scheduler word

    def check_options(self, *, sweep: bool, watch: bool) -> None:
        """Refuse, in one line (InputError), the submit options this scheduler does not support."""
        ...

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
    ) -> Planned:
        """Check the spec, probe the hosts it may use (over the fleet), plan the job; nothing is sent."""
        ...

    def preview(self, planned: Planned) -> tuple[dict[str, Any], list[str]]:
        """What `submit --dry-run` adds to the plan: keys of its JSON, lines of its text."""
        ...

    def submit(self, planned: Planned, fleet: Fleet, *, progress_bar: ProgressBar, say: Say) -> SubmitResult:
        """Send the job over the fleet's connections and start (or queue) it."""
        ...

    def submitted_words(self, result: SubmitResult) -> list[str]:
        """The lines `submit` prints once the job is in (where it went, how to follow it)."""
        ...

    def overlay(self, state: StateRecord, job: JobRecord) -> Overlaid:
        """The state to show for `job`, whose folder says `state`, and where it runs if not there."""
        ...

    def cancel(self, handle: OpenJob) -> tuple[StateRecord, list[RankResult]]:
        """Cancel the job on every host it may run on: rank 0's state, then one result per other host."""
        ...

    def job_word(self, job: JobRecord) -> str:
        """`list`'s scheduler cell for a job ("" for the built-in queue)."""
        ...

    def describe_hosts(self, targets: Mapping[str, HostTarget], views: Sequence[HostView]) -> None:
        """Write into each view what this scheduler says of its host (`fleet`), from the whole inventory."""
        ...

    def fold_rows(self, rows: Rows, targets: Mapping[str, HostTarget], warn: Say) -> Rows:
        """`list`'s rows with this scheduler's jobs shown once each, with its word while they wait."""
        ...

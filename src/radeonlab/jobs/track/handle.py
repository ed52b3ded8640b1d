"""A handle on one submitted job, used by every verb: open once, refresh, act on all its ranks.

`JobHandle.open(ref, inventory)` finds the job: `ref` is a job id, a unique prefix of one, or `@last` (the
newest job the laptop knows). The laptop's cache says which host to ask first; every other host of the
inventory is asked after it, so a lost cache never hides a job. A multi-node job is found on its rank 0 (its
folder holds the adapter); its peers are opened only when an action needs every rank. The handle keeps one
SSH connection to rank 0 for its whole life, and refreshes the local cache whenever it reads the host.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from radeonlab.contract.jobdir import JobDir
from radeonlab.contract.jobid import is_job_id
from radeonlab.contract.messages import ProbeJob
from radeonlab.contract.records import HostRecord, JobRecord, StateRecord
from radeonlab.errors import (
    InputError,
    JobNotFoundError,
    RadeonlabError,
    TransportError,
    one_line,
)
from radeonlab.jobs.fleet import store
from radeonlab.jobs.fleet.inventory import HostTarget, get_host, load_inventory
from radeonlab.jobs.fleet.probe import read_host, require_record
from radeonlab.jobs.scheduler.base import RankResult
from radeonlab.jobs.scheduler.choose import scheduler_of
from radeonlab.jobs.ssh.connection import Remote, connect
from radeonlab.jobs.track import follow

LAST = "@last"
Say = Callable[[str], None]


def resolve_ref(ref: str, conn_rows: list[store.JobRow]) -> str:
    """A job id from what the user typed: the id itself, a unique prefix, or @last (from the local cache)."""
    if ref == LAST:
        if not conn_rows:
            raise JobNotFoundError(
                "@last: no job is known on this laptop yet (radeonlab list reads the hosts)"
            )
        return conn_rows[0].id
    if is_job_id(ref):
        return ref
    if not ref or any(c not in "abcdefghijklmnopqrstuvwxyz0123456789-" for c in ref):
        raise InputError(f"not a radeonlab job id: {ref!r} (ids look like demo-20250101-120000-ab12)")
    matches = [r.id for r in conn_rows if r.id.startswith(ref)]
    if len(matches) > 1:
        raise InputError(
            f"{ref!r} matches {len(matches)} jobs ({', '.join(matches[:4])}...): type more of the id"
        )
    if not matches:
        raise JobNotFoundError(
            f"no job id starting with {ref!r} is known on this laptop (try `radeonlab list`)"
        )
    return matches[0]


@dataclass
class JobHandle:
    """An open connection to the host that holds a job's rank 0, and what it last said about the job."""

    inventory: str
    targets: dict[str, HostTarget]
    target: HostTarget
    remote: Remote
    record: HostRecord
    job: JobRecord
    state: StateRecord
    alive: bool | None
    peers_: dict[int, HostTarget] = field(default_factory=dict)

    # --- opening -----------------------------------------------------------------------------------------
    @classmethod
    def open(cls, ref: str, inventory: str | Path, host: str | None = None) -> JobHandle:
        """Find the job (cached host first, then every host) and keep that connection open."""
        with contextlib.closing(store.connect()) as conn:
            rows = store.list_jobs(conn)
            job_id = resolve_ref(ref, rows)
            row = store.get(conn, job_id)
        targets = load_inventory(inventory)
        if host:
            candidates = [get_host(targets, host)]
        else:
            first = [targets[row.host]] if row and row.host in targets else []
            candidates = first + [t for t in targets.values() if t not in first]
        unreachable: list[str] = []
        for target in candidates:
            try:
                remote = connect(target)
            except TransportError as exc:  # an unreachable host must not hide the job on another
                unreachable.append(f"{target.name} ({one_line(exc)})")
                continue
            try:
                view = read_host(remote, jobs="full", ids=[job_id])
                found = [j for j in view.jobs if j.id == job_id and j.rank == 0]
                if not found:
                    remote.close()
                    continue
                record = require_record(view, str(inventory))
                handle = cls(str(inventory), targets, target, remote, record, *_parse(found[0]))
            except BaseException:
                remote.close()
                raise
            if not host:
                node = handle.overlay()
                if node and node != target.name:  # its scheduler ran it elsewhere: that folder is the truth
                    handle.close()
                    return cls.open(job_id, inventory, node)
            handle.cache()
            return handle
        where = ", ".join(t.name for t in candidates)
        gone = f"; unreachable: {'; '.join(unreachable)}" if unreachable else ""
        error = JobNotFoundError(f"no job {job_id} on {where}{gone}")
        if unreachable:
            error.exit_code = 1  # it may be on a host that did not answer: a host failure, not bad input
        raise error

    def close(self) -> None:
        self.remote.close()

    def overlay(self) -> str | None:
        """Show the job's scheduler's word over its folder's (Slurm's while the folder has not started); the
        host it runs on, when the scheduler knows it runs elsewhere."""
        said = scheduler_of(self.job, self.targets).overlay(self.state, self.job)
        self.state = said.state
        return said.runs_on

    def __enter__(self) -> JobHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- reading -----------------------------------------------------------------------------------------
    @property
    def id(self) -> str:
        return self.job.id

    @property
    def dir(self) -> JobDir:
        return self.record.job_dir(self.job.id)

    def refresh(self) -> JobHandle:
        view = read_host(self.remote, jobs="full", ids=[self.id])
        found = [j for j in view.jobs if j.id == self.id]
        if not found:
            raise JobNotFoundError(f"{self.target.name} has no job {self.id} any more")
        self.job, self.state, self.alive = _parse(found[0])
        self.cache()
        return self

    def cache(self) -> None:
        with contextlib.closing(store.connect()) as conn:
            store.upsert_from_host(
                conn, store.HostJob(self.target.name, self.dir.root, self.job.to_dict(), self.state.to_dict())
            )

    def link(self, say: Say) -> follow.Link:
        """The handle's connection as one that comes back (watch, logs -f)."""
        return follow.Link(self.target, self.remote, say)

    def events(
        self,
        say: Say,
        files: dict[str, int],
        *,
        keep_going: bool,
        gpus_every: float = 0.0,
        interval: float | None = None,
    ) -> Iterator[follow.Event]:
        """The job's stream (jobs/track/follow.py); the handle follows a reconnect."""
        link = self.link(say)
        try:
            for event in follow.events(
                link, self.dir.root, files, follow=keep_going, gpus_every=gpus_every, interval=interval
            ):
                if event.kind == "state" and event.state is not None:
                    self.state, self.alive = event.state, event.alive
                    if event.job is not None:
                        self.job = event.job
                yield event
        finally:
            self.remote = link.remote

    # --- every rank --------------------------------------------------------------------------------------
    def peers(self) -> list[tuple[int, HostTarget]]:
        return [(rank, get_host(self.targets, name)) for rank, name in self.job.peers()]

    def on_peers(self, action: Callable[[Remote, HostRecord], StateRecord | None]) -> list[RankResult]:
        """Run `action` on every other rank in parallel: one result each (an unreachable rank is named)."""

        def one(rank: int, target: HostTarget) -> RankResult:
            try:
                with connect(target) as remote:
                    record = require_record(read_host(remote, jobs="none"), self.inventory)
                    return RankResult(rank, target.name, action(remote, record))
            except RadeonlabError as exc:
                return RankResult(rank, target.name, error=one_line(exc))

        peers = self.peers()
        if not peers:
            return []
        with ThreadPoolExecutor(max_workers=len(peers)) as pool:
            return list(pool.map(lambda p: one(*p), peers))

    def peer_states(self) -> list[RankResult]:
        """Each other rank's state as its host reads it now (a rank whose process is gone reads as ended)."""

        def state_on(remote: Remote, _record: HostRecord) -> StateRecord:
            found = [j for j in read_host(remote, jobs="full", ids=[self.id]).jobs if j.id == self.id]
            if not found:
                raise JobNotFoundError(f"{remote.target.name} has no job {self.id} any more")
            return _parse(found[0])[1]

        return self.on_peers(state_on)

    def cancel(self) -> tuple[StateRecord, list[RankResult]]:
        """Cancel the job everywhere it may run, as its scheduler does (jobs/scheduler): rank 0's state, then
        one result per other rank or candidate node."""
        return scheduler_of(self.job, self.targets).cancel(self)


def _parse(item: ProbeJob) -> tuple[JobRecord, StateRecord, bool | None]:
    if item.job is None:  # read_host(jobs="full") asked for the record
        raise JobNotFoundError(f"the probe gave no job record for {item.id}")
    return item.job, item.reconciled(), item.alive

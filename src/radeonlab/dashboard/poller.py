"""The dashboard's view of the lab, kept current in the background: one SSH connection per host, shared by
every browser tab.

One thread per host owns its connection (jobs/ssh/connection.py, the CLI's transport): it probes the host
every `probe_s` (the probe tool `radeonlab fleet` runs: record, GPU readings, job folders) and, for every job
whose processes live there, keeps one follower thread reading the job's stream (jobs/host/stream.py, the one
`radeonlab watch` reads) through a JobHandle opened on that same connection. A finished job is read once
(one round of its stream) for its chart and log tail. A lost connection marks the host unreachable (with the
error) and is re-opened every `reconnect_s`; followers then resume from the offsets they had, so the page's
series neither repeat nor skip. Browsers never reach a host: they read `Lab.snapshot()`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from radeonlab.contract.records import HostRecord, StateRecord
from radeonlab.dashboard.model import RESULTS, VIEW, JobView, host_row
from radeonlab.errors import JobNotFoundError, RadeonlabError, TransportError, one_line
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.fleet.listing import ListedJob, jobs_of
from radeonlab.jobs.fleet.probe import HostView, parse_probe, require_record
from radeonlab.jobs.ssh.connection import Remote, connect
from radeonlab.jobs.track import follow
from radeonlab.jobs.track.handle import JobHandle

POLL: dict[str, float] = {
    "probe_s": 5.0,  # how often each host is asked for its record, GPU readings and job folders
    "probe_timeout_s": 20.0,  # a probe that takes longer marks the host unreachable
    "reconnect_s": 5.0,  # between attempts to reach a host that is down
    "gpus_every_s": 5.0,  # GPU readings in a running job's stream
    "finished_per_host": 10,  # newest finished jobs per host read once for their charts
}
log = logging.getLogger("radeonlab.dashboard")


class _NoReconnect(follow.Link):
    """A job stream on the host's shared connection: a lost connection ends the stream (the host's thread
    re-opens the one connection; the CLI's Link would open a second)."""

    def reconnect(self, why: TransportError) -> Remote:
        raise why


class SharedHandle(JobHandle):
    """The CLI's JobHandle, on the host thread's connection (one per host, shared)."""

    def link(self, say: follow.Say) -> follow.Link:
        return _NoReconnect(self.target, self.remote, say)


@dataclass
class HostState:
    target: HostTarget
    view: HostView
    remote: Remote | None = None
    record: HostRecord | None = None
    followers: dict[str, threading.Thread] = field(default_factory=dict)
    loaded: set[str] = field(default_factory=set)  # finished jobs read once


class Lab:
    """Everything the page shows; `version` grows with every change (the page's server-sent events)."""

    def __init__(
        self, inventory: str, targets: dict[str, HostTarget], selected: Sequence[HostTarget]
    ) -> None:
        self.inventory, self.targets = inventory, targets
        self.hosts = {
            t.name: HostState(t, HostView(t.name, reachable=False, error="not asked yet")) for t in selected
        }
        self.jobs: dict[str, JobView] = {}
        self.offsets: dict[str, dict[str, int]] = {}
        self.lock = threading.Lock()
        self.version = 0
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []

    # --- what the page reads ---------------------------------------------------------------------------
    def bump(self) -> None:
        self.version += 1

    def snapshot(self) -> dict[str, Any]:
        now = datetime.now(UTC)
        with self.lock:
            jobs = sorted(self.jobs.values(), key=lambda j: j.created_at or "", reverse=True)
            return {
                "version": self.version,
                "hosts": [host_row(h.view) for h in self.hosts.values()],
                "jobs": [j.summary(now) for j in jobs],
            }

    def job_detail(self, job_id: str, since: int = 0) -> dict[str, Any] | None:
        with self.lock:
            view = self.jobs.get(job_id)
            return view.detail(since) if view else None

    # --- the threads -----------------------------------------------------------------------------------
    def start(self) -> None:
        for state in self.hosts.values():
            thread = threading.Thread(target=self._host_loop, args=(state,), name=f"host-{state.target.name}")
            thread.daemon = True
            thread.start()
            self.threads.append(thread)

    def stop(self) -> None:
        self.stopping.set()
        for state in self.hosts.values():
            if state.remote is not None:
                state.remote.close()

    def _host_loop(self, state: HostState) -> None:
        while not self.stopping.is_set():
            try:
                if state.remote is None or not state.remote.is_active:
                    state.remote = connect(state.target)
                self._probe(state)
                wait = POLL["probe_s"]
            except RadeonlabError as exc:
                self._unreachable(state, one_line(exc))
                wait = POLL["reconnect_s"]
            except Exception as exc:  # a bug must not end the host's thread: show it, try again
                log.exception("host %s", state.target.name)
                self._unreachable(state, f"{type(exc).__name__}: {one_line(exc)}")
                wait = POLL["reconnect_s"]
            self.stopping.wait(wait)

    def _unreachable(self, state: HostState, error: str) -> None:
        if state.remote is not None:
            state.remote.close()
            state.remote = None
        with self.lock:
            state.view = HostView(state.target.name, reachable=False, error=error)
            self.bump()

    def _probe(self, state: HostState) -> None:
        assert state.remote is not None
        answer = state.remote.tool("probe", ["--jobs", "full"], timeout=POLL["probe_timeout_s"]).last_json()
        view = parse_probe(state.target.name, answer)
        record = view.record
        listed = jobs_of(view)  # a multi-node job once, on its rank 0 (the listing service `list` uses)
        with self.lock:
            state.view, state.record = view, record
            for job in listed:
                known = self.jobs.get(job.job.id)
                if known is None:
                    self.jobs[job.job.id] = JobView.of(state.target.name, job.job, job.state, job.alive)
                elif job.job.id not in state.followers:
                    known.set_job(job.job, job.state, job.alive)
            self.bump()
        if record is None:
            return
        for job in (j for j in listed if j.alive):
            thread = state.followers.get(job.job.id)
            if thread is None or not thread.is_alive():
                self._follow(state, job, keep_going=True)
        finished = sorted((j for j in listed if not j.alive), key=lambda j: j.job.created_at, reverse=True)
        for job in finished[: int(POLL["finished_per_host"])]:
            if job.job.id not in state.loaded and job.job.id not in state.followers:
                state.loaded.add(job.job.id)
                self._follow(state, job, keep_going=False)

    def handle(self, state: HostState, job: ListedJob) -> SharedHandle:
        assert state.remote is not None and state.record is not None
        return SharedHandle(self.inventory, self.targets, state.target, state.remote, state.record, job.job,
                            job.state, job.alive)  # fmt: skip

    def _follow(self, state: HostState, job: ListedJob, keep_going: bool) -> None:
        handle = self.handle(state, job)
        files = self.offsets.setdefault(
            handle.id,
            {follow.TRAINER_LOG: 0, follow.TRAIN_LOG: -int(VIEW["log_tail_bytes"]), RESULTS: 0},
        )

        def run() -> None:
            say = lambda m: log.info("%s: %s", handle.id, m)  # noqa: E731
            try:
                for event in handle.events(
                    say, files, keep_going=keep_going, gpus_every=POLL["gpus_every_s"] if keep_going else 0.0
                ):
                    with self.lock:
                        view = self.jobs.get(handle.id)
                        if view is not None:
                            view.apply(event)
                            self.bump()
                    if self.stopping.is_set():
                        return
            except RadeonlabError as exc:  # the host's thread sees the lost connection and resumes us
                log.info("%s: stream ended: %s", handle.id, one_line(exc))
            finally:
                if keep_going and state.followers.get(handle.id) is threading.current_thread():
                    state.followers.pop(handle.id, None)

        thread = threading.Thread(target=run, name=f"job-{handle.id}", daemon=True)
        if keep_going:
            state.followers[handle.id] = thread
        thread.start()

    # --- acting ----------------------------------------------------------------------------------------
    def cancel(self, job_id: str) -> StateRecord:
        """Cancel a job through its host's connection (every rank of a multi-node job), as `cancel` does."""
        with self.lock:
            view = self.jobs.get(job_id)
            state = self.hosts.get(view.host) if view else None
            job = next((j for j in jobs_of(state.view) if j.job.id == job_id), None) if state else None
        if state is None or job is None:
            raise JobNotFoundError(f"no job {job_id} on the dashboard's hosts")
        if state.remote is None or state.record is None:
            raise TransportError(f"{state.target.name} is not reachable now: {state.view.error}")
        require_record(state.view, self.inventory)
        new_state, ranks = self.handle(state, job).cancel()
        failed = [f"rank {r.rank} on {r.host}: {r.error}" for r in ranks if r.error]
        if failed:
            raise TransportError(f"{job_id}: cancelled on rank 0; not on {'; '.join(failed)}")
        return new_state

"""The jobs a host holds, read from its job folders (the truth), in one round trip per host.

A small python3 snippet on the host reads every <jobs_dir>/<id>/job.json + state.json and asks the job's
own launcher.py (the same code that wrote the state) whether its processes are alive; the laptop then
reconciles ("running" with nothing alive = failed, process gone) and caches the result in SQLite.
"""

from __future__ import annotations

import contextlib
import json
import posixpath
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from radeonlab.jobs.apply import launch
from radeonlab.jobs.fleet import store
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.ssh.connection import SETTINGS as TRANSPORT_SETTINGS
from radeonlab.jobs.ssh.connection import Remote

from radeonlab.contract.records import JobPaths, StateRecord
from radeonlab.errors import JobNotFoundError

# stdin {"jobs_dir", "ids": [...] | null} -> {"jobs": [{"id", "job", "state", "alive"}]}
_READ_JOBS = r"""
import importlib.util, json, os, sys
req = json.load(sys.stdin)
root = req["jobs_dir"]
ids = req["ids"]
if ids is None:
    ids = sorted(os.listdir(root)) if os.path.isdir(root) else []
def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
out = []
for job_id in ids:
    d = os.path.join(root, job_id)
    job = load(os.path.join(d, "job.json"))
    if job is None:
        continue
    state = load(os.path.join(d, "state.json")) or {"state": "queued"}
    alive = None
    launcher = os.path.join(d, "launcher.py")
    if os.path.exists(launcher):
        spec = importlib.util.spec_from_file_location("radeonlab_launcher_%d" % len(out), launcher)
        mod = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(mod)
            alive = mod.pid_alive(state.get("pid"), "launcher.py") or mod.group_alive(state.get("pgid"))
        except Exception:
            alive = None
    out.append({"id": job_id, "job": job, "state": state, "alive": alive})
print(json.dumps({"jobs": out}))
"""


@dataclass
class HostJobState:
    """One job as its host reports it, reconciled."""

    host_job: store.HostJob
    state: StateRecord
    alive: bool | None

    @property
    def id(self) -> str:
        return str(self.host_job.job.get("id"))


def read_jobs(remote: Remote, jobs_dir: str, ids: Iterable[str] | None = None) -> list[HostJobState]:
    """Every job under `jobs_dir` (or just `ids`), with its reconciled state."""
    request = {"jobs_dir": jobs_dir, "ids": list(ids) if ids is not None else None}
    result = remote.run(
        [TRANSPORT_SETTINGS["remote_python"], "-c", _READ_JOBS], stdin_text=json.dumps(request)
    )
    found = json.loads(result.stdout.strip().splitlines()[-1])["jobs"]
    out = []
    for item in found:
        state = StateRecord.from_dict(item["state"])
        if item["alive"] is not None:
            state = launch.reconcile(state, item["alive"])
        host_job = store.HostJob(
            host=remote.target.name,
            remote_dir=posixpath.join(jobs_dir, item["id"]),
            job=item["job"],
            state={**item["state"], **state.to_dict()},
        )
        out.append(HostJobState(host_job, state, item["alive"]))
    return out


def read_job(remote: Remote, jobs_dir: str, job_id: str) -> HostJobState:
    """One job; JobNotFoundError when the host does not have it."""
    found = read_jobs(remote, jobs_dir, [job_id])
    if not found:
        raise JobNotFoundError(f"{remote.target.name} has no job {job_id} (in {jobs_dir})")
    return found[0]


def job_paths(record: dict[str, Any], job_id: str) -> JobPaths:
    return JobPaths.for_job(record["jobs_dir"], job_id)


def candidate_hosts(job_id: str, targets: dict[str, HostTarget]) -> list[HostTarget]:
    """Where to look for a job: the host the local cache names first, then every other host."""
    with contextlib.closing(store.connect()) as conn:
        row = store.get(conn, job_id)
    first = [targets[row.host]] if row and row.host in targets else []
    return first + [t for t in targets.values() if t not in first]

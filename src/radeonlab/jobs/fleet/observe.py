"""Observe: what a submit learns before it plans, the laptop's side first, then one probe per host.

The laptop's side (jobs/plan/inputs.py): the spec checked, the model resolved, the uploads hashed, the
environment split. From those, what each host's probe must also answer (the spec's folders there, which
uploads its store holds, whether its model cache holds the model) and which hosts to ask: the named ones, or
every candidate of placement. Then one probe per host over the command's Fleet. `plan_job` (pure) reads the
result; `apply_plan` uses the Fleet's connections.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path

from radeonlab.contract.parts import CodeDigest
from radeonlab.jobs.fleet.context import Fleet
from radeonlab.jobs.fleet.view import HostView
from radeonlab.jobs.plan.inputs import JobInputs, candidates, load_checked, prepare, probe_ask
from radeonlab.jobs.plan.placement import in_group
from radeonlab.jobs.plan.plan import Clock
from radeonlab.jobs.plan.sweep import combinations, parse_sweeps
from radeonlab.jobs.ssh import hostcode

Views = dict[str, HostView]


def code_digest() -> CodeDigest:
    """radeonlab's host code as the connection ships it (job.json `code`)."""
    return CodeDigest(hostcode.digest(), hostcode.file_digests())


def observe_job(
    fleet: Fleet,
    spec_path: str | Path,
    environ: Mapping[str, str],
    *,
    host: str | None = None,
    nodes: int | None = None,
    overrides: Sequence[str] = (),
    ask_blobs: bool = True,
) -> tuple[JobInputs, Views]:
    """One job's inputs and the views of the hosts it may use (see the module docstring)."""
    clock = Clock()
    checked = load_checked(spec_path, overrides)  # a bad spec is refused before the inventory is read
    clock.lap("checks")
    targets = fleet.targets
    clock.lap("inventory")
    job = prepare(spec_path, targets, environ, code_digest(), spec=checked)
    clock.lap("model and hashing")
    hosts, named = candidates(job, targets, host, nodes)
    for target in hosts if named else []:  # placement's candidates are connected to in its parallel probe
        fleet.remote(target.name)
    clock.lap("connect")
    views = fleet.observe(hosts, probe_ask(job, ask_blobs), named=named)
    clock.lap("host record")
    job.timings.update(clock.laps)
    return job, views


def observe_sweep(
    fleet: Fleet,
    spec_path: str | Path,
    sweeps: Sequence[str],
    environ: Mapping[str, str],
    *,
    host: str | None = None,
    nodes: int | None = None,
    overrides: Sequence[str] = (),
    ask_blobs: bool = True,
) -> tuple[list[JobInputs], Views]:
    """Every job of a sweep (every value checked before any host is asked) and one probe of each host any
    of them may use, asked what all of them need."""
    combos = [[*overrides, *combo] for combo in combinations(parse_sweeps(sweeps, overrides))]
    checked = [load_checked(spec_path, combo) for combo in combos]
    code = code_digest()
    jobs = [prepare(spec_path, fleet.targets, environ, code, spec=c) for c in checked]
    hosts, named = candidates(jobs[0], fleet.targets, host, nodes)
    if not named:  # a sweep may vary the host group too: every group's candidates
        hosts = [t for t in fleet.targets.values() if any(in_group(t, j.asks.host_group) for j in jobs)]
    ask = functools.reduce(lambda a, b: a.merged(b), (probe_ask(j, ask_blobs) for j in jobs))
    return jobs, fleet.observe(hosts, ask, named=named)

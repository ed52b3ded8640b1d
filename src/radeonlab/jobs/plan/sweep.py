"""Sweeps: `radeonlab submit SPEC --sweep learning_rate=1e-4,5e-5 [--sweep lora_rank=8,16]` plans one job per
combination of values (the product of every --sweep), each a plain `key=value` override recorded in its
job.json, and places them across the fleet.

All pure. Every job's inputs are made (a value that fails the checks refuses the whole sweep) and the hosts
probed once for all of them (jobs/fleet/observe.py) before `plan_sweep` plans every job over those views:
each job is an ordinary `plan_job` (jobs/plan/plan.py). Where no host is named, each job is judged by
placement's own rules
(jobs/plan/placement.py `judge`, with that job's overrides: a bigger batch may not fit where a smaller one
does) and given the best host once the sweep's earlier jobs are counted in the queues (`spread`): two jobs
on two free hosts run side by side, a third queues behind the first. A named host (or a multi-node job,
placed by plan_job) takes every job of the sweep; its GPU queue runs them one after the other.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from radeonlab.errors import InputError, PlacementError
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.fleet.view import CPU_SLOT, HostView
from radeonlab.jobs.plan.inputs import JobInputs
from radeonlab.jobs.plan.placement import RULE, Decision, judge
from radeonlab.jobs.plan.plan import JobPlan, NodePlan, plan_job

SWEEP: dict[str, int] = {"max_jobs": 64}  # a typo in a product of --sweep lists must not flood the fleet
Say = Callable[[str], None]


def parse_sweeps(items: Sequence[str], overrides: Sequence[str] = ()) -> list[tuple[str, list[str]]]:
    """`key=v1,v2` items as (key, values), in order. InputError for a malformed item, an empty value, a key
    swept twice, or a key also given as a plain `key=value` override."""
    fixed = {o.split("=", 1)[0].strip() for o in overrides if "=" in o}
    out: list[tuple[str, list[str]]] = []
    for item in items:
        key, eq, raw = item.partition("=")
        key = key.strip()
        values = [v.strip() for v in raw.split(",")]
        if not eq or not key:
            raise InputError(f"--sweep {item!r}: expected KEY=VALUE1,VALUE2 (e.g. learning_rate=1e-4,5e-5)")
        if any(not v for v in values):
            raise InputError(f"--sweep {item!r}: an empty value (values are separated by commas)")
        if key in fixed or key in (k for k, _ in out):
            raise InputError(f"--sweep {item!r}: {key} is already given (once, as a sweep or as KEY=VALUE)")
        if len(set(values)) != len(values):
            raise InputError(f"--sweep {item!r}: a value is repeated")
        out.append((key, values))
    return out


def combinations(sweeps: Sequence[tuple[str, list[str]]]) -> list[list[str]]:
    """Every combination as `key=value` overrides (the first --sweep varies slowest)."""
    keys = [k for k, _ in sweeps]
    product = list(itertools.product(*(values for _, values in sweeps)))
    if len(product) > SWEEP["max_jobs"]:
        raise InputError(
            f"the sweep makes {len(product)} jobs, more than {SWEEP['max_jobs']}: sweep fewer values"
        )
    return [[f"{k}={v}" for k, v in zip(keys, combo, strict=True)] for combo in product]


def spread(per_job: Sequence[Sequence[Decision]]) -> list[Decision]:
    """For each job in order, the accepted host that ranks best (placement's rule) once the sweep's earlier
    jobs are counted in that host's queue. PlacementError when no host accepts a job."""
    taken: Counter[str] = Counter()
    chosen = []
    for n, decisions in enumerate(per_job, 1):
        accepted = [d for d in decisions if d.accepted]
        if not accepted:
            why = "; ".join(d.line() for d in decisions) or "the inventory has no host"
            raise PlacementError(f"no host fits job {n} of the sweep: {why}", list(decisions))
        best = min(accepted, key=lambda d: (not d.has_card, d.queue + taken[d.host], -d.free_memory, d.host))
        taken[best.host] += 1
        chosen.append(best)
    return chosen


def place_sweep(
    jobs: Sequence[JobInputs], views: Mapping[str, HostView], targets: Mapping[str, HostTarget]
) -> tuple[list[Decision], list[int]]:
    """The host of each job (over the one probe of the hosts) and how many of the sweep's earlier jobs it
    holds."""
    in_order = [views.get(n) or HostView(n, reachable=False, error="not probed") for n in targets]
    chosen = spread([[judge(v, targets[v.name], job.asks) for v in in_order] for job in jobs])
    before = [sum(1 for d in chosen[:i] if d.host == c.host) for i, c in enumerate(chosen)]
    return chosen, before


def queue_in_sweep(plans: Sequence[JobPlan]) -> None:
    """Set each node's `after`: the sweep's earlier jobs placed on the same host and GPU (or both on its
    CPU). The host's GPU queue is first come, first served and the jobs are started in order, so those run
    first; the live queue counted at planning time (NodePlan.queue) does not hold them yet."""

    def slots(node: NodePlan) -> set[str]:
        return {str(g.index) for g in node.gpus} or {CPU_SLOT}

    for i, plan in enumerate(plans):
        for node in plan.nodes:
            node.after = [
                earlier.job_id
                for earlier in plans[:i]
                if any(n.host == node.host and slots(n) & slots(node) for n in earlier.nodes)
            ]


def plan_sweep(
    jobs: Sequence[JobInputs],
    views: Mapping[str, HostView],
    targets: Mapping[str, HostTarget],
    *,
    inventory: str | Path = "",
    host: str | None = None,
    nodes: int | None = None,
    strict: bool = False,
    allow_shared: bool = False,
    say: Say = print,
) -> list[JobPlan]:
    """One JobPlan per combination (see the module docstring), from the jobs' inputs and the hosts' views."""
    named = jobs[0].wanted(host)
    multi = jobs[0].count(nodes) > 1
    placed: list[tuple[str | None, str]] = [(host, "")] * len(jobs)
    if not named and not multi:
        chosen, before = place_sweep(jobs, views, targets)
        placed = [
            (d.host, f"sweep placement: {d.reason}" + (f", after {b} job(s) of this sweep" if b else ""))
            for d, b in zip(chosen, before, strict=True)
        ]
        say(f"placement: {len(jobs)} jobs over {', '.join(sorted({d.host for d in chosen}))} ({RULE})")
    plans: list[JobPlan] = []
    for job, (where, why) in zip(jobs, placed, strict=True):
        plan = plan_job(job, views, targets, inventory=inventory, host=where, nodes=nodes, strict=strict,
                        allow_shared=allow_shared, say=say)  # fmt: skip
        if why:
            plan.rank0.placed = why
        plans.append(plan)
    queue_in_sweep(plans)
    return plans

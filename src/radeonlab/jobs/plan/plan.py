"""Plan, then apply: `plan_job` decides everything a job will be, from values, and sends nothing.

Observe, plan, apply. Observing is the laptop's own inputs (jobs/plan/inputs.py: the checked spec, the
model, the uploads hashed, the environment) and one probe of each host the job may use (jobs/fleet/observe.py,
over the connections of the command's Fleet, jobs/fleet/context.py): each host's record, GPUs, queue, the
spec's folders there, the uploads its store holds and whether its model cache holds the model. `plan_job`
turns those values into a typed JobPlan: the host(s) and why (named, or placement over the same views), each
host's record, the rendered config and every key radeonlab changed, the VRAM estimate, the files to upload
and how many bytes the hosts still need (content-addressed), the queue position, the environment and the job
record. It opens no connection (unit-tested without hosts) and the plan holds none: `dataclasses.asdict`
walks it; the secret values are a `Secrets` kept apart from its fields (`secrets()`), never serialised. A
single-node job is a plan of one NodePlan; multi-node is rank arithmetic over the same plan
(jobs/plan/nodes.py), not a second flow. `submit --dry-run` prints it; `apply_plan` (jobs/apply/submit.py)
carries it out over the Fleet's connections.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import InitVar, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from radeonlab.contract.jobdir import JobDir
from radeonlab.contract.jobid import new_job_id
from radeonlab.contract.parts import CodeDigest, ModelRef, Nodes
from radeonlab.contract.records import Attempt, GpuRecord, HostRecord, JobRecord
from radeonlab.contract.remedy import Remedy
from radeonlab.errors import ChecksFailedError, InputError, ModelError, PlacementError
from radeonlab.jobs.apply import secrets
from radeonlab.jobs.fleet.inventory import HostTarget, get_host
from radeonlab.jobs.fleet.view import CPU_SLOT, HostView, require_record
from radeonlab.jobs.host.remedies import STEP_KEYS
from radeonlab.jobs.plan import model as model_module
from radeonlab.jobs.plan import nodes as nodes_module
from radeonlab.jobs.plan import preflight
from radeonlab.jobs.plan.inputs import JobInputs, model_revision
from radeonlab.jobs.plan.placement import (
    Asks,
    card_problems,
    estimate_train,
    free_memory,
    say_decisions,
)
from radeonlab.jobs.plan.render import Rendered, render
from radeonlab.jobs.plan.uploads import Upload
from radeonlab.jobs.spec import files as config_files
from radeonlab.jobs.spec import lf_args
from radeonlab.jobs.spec import needs as needs_module
from radeonlab.jobs.spec import paths as spec_paths
from radeonlab.jobs.spec.load import Spec
from radeonlab.jobs.spec.problems import Problem

Say = Callable[[str], None]
SECRET_SHOWN = "(secret: sent in env.secret only)"  # where the plan's copy of the spec held a secret


@dataclass
class NodePlan:
    """One host's part of a job."""

    rank: int
    host: str
    address: str
    record: HostRecord
    gpus: list[GpuRecord]
    job: JobDir
    rendered: Rendered
    env: dict[str, str]  # the plain environment job.json records (secrets go to env.secret only)
    uploads: list[Upload]
    preflight: preflight.Preflight
    queue: int  # jobs queued or running on the GPU this job would use
    placed: str  # why this host
    present: set[str] | None = None  # contents the host already holds (None: not asked)
    after: list[str] = field(default_factory=list)  # this sweep's earlier jobs on the same GPU (run first)
    nodes: Nodes | None = None  # job.json `nodes` of a multi-node job

    @property
    def bytes_to_send(self) -> int | None:
        if self.present is None:
            return None
        unique = {u.local.sha256: u.local.size for u in self.uploads}
        return sum(size for sha, size in unique.items() if sha not in self.present)


@dataclass
class JobPlan:
    """Everything a job will be, decided; nothing sent yet. A value: no connection, no secret value among
    its fields (`secret_values` is taken apart, see `secrets()`), so `dataclasses.asdict` serialises it."""

    job_id: str
    spec: Spec
    created_at: str
    model: model_module.ModelInfo
    nodes: list[NodePlan]
    problems: list[Problem]  # warnings and notes of the checks (errors refused the plan)
    secret_names: list[str]
    code: CodeDigest  # job.json `code`: the host code every node runs
    allow_shared: bool = False
    placement: list[str] = field(default_factory=list)  # the lines placement printed
    timings: dict[str, float] = field(default_factory=dict)  # seconds per planning phase (submit --verbose)
    secret_values: InitVar[secrets.Secrets | None] = None

    def __post_init__(self, secret_values: secrets.Secrets | None) -> None:
        self._secrets = secret_values or secrets.Secrets()  # an attribute, not a field: asdict skips it

    @property
    def rank0(self) -> NodePlan:
        return self.nodes[0]

    def secrets(self) -> dict[str, str]:
        """The values for env.secret (the stage request's stdin, nothing else)."""
        return self._secrets.values()

    def job_record(self, node: NodePlan) -> JobRecord:
        """job.json of one node (what the host-side launcher and supervisor read)."""
        spec = self.spec.radeonlab
        return JobRecord(
            id=self.job_id,
            name=self.spec.path.stem,
            spec_file=self.spec.path.name,
            created_at=self.created_at,
            host=node.host,
            gpus=[g.index for g in node.gpus],
            env=dict(node.env),
            secret_names=list(self.secret_names),
            attempts=[Attempt(n=1, created_at=self.created_at)],
            remedies={n: Remedy(r.enabled, list(r.steps)) for n, r in spec.remedies.items()},
            limits=dict(spec.limits),
            memory_total=node.gpus[0].memory if node.gpus else None,
            lf_defaults={k: lf_args.default(k) for k in STEP_KEYS},
            overrides=dict(self.spec.overrides),
            model=ModelRef.from_dict(self.model.record()),
            nodes=node.nodes,
            code=self.code,
        )

    def to_dict(self) -> dict[str, Any]:
        """The plan for scripts (`submit --dry-run --json`), in the shape that command has always printed
        (`dataclasses.asdict(plan)` is the whole value); no secret value either way."""
        return {
            "id": self.job_id,
            "spec": str(self.spec.path),
            "overrides": dict(self.spec.overrides),
            "model": self.model.record(),
            "secret_names": self.secret_names,
            "placement": self.placement,
            "problems": [p.to_dict() for p in self.problems],
            "nodes": [
                {
                    "rank": n.rank,
                    "host": n.host,
                    "address": n.address,
                    "placed": n.placed,
                    "gpus": [
                        {"index": g.index, "name": g.name, "gfx": g.gfx, "memory": g.memory} for g in n.gpus
                    ],
                    "precision": n.rendered.precision,
                    "why_precision": n.rendered.why_precision,
                    "changes": {
                        k: {"spec": a, "rendered": b, "why": w} for k, (a, b, w) in n.rendered.changes.items()
                    },
                    "job_dir": n.job.root,
                    "uploads": [
                        {
                            "local": str(u.local.path),
                            "dest": u.dest,
                            "size": u.local.size,
                            "sha256": u.local.sha256,
                        }
                        for u in n.uploads
                    ],
                    "bytes_to_send": n.bytes_to_send,
                    "estimate": dataclasses.asdict(n.preflight),  # fits, message, peak, free
                    "queue": n.queue,
                    "after": n.after,
                    "env": n.env,
                }
                for n in self.nodes
            ],
        }


class Clock:
    """Seconds per phase, for `submit --verbose` and the benchmark (where a submit's time goes)."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._t = time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.laps[name] = round(self.laps.get(name, 0.0) + now - self._t, 4)
        self._t = now


def limit_problem(spec: Spec, record: HostRecord) -> str | None:
    """A memory limit that cannot work on this host (docs/guide/remedies.md, "Memory limits"), or None."""
    limits = spec.radeonlab.limits
    on_gpu = bool(record.training_gpus()) and not record.cpu_torch
    if limits.get("address_space_gb") and on_gpu:
        return (
            f"{record.host}: limits.address_space_gb (RLIMIT_AS) breaks ROCm, which reserves large virtual "
            "address ranges at start-up: use limits.memory_gb (a cgroup limit) on a GPU host"
        )
    if limits.get("memory_gb") and not record.systemd:
        return (
            f"{record.host}: limits.memory_gb is a cgroup limit set through systemd (systemd-run --user "
            "--scope), and this host does not run systemd; on a CPU host use limits.address_space_gb"
        )
    return None


def host_problems(spec: Spec, record: HostRecord) -> list[Problem]:
    """What the config needs that this host's venv lacks (jobs/spec/needs.py), each with the fix."""
    return needs_module.missing(needs_module.needs(spec), record.packages)


def cached_model_env(view: HostView, record: HostRecord, model: model_module.ModelInfo) -> dict[str, str]:
    """The job's Hub environment on this host: the shared model cache, and HF_HUB_OFFLINE=1 when the probe
    found the whole revision in it (the job then needs no Hub). With the Hub unreachable from the laptop, a
    host whose cache lacks the model is refused."""
    env = {"HF_HUB_CACHE": record.model_cache} if record.model_cache else {}
    revision = model_revision(model)
    if revision is None:
        return env
    cached = view.models.get(revision)
    if cached is not None and cached.complete:
        return {**env, "HF_HUB_OFFLINE": "1"}
    if model.offline:
        raise ModelError(
            f"{model.name}: the Hub is unreachable from this laptop and {record.host}'s model cache does "
            f"not hold it ({(cached.reason if cached else '') or 'incomplete'}); pull it first when the Hub "
            "is back: "
            f"radeonlab models pull {model.name} --limit {record.host}"
        )
    return env


def choose_targets(
    targets: Mapping[str, HostTarget],
    wanted: str | None,
    asks: Asks,
    count: int,
    views: Mapping[str, HostView],
    say: Say,
) -> tuple[list[HostTarget], list[str], list[str]]:
    """(targets, why each, placement's lines): named with --host / the spec, else placement's best over
    the views (a host in the inventory that was not probed is judged as not reachable)."""
    if wanted:
        chosen = nodes_module.pick_named(targets, wanted, count) if count > 1 else [get_host(targets, wanted)]
        return chosen, ["named with --host or radeonlab.host"] * len(chosen), []
    lines: list[str] = []

    def tell(line: str) -> None:
        lines.append(line)
        say(line)

    in_order = [views.get(n) or HostView(n, reachable=False, error="not probed") for n in targets]
    names, decisions = say_decisions(in_order, targets, asks, count, tell)
    why = {d.host: d.reason for d in decisions}
    return [targets[n] for n in names], [f"placement: {why[n]}" for n in names], lines


def host_refusal(spec: Spec, asks: Asks, record: HostRecord) -> None:
    """Refuse, in one line, a chosen host whose cards, limits or venv cannot run this spec."""
    problems_here = card_problems(asks, record.training_gpus())
    if problems_here:
        raise PlacementError(f"{record.host}: {'; '.join(problems_here)}")
    limits_problem = limit_problem(spec, record)
    if limits_problem:
        raise InputError(limits_problem)
    lacking = host_problems(spec, record)
    if lacking:
        raise ChecksFailedError(
            f"{record.host} lacks what {spec.path.name} needs: {lacking[0].message}; "
            f"fix: {lacking[0].fix}; nothing uploaded",
            lacking,
        )


def plan_job(
    job: JobInputs,
    views: Mapping[str, HostView],
    targets: Mapping[str, HostTarget],
    *,
    inventory: str | Path = "",
    host: str | None = None,
    nodes: int | None = None,
    strict: bool = False,
    allow_shared: bool = False,
    job_id: str | None = None,
    say: Say = print,
) -> JobPlan:
    """Decide the job (see the module docstring) from the laptop's inputs and each probed host's view
    (`views` by host name; `inventory`: named in a not-provisioned host's fix). Pure: asks no host."""
    clock = Clock()
    spec, model, asks = job.spec, job.model, job.asks
    count = job.count(nodes)
    chosen, placed, lines = choose_targets(targets, job.wanted(host), asks, count, views, say)
    clock.lap("placement")
    secret = job.secrets.values()
    secret.update(secrets.notify_secret(spec.radeonlab.notify, chosen[0].data))  # rank 0 notifies
    job_id = job_id or new_job_id(spec.path.stem)  # given: one job planned on several hosts (Slurm)
    plan = JobPlan(
        job_id,
        public_spec(spec, job.env),
        datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        model,
        [],
        job.problems,
        sorted(secret),
        job.code,
        allow_shared=allow_shared,
        placement=lines,
        secret_values=secrets.Secrets(secret),
    )
    chosen_views = [views[t.name] for t in chosen]
    records = [require_record(v, str(inventory)) for v in chosen_views]
    spec_paths.refuse_missing(spec, chosen_views, say)  # the spec's workstation folders must be there
    for record in records:
        host_refusal(spec, asks, record)
    extra: dict[str, tuple[Any, str]] = {}
    spec_used, common_note = spec, None
    ranks = nodes_module.plan_nodes(chosen)
    port = nodes_module.master_port(chosen[0])
    if count > 1:
        extra = nodes_module.shared_keys(records)
        spec_used, common_note = nodes_module.common_spec(spec, records)
    for node, target, view, record, why in zip(ranks, chosen, chosen_views, records, placed, strict=True):
        gpus = record.training_gpus()
        folder = record.job_dir(job_id)
        rendered = render(
            spec_used,
            record,
            folder,
            gpus=gpus,
            model_local=model.local_dir is not None,
            base_dataset_info=job.dataset_info,
            extra={**(model_keys(model)), **extra, **file_keys(spec, folder)},
        )
        if common_note:
            rendered.notes.insert(0, common_note)
        free = free_memory(view, gpus[0]) if gpus else None
        sized = estimate_train(spec_used.train, record, gpus)  # the card's precision (see there)
        check = preflight.check(model.config, {**rendered.config, **sized}, free, model.note)
        preflight.enforce(check, strict, record.host)
        env = {**job.env, **cached_model_env(view, record, model)}
        if model.offline:  # cached_model_env refused a host whose cache lacks it: this one has it
            say(model_module.offline_note(model, record.host))
        block: Nodes | None = None
        if count > 1:
            env.update(nodes_module.node_env(node.rank, ranks, port, max(1, len(gpus)), target))
            block = nodes_module.nodes_block(node.rank, ranks, port)
        slot = str(gpus[0].index) if gpus else CPU_SLOT
        plan.nodes.append(
            NodePlan(
                node.rank,
                target.name,
                node.address,
                record,
                gpus,
                folder,
                rendered,
                env,
                job.uploads,
                check,
                view.queue().get(slot, 0),
                why,
                present=present_of(view, job.uploads),
                nodes=block,
            )
        )
    clock.lap("render, estimate")
    plan.timings = {**job.timings, **clock.laps}
    return plan


def public_spec(spec: Spec, plain: Mapping[str, str]) -> Spec:
    """The spec as the plan keeps it: the block's secret env values and notification URLs (tokens inside)
    left out; they are in the plan's Secrets, whose values never serialise."""
    env = {k: v for k, v in spec.radeonlab.env.items() if plain.get(k) == v}
    notify = None if spec.radeonlab.notify is None else [SECRET_SHOWN] * len(spec.radeonlab.notify)
    return dataclasses.replace(spec, radeonlab=dataclasses.replace(spec.radeonlab, env=env, notify=notify))


def model_keys(model: model_module.ModelInfo) -> dict[str, tuple[Any, str]]:
    return {"model_revision": (model.sha, "the exact commit the revision resolved to")} if model.sha else {}


def file_keys(spec: Spec, folder: JobDir) -> dict[str, tuple[Any, str]]:
    """The config keys naming files the job folder holds: uploaded with it, or kept inside its output/."""
    return {
        **{k: (v, "uploaded with the job") for k, v in config_files.host_values(spec, folder.root).items()},
        **{
            k: (v, "kept inside the job's output/")
            for k, v in config_files.output_values(spec, folder.output).items()
        },
    }


def present_of(view: HostView, uploads: list[Upload]) -> set[str] | None:
    """The uploads' contents the host's store holds, as its probe answered (None: not asked)."""
    if not uploads:
        return set()
    if view.blobs is None:
        return None
    return {u.local.sha256 for u in uploads} & set(view.blobs)

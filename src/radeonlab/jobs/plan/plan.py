"""Plan, then apply: `plan_job` decides everything a job will be, and sends nothing.

One function turns a spec into a typed JobPlan: the spec and its checks (refused before anything is sent),
the host(s) and why (named, or placement), each host's record (provisioned? which card?), the rendered config
and every key radeonlab changed, the VRAM estimate, the files to upload and how many bytes the hosts still
need (content-addressed), the queue position, the environment and the job record. A single-node job is a
plan of one NodePlan; multi-node is rank arithmetic over the same plan (jobs/plan/nodes.py), not a second
flow. `submit --dry-run` prints it; `apply_plan` (jobs/apply/submit.py) carries it out over the connections
the plan opened, so nothing is asked twice.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from radeonlab.contract.jobdir import JobDir
from radeonlab.contract.jobid import new_job_id
from radeonlab.contract.parts import CodeDigest, ModelRef, Nodes
from radeonlab.contract.records import Attempt, GpuRecord, HostRecord, JobRecord
from radeonlab.contract.remedy import Remedy
from radeonlab.errors import ChecksFailedError, InputError, InventoryError, ModelError, PlacementError, shown
from radeonlab.jobs.apply import secrets
from radeonlab.jobs.fleet.inventory import HostTarget, get_host, load_inventory
from radeonlab.jobs.fleet.probe import CPU_SLOT, HostView, read_host, require_record
from radeonlab.jobs.host.remedies import STEP_KEYS
from radeonlab.jobs.plan import model as model_module
from radeonlab.jobs.plan import nodes as nodes_module
from radeonlab.jobs.plan import preflight
from radeonlab.jobs.plan.placement import Asks, asks_of, card_problems, estimate_train, free_memory, place
from radeonlab.jobs.plan.render import Rendered, render
from radeonlab.jobs.plan.uploads import Upload, local_dataset_info, uploads_of
from radeonlab.jobs.spec import files as config_files
from radeonlab.jobs.spec import hub, kinds, lf_args
from radeonlab.jobs.spec import needs as needs_module
from radeonlab.jobs.spec import paths as spec_paths
from radeonlab.jobs.spec.checks import check_spec
from radeonlab.jobs.spec.load import Spec, load, with_overrides
from radeonlab.jobs.spec.problems import ERROR, Problem, name_overrides
from radeonlab.jobs.ssh import hostcode
from radeonlab.jobs.ssh.connection import Remote, connect
from radeonlab.jobs.ssh.transfer import blobs_present

Say = Callable[[str], None]


@dataclass
class NodePlan:
    """One host's part of a job."""

    rank: int
    target: HostTarget
    address: str
    view: HostView
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
    remote: Remote | None = field(default=None, repr=False)

    @property
    def host(self) -> str:
        return self.target.name

    @property
    def connection(self) -> Remote:
        """The open connection to this node's host (a plan being applied has one for every node)."""
        if self.remote is None:
            raise RuntimeError(f"{self.host}: the plan holds no connection to this host")
        return self.remote

    @property
    def bytes_to_send(self) -> int | None:
        if self.present is None:
            return None
        unique = {u.local.sha256: u.local.size for u in self.uploads}
        return sum(size for sha, size in unique.items() if sha not in self.present)


@dataclass
class JobPlan:
    """Everything a job will be, decided; nothing sent yet. Holds the connections it opened (close it)."""

    job_id: str
    spec: Spec
    created_at: str
    model: model_module.ModelInfo
    nodes: list[NodePlan]
    problems: list[Problem]  # warnings and notes of the checks (errors refused the plan)
    secret_names: list[str]
    allow_shared: bool = False
    placement: list[str] = field(default_factory=list)  # the lines placement printed
    timings: dict[str, float] = field(default_factory=dict)  # seconds per planning phase (submit --verbose)
    peers: list[HostTarget] = field(default_factory=list, repr=False)  # hosts a Hub model may be copied from
    _secrets: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def rank0(self) -> NodePlan:
        return self.nodes[0]

    def secrets(self) -> dict[str, str]:
        return dict(self._secrets)

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
            code=CodeDigest(hostcode.digest(), hostcode.file_digests()),
        )

    def close(self) -> None:
        for node in self.nodes:
            if node.remote is not None:
                node.remote.close()

    def __enter__(self) -> JobPlan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def to_dict(self) -> dict[str, Any]:
        """The plan for scripts (`submit --dry-run --json`): no secret values, no connections."""
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
                    "estimate": {
                        "fits": n.preflight.fits,
                        "message": n.preflight.message,
                        "peak": n.preflight.peak,
                        "free": n.preflight.free,
                    },
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


def load_checked(spec_path: str | Path, overrides: Sequence[str] = ()) -> tuple[Spec, list[Problem]]:
    """The spec (with `key=value` overrides) and its findings; ChecksFailedError when any is an error
    (an export config is one: it is `radeonlab export`'s)."""
    spec = with_overrides(load(spec_path), list(overrides))
    problems = check_spec(spec) + name_overrides(kinds.export_problems(spec, submitting=True), spec.overrides)
    errors = [p for p in problems if p.severity == ERROR]
    if errors:
        raise ChecksFailedError(
            f"{shown(spec_path)}: {len(errors)} error(s) (see `radeonlab check {shown(spec_path)}`); "
            "nothing uploaded",
            problems,
        )
    return spec, problems


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


def cached_model_env(remote: Remote, record: HostRecord, model: model_module.ModelInfo) -> dict[str, str]:
    """The job's Hub environment on this host: the shared model cache, and HF_HUB_OFFLINE=1 when the cache
    already holds the whole revision (the job then needs no Hub). With the Hub unreachable from the laptop,
    a host whose cache lacks the model is refused."""
    env = {"HF_HUB_CACHE": record.model_cache} if record.model_cache else {}
    if not model.hub:
        return env
    revision = model.sha or model.revision or "main"
    result = remote.tool(
        "models", ["complete", model.name, revision], python=f"{record.venv}/bin/python", env=env, check=False
    )
    if result.exit_code == 0 and result.last_json().get("complete"):
        return {**env, "HF_HUB_OFFLINE": "1"}
    if model.offline:
        raise ModelError(
            f"{model.name}: the Hub is unreachable from this laptop and {record.host}'s model cache does "
            f"not hold it ({result.last_json().get('reason') or 'incomplete'}); pull it first when the Hub "
            "is back: "
            f"radeonlab models pull {model.name} --limit {record.host}"
        )
    return env


def choose_targets(
    targets: dict[str, HostTarget], wanted: str | None, spec: Spec, asks: Asks, count: int, say: Say
) -> tuple[list[HostTarget], list[str], list[str]]:
    """(targets, why each, placement's lines): named with --host / the spec, else placement's best."""
    if wanted:
        chosen = nodes_module.pick_named(targets, wanted, count) if count > 1 else [get_host(targets, wanted)]
        return chosen, ["named with --host or radeonlab.host"] * len(chosen), []
    lines: list[str] = []

    def tell(line: str) -> None:
        lines.append(line)
        say(line)

    chosen, decisions = place(targets, asks, count, say=tell)
    why = {d.host: d.reason for d in decisions}
    return chosen, [f"placement: {why[t.name]}" for t in chosen], lines


def plan_job(
    spec_path: str | Path,
    inventory: str | Path,
    *,
    host: str | None = None,
    nodes: int | None = None,
    overrides: Sequence[str] = (),
    strict: bool = False,
    allow_shared: bool = False,
    ask_blobs: bool = True,
    environ: dict[str, str] | None = None,
    job_id: str | None = None,
    say: Say = print,
    targets: dict[str, HostTarget] | None = None,
) -> JobPlan:
    """Decide the job (see the module docstring). The returned plan holds open connections: close it.
    `targets`: the inventory's hosts when the caller has loaded them already (a load is a Python start-up in
    a child process, about 0.5 s: one per command)."""
    clock = Clock()
    spec, problems = load_checked(spec_path, overrides)
    clock.lap("checks")
    targets = load_inventory(inventory) if targets is None else targets
    clock.lap("inventory")
    if not targets:
        raise InventoryError(f"{inventory}: the inventory has no hosts")
    count = nodes or spec.radeonlab.nodes
    env_in = os.environ if environ is None else environ
    model = model_module.resolve(spec, model_module.endpoint_of(targets, env_in), env_in)
    clock.lap("model")
    asks = asks_of(spec, model.config, model.note)
    chosen, placed, lines = choose_targets(targets, host or spec.radeonlab.host, spec, asks, count, say)
    clock.lap("placement")
    info = local_dataset_info(spec) or {}
    uploads = uploads_of(spec, model, info)
    clock.lap("hashing")
    plain, secret = secrets.job_env(spec.radeonlab.env, spec.radeonlab.forward_env, env_in)
    secret.update(secrets.notify_secret(spec.radeonlab.notify, chosen[0].data))  # rank 0 notifies
    token = hub.laptop_token(env_in)
    if model.hub and token.value and "HF_TOKEN" not in secret:  # the client's login file: same channel
        secret["HF_TOKEN"] = token.value
    if model.endpoint:
        plain.setdefault("HF_ENDPOINT", model.endpoint)
    job_id = job_id or new_job_id(Path(spec_path).stem)  # given: one job planned on several hosts (Slurm)
    plan = JobPlan(
        job_id,
        spec,
        datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        model,
        [],
        problems,
        sorted(secret),
        allow_shared=allow_shared,
        placement=lines,
        peers=list(targets.values()),
        _secrets=secret,  # by name: a field added before it (timings) must not swallow the secrets
    )
    with contextlib.ExitStack() as opened:  # on any refusal below, every connection opened so far closes
        remotes = [opened.enter_context(connect(t)) for t in chosen]
        clock.lap("connect")
        views = [read_host(r, paths=spec_paths.host_values(spec)) for r in remotes]  # one round trip
        clock.lap("host record")
        records = [require_record(v, str(inventory)) for v in views]
        spec_paths.refuse_missing(spec, views, say)  # the spec's workstation folders must be there
        for record in records:
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
        extra: dict[str, tuple[Any, str]] = {}
        spec_used, common_note = spec, None
        ranks = nodes_module.plan_nodes(chosen)
        port = nodes_module.master_port(chosen[0])
        if count > 1:
            extra = nodes_module.shared_keys(records)
            spec_used, common_note = nodes_module.common_spec(spec, records)
        for node, target, remote, view, record, why in zip(
            ranks, chosen, remotes, views, records, placed, strict=True
        ):
            gpus = record.training_gpus()
            job = record.job_dir(job_id)
            extra_here = {
                **(
                    {"model_revision": (model.sha, "the exact commit the revision resolved to")}
                    if model.sha
                    else {}
                ),
                **extra,
                **{
                    k: (v, "uploaded with the job")
                    for k, v in config_files.host_values(spec, job.root).items()
                },
                **{
                    k: (v, "kept inside the job's output/")
                    for k, v in config_files.output_values(spec, job.output).items()
                },
            }
            rendered = render(
                spec_used,
                record,
                job,
                gpus=gpus,
                model_local=model.local_dir is not None,
                base_dataset_info=info,
                extra=extra_here,
            )
            if common_note:
                rendered.notes.insert(0, common_note)
            free = free_memory(view, gpus[0]) if gpus else None
            sized = estimate_train(spec_used.train, record, gpus)  # the card's precision (see there)
            check = preflight.check(model.config, {**rendered.config, **sized}, free, model.note)
            preflight.enforce(check, strict, record.host)
            env = {**plain, **cached_model_env(remote, record, model)}
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
                    target,
                    node.address,
                    view,
                    record,
                    gpus,
                    job,
                    rendered,
                    env,
                    uploads,
                    check,
                    view.queue().get(slot, 0),
                    why,
                    nodes=block,
                    remote=remote,
                )
            )
        if ask_blobs:
            for n in plan.nodes:
                n.present = blobs_present(n.connection, [u.local for u in n.uploads], n.record.blobs_dir)
        clock.lap("render, estimate, blobs")
        plan.timings = clock.laps
        opened.pop_all()
    return plan

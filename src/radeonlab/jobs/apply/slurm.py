"""Submit through Slurm (`radeonlab_scheduler: slurm`): stage the job on every node it may get, then sbatch.

Slurm, not radeonlab, chooses the node when a GPU frees, so the job's folder is made ready (uploads,
config rendered for that node's card, job.json, the host code) on every node that satisfies the job's
constraint, at the same path. The batch script (jobs/plan/slurm.py sbatch_script) runs the same host-side
launcher and supervisor as the built-in queue, inside the allocation, so the NaN/OOM remedies, checkpoints
and notifications work as they do without Slurm. Slurm does the queueing: the launcher is started with
`--no-queue --allow-shared` (radeonlab's per-GPU line would only duplicate Slurm's; a job the built-in
scheduler started on the same card still refuses a Slurm job, exit 75). The job's GPUs are numbered inside
Slurm's allocation (ROCR_VISIBLE_DEVICES from gres.conf's Flags=amd_gpu_env): job.json `gpus` is 0..n-1.

A multi-node job (`--nodes N`, radeonlab.nodes) is planned on every candidate as a rank of one job (one
config for every rank: jobs/plan/nodes.py) and staged there without a rank; sbatch asks for N nodes, and
at start each rank's launcher records in its job.json which rank Slurm made it and who its peers are
(launcher.slurm_ranks), so `status`, `watch` and `fetch` find rank 0's folder, where the adapter is.

Refused in one line before anything is sent: Slurm without a `slurm_controller` group, a constraint no
node satisfies, more nodes than satisfy it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from radeonlab.contract.jobdir import FILES
from radeonlab.contract.jobid import new_job_id
from radeonlab.contract.parts import Nodes, SlurmInfo, SlurmNode
from radeonlab.contract.records import StateRecord
from radeonlab.contract.state import JobState
from radeonlab.errors import InventoryError
from radeonlab.jobs.apply.submit import ProgressBar, Say, SubmitResult, no_progress, run_stage, stage_request
from radeonlab.jobs.apply.submit import upload as upload_node
from radeonlab.jobs.fleet import store
from radeonlab.jobs.fleet.context import Fleet
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.fleet.observe import Views, observe_job
from radeonlab.jobs.host.launcher import SLURM_TORCHRUN_KEYS
from radeonlab.jobs.plan import slurm
from radeonlab.jobs.plan.inputs import JobInputs, load_checked
from radeonlab.jobs.plan.nodes import node_address
from radeonlab.jobs.plan.placement import asks_of
from radeonlab.jobs.plan.plan import JobPlan, plan_job
from radeonlab.jobs.ssh.connection import Remote, connect
from radeonlab.roles.slurm import plan as role_plan
from radeonlab.roles.slurm.defaults import DEFAULTS as ROLE_DEFAULTS

LAUNCHER_MODULE = "radeonlab.jobs.host.launcher"
HOST_PYTHON = "python3"  # the node's system python, as jobs/host/stage.py starts the launcher


@dataclass
class SlurmLab:
    """The inventory's Slurm side: the controller to run sbatch/squeue/scancel on, Slurm names <-> hosts."""

    controller: HostTarget
    hosts: dict[str, HostTarget]  # Slurm NodeName -> inventory host
    jobcomp_log: str = ""  # the controller's job completion log (roles/slurm slurm_jobcomp_log)

    def host_of(self, node: str) -> str:
        return self.hosts[node].name if node in self.hosts else node


def _groups(targets: Mapping[str, HostTarget]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for target in targets.values():
        for group in target.groups:
            groups.setdefault(group, []).append(target.name)
    return groups


def lab_of(targets: Mapping[str, HostTarget], host: str | None = None) -> SlurmLab | None:
    """The Slurm lab a submit goes through, or None for the built-in scheduler: Slurm when the named host
    (--host / radeonlab.host) says `radeonlab_scheduler: slurm`, or, with no host named, when any host does.
    Refuses in one line `radeonlab_scheduler: slurm` without a slurm_controller group."""
    named = [n.strip() for n in (host or "").split(",") if n.strip()]
    if named and not all(n in targets and slurm.uses_slurm(targets[n].data) for n in named):
        return None
    data = {name: t.data for name, t in targets.items()}
    controller = slurm.slurm_controller(_groups(targets), data)
    if controller is None:
        return None
    nodes = {
        role_plan.node_name(name, t.data): t
        for name, t in targets.items()
        if name in _groups(targets).get(str(ROLE_DEFAULTS["slurm_nodes_group"]), [])
    }
    log = str(targets[controller].data.get("slurm_jobcomp_log") or ROLE_DEFAULTS["slurm_jobcomp_log"])
    return SlurmLab(targets[controller], nodes, log)


def sinfo(remote: Remote) -> list[slurm.SlurmNode]:
    out = remote.run(["sinfo", "-h", "-N", "-o", slurm.SINFO_FORMAT], timeout=30).stdout
    return slurm.parse_sinfo(out)


@dataclass
class SlurmPlan:
    """A job planned on every node Slurm may give it, and how it is asked of Slurm."""

    plan: JobPlan  # one NodePlan per candidate node (a one-node job each, or a rank-less rank of N)
    lab: SlurmLab
    constraint: str
    nodes: int
    gpus_per_node: int
    exclude: list[str] = field(default_factory=list)  # Slurm nodes that may not run it (not staged)


def plan_slurm_job(
    spec_path: str | Path,
    fleet: Fleet,
    lab: SlurmLab,
    *,
    nodes: int | None = None,
    overrides: Sequence[str] = (),
    strict: bool = False,
    say: Say = print,
) -> SlurmPlan:
    """Ask Slurm which nodes exist and what they offer, refuse what none can run, probe each node that
    satisfies the job's wishes (one probe each, over the fleet) and plan the job there (one job id)."""
    spec, _ = load_checked(spec_path, overrides)
    wishes = asks_of(spec, None).card
    count = nodes or spec.radeonlab.nodes
    gpus_per_node = 1  # one GPU per node and job (docs/guide/slurm.md): what the lab's single-card nodes hold
    with connect(lab.controller) as ctl:
        offered = sinfo(ctl)
    known = [n for n in offered if n.name in lab.hosts]
    constraint, able = slurm.plan_request(wishes, known, count, gpus_per_node)
    job_id = new_job_id(Path(spec_path).stem)
    hosts = [lab.host_of(n) for n in able]
    job, views = observe_job(fleet, spec_path, os.environ, host=",".join(hosts), nodes=len(hosts),
                             overrides=overrides)  # fmt: skip
    common = {"inventory": fleet.inventory, "strict": strict, "job_id": job_id, "say": say}
    if count > 1:
        first = _plan_ranks(job, views, fleet.targets, hosts, count, common)
    else:
        first = _plan_each(job, views, fleet.targets, hosts, common)
    roots = {n.job.root for n in first.nodes}
    venvs = {n.record.venv for n in first.nodes}
    if len(roots) > 1 or len(venvs) > 1:
        raise InventoryError(
            "Slurm runs one batch script on whichever node it picks: the job folder and venv must be the "
            f"same path on {', '.join(able)} (found {sorted(roots)}, {sorted(venvs)})"
        )
    exclude = sorted(n.name for n in offered if n.name not in able)
    shown = f" (--constraint={constraint})" if constraint else ""
    among = f"{count} of " if count > 1 else ""
    say(f"{job_id}: Slurm may run it on {among}{', '.join(lab.host_of(n) for n in able)}{shown}")
    return SlurmPlan(first, lab, constraint, count, gpus_per_node, exclude)


def _plan_each(
    job: JobInputs, views: Views, targets: Mapping[str, HostTarget], hosts: list[str], common: dict
) -> JobPlan:
    """A one-node job: planned on each candidate as a job of its own (its card's precision), one id."""
    plans = [plan_job(job, views, targets, host=h, nodes=1, allow_shared=True, **common) for h in hosts]
    first = plans[0]
    first.nodes = [p.nodes[0] for p in plans]
    return first


def _plan_ranks(
    job: JobInputs,
    views: Views,
    targets: Mapping[str, HostTarget],
    hosts: list[str],
    count: int,
    common: dict,
) -> JobPlan:
    """A job of `count` nodes: every candidate planned as a rank of one multi-node job (jobs/plan/nodes.py:
    one config for every rank, e.g. gloo/RCCL, save_on_each_node, fp16 everywhere when a candidate lacks
    bf16), but without a rank: Slurm decides which candidates run it and in which order when they free, so
    the torchrun variables come from the allocation at start (launcher.slurm_ranks). Kept: the per-host
    environment (radeonlab_node_env)."""
    plan = plan_job(job, views, targets, host=",".join(hosts), nodes=len(hosts), allow_shared=True, **common)
    for node in plan.nodes:
        node.env = {k: v for k, v in node.env.items() if k not in SLURM_TORCHRUN_KEYS}
        node.nodes = Nodes(world_size=count)  # its rank and peers: from the Slurm allocation at start
    return plan


def launcher_argv(job_dir: str, venv: str) -> list[str]:
    """The launcher as the batch script runs it: in the foreground of the allocation, no radeonlab queue."""
    code = f"{job_dir}/{FILES['code']}"
    return ["env", f"PYTHONPATH={code}", HOST_PYTHON, "-m", LAUNCHER_MODULE, "run", job_dir,
            "--venv", venv, "--allow-shared", "--no-queue"]  # fmt: skip


def batch_script(sp: SlurmPlan) -> str:
    node = sp.plan.rank0
    job = slurm.BatchJob(
        job_id=sp.plan.job_id,
        job_dir=node.job.root,
        launcher=launcher_argv(node.job.root, node.record.venv),
        gpus_per_node=sp.gpus_per_node,
        nodes=sp.nodes,
        constraint=sp.constraint,
        exclude=tuple(sp.exclude),
    )
    return slurm.sbatch_script(job)


def slurm_info(sp: SlurmPlan) -> SlurmInfo:
    """job.json `slurm` before sbatch answers: the controller, the candidate hosts, and each candidate's
    Slurm node name -> inventory host and address (a rank of a multi-node job names its peers by these,
    launcher.slurm_ranks)."""
    staged = [n.host for n in sp.plan.nodes]
    nodes = {name: SlurmNode(t.name, node_address(t)) for name, t in sp.lab.hosts.items() if t.name in staged}
    return SlurmInfo(sp.lab.controller.name, staged, nodes)


def apply_slurm(
    sp: SlurmPlan, fleet: Fleet, *, progress_bar: ProgressBar = no_progress, say: Say = print
) -> SubmitResult:
    """Stage on every candidate node (over the fleet's connections), sbatch on the controller, remember the
    Slurm job id."""
    plan = sp.plan
    info = slurm_info(sp)
    reports = []
    for node in plan.nodes:
        remote = fleet.remote(node.host)
        reports.append(upload_node(node, remote, progress_bar, say))
        request = stage_request(plan, node, launch=False)
        request.job = {**(request.job or {}), "gpus": list(range(sp.gpus_per_node)), "slurm": info.to_dict()}
        run_stage(remote, request)
    script = batch_script(sp)
    with connect(sp.lab.controller) as ctl:
        out = ctl.run(["sbatch", "--parsable"], stdin_text=script, timeout=60).stdout
    slurm_id = slurm.parse_sbatch(out)
    info = replace(info, job_id=slurm_id)
    rank0 = plan.rank0
    job = {**plan.job_record(rank0).to_dict(), "gpus": list(range(sp.gpus_per_node)), "slurm": info.to_dict()}
    said = {"state": JobState.QUEUED.value, "reason": f"Slurm job {slurm_id}: submitted"}
    state = StateRecord.from_dict(said)
    with contextlib.closing(store.connect()) as conn:
        store.upsert_from_host(conn, store.HostJob(rank0.host, rank0.job.root, job, state.to_dict()))
    notes = [f"Slurm job {slurm_id} on {sp.lab.controller.name}; may run on {', '.join(info.candidates)}"]
    return SubmitResult(plan.job_id, rank0.host, rank0.job.root, rank0.rendered.precision, state, reports[0],
                        notes, dict(plan.timings))  # fmt: skip

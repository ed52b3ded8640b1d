"""Slurm as the scheduler of a lab (`radeonlab_scheduler: slurm`): the pure pieces the job runner needs.

Standard library only; nothing here connects anywhere. The runner runs the Slurm commands on the controller
(the host of the inventory group `slurm_controller`, set up by roles/slurm) and hands their output here:

    sinfo -h -N -o '%N|%T|%f|%G|%E'          -> parse_sinfo        (SINFO_FORMAT)
    squeue -h -t all -o '%i|%j|%T|%r|%N'     -> parse_squeue       (SQUEUE_FORMAT; `squeue --json` too):
                                                 queued, running, and ended jobs for MinJobAge seconds
    cat /var/log/slurm/jobcomp.log            -> parse_jobcomp_log  (every ended job; no database needed)
    sbatch --parsable <script>                -> parse_sbatch

Slurm's node features and gres come from roles/slurm (plan.node_features): every node offers
gfx<NNNN>, gfx<NNN>x, gfx<NN>, its architecture (rdna3), bf16 when every card has it, vram<N>g (whole GiB).
Checked against Slurm 22.05.8 (Debian 12) on the SIMULATED lab (tests/e2e/test_slurm.py).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from radeonlab.contract.records import GIB
from radeonlab.contract.state import JobState
from radeonlab.errors import InputError
from radeonlab.jobs.host.launcher import SLURM_NODES_ENV
from radeonlab.jobs.plan.wishes import CardWishes

MASTER_PORT = 29500  # torchrun's rendezvous port on rank 0 (as radeonlab_master_port)
# Multi-node jobs add SLURM_JOB_ID % PORT_SPAN to the master port, so two jobs whose rank 0 shares a
# machine (or, in the SIMULATED lab, one network namespace) do not collide; a span of 1 keeps the port.
PORT_SPAN = 1000
SLURM_DEFAULTS: dict[str, object] = {
    "scheduler_key": "radeonlab_scheduler",  # host/group data: "slurm" or "builtin" (the default)
    "controller_group": "slurm_controller",  # = roles/slurm DEFAULTS["slurm_controller_group"]
    "master_port": MASTER_PORT,
    "port_span": PORT_SPAN,
}
SINFO_FORMAT = "%N|%T|%f|%G|%E"
SQUEUE_FORMAT = "%i|%j|%T|%r|%N"
GB = 10**9


class SlurmError(InputError):
    """A job Slurm cannot take, or an inventory that cannot use Slurm: one line for the user."""


# -------------------------------------------------------------------------------------- which scheduler


def uses_slurm(data: Mapping[str, object]) -> bool:
    return str(data.get(str(SLURM_DEFAULTS["scheduler_key"])) or "builtin").strip().lower() == "slurm"


def slurm_controller(
    groups: Mapping[str, Sequence[str]], host_data: Mapping[str, Mapping[str, object]]
) -> str | None:
    """The controller to submit through, when any host of the inventory says `radeonlab_scheduler: slurm`;
    None when none does (the built-in queue). Refuses, in one line, Slurm without a controller group."""
    slurm_hosts = sorted(name for name, data in host_data.items() if uses_slurm(data))
    if not slurm_hosts:
        return None
    group = str(SLURM_DEFAULTS["controller_group"])
    controllers = list(groups.get(group, ()))
    if not controllers:
        shown = ", ".join(slurm_hosts[:3]) + (" ..." if len(slurm_hosts) > 3 else "")
        raise SlurmError(
            f"radeonlab_scheduler is slurm for {shown} but the inventory has no {group} group: add the host "
            f"that runs slurmctld to a group {group} and provision it (roles/slurm/README.md)"
        )
    return controllers[0]


# ------------------------------------------------------------------------------------------------ nodes


@dataclass(frozen=True)
class SlurmNode:
    """One node as `sinfo` shows it."""

    name: str
    state: str  # idle, mixed, allocated, down*, drained, ...
    features: frozenset[str]
    gpus: int  # GPUs configured (all types)
    reason: str = ""

    @property
    def usable(self) -> bool:
        """Slurm may place a job here now or later (not down, drained or not responding)."""
        base = self.state.rstrip("*~#!%$@^-")
        return "*" not in self.state and base in {"idle", "mixed", "allocated", "completing", "planned"}


def gres_gpu_count(gres: str) -> int:
    """`gpu:gfx1100:1,gpu:gfx1201:2(S:0)` -> 3 (sinfo's %G; a socket suffix in brackets is dropped)."""
    total = 0
    for part in re.sub(r"\([^)]*\)", "", gres).split(","):
        bits = part.strip().split(":")
        if bits[0] == "gpu" and len(bits) >= 2 and bits[-1].isdigit():
            total += int(bits[-1])
        elif bits[0] == "gpu" and len(bits) >= 2:
            total += 1
    return total


def parse_sinfo(text: str) -> list[SlurmNode]:
    """`sinfo -h -N -o '%N|%T|%f|%G|%E'` -> nodes (sinfo lists a node once per partition: kept once)."""
    nodes: dict[str, SlurmNode] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 4 or not parts[0]:
            continue
        features = frozenset(f for f in parts[2].split(",") if f and f != "(null)")
        reason = parts[4] if len(parts) > 4 and parts[4] != "none" else ""
        nodes.setdefault(parts[0], SlurmNode(parts[0], parts[1], features, gres_gpu_count(parts[3]), reason))
    return list(nodes.values())


# ----------------------------------------------------------------------------------- wishes -> constraint


def _gfx_feature(wanted: str) -> str:
    """The node feature a gfx wish names: gfx110x/gfx11/gfx1100 as they are, RDNA3.5 -> rdna3_5."""
    want = wanted.strip().lower()
    return want if want.startswith("gfx") else re.sub(r"[^a-z0-9]", "_", want)


def _vram_features(min_vram_gb: float, offered: Iterable[str]) -> list[str]:
    """The vram<N>g features that surely hold min_vram_gb: a card shown as N GiB has at least N - 0.5 GiB
    (features are rounded to whole GiB), so N qualifies when (N - 0.5) GiB >= min_vram_gb GB."""
    sizes = sorted({int(m.group(1)) for f in offered if (m := re.fullmatch(r"vram(\d+)g", f))})
    return [f"vram{n}g" for n in sizes if (n - 0.5) * GIB >= min_vram_gb * GB]


def constraint_terms(wishes: CardWishes, nodes: Sequence[SlurmNode]) -> list[str]:
    """The terms ANDed into --constraint: a feature, or a (a|b) group for the VRAM floor."""
    terms = []
    if wishes.gfx_family:
        terms.append(_gfx_feature(wishes.gfx_family))
    if wishes.bf16:
        terms.append("bf16")
    if wishes.min_vram_gb:
        sizes = _vram_features(wishes.min_vram_gb, (f for n in nodes for f in n.features))
        terms.append(sizes[0] if len(sizes) == 1 else f"({'|'.join(sizes)})" if sizes else "vram-none")
    return terms


def _satisfies(node: SlurmNode, terms: Sequence[str]) -> bool:
    return all(any(alt in node.features for alt in term.strip("()").split("|")) for term in terms)


def plan_request(
    wishes: CardWishes, nodes: Sequence[SlurmNode], node_count: int = 1, gpus_per_node: int = 1
) -> tuple[str, list[str]]:
    """(--constraint value, the nodes that can run the job); refuses in one line what no node satisfies,
    more nodes than the lab has, or more GPUs per node than any node holds. Down nodes count as able: a
    job may wait for them (Slurm keeps it pending)."""
    if node_count < 1 or gpus_per_node < 0:
        raise SlurmError(f"a job needs at least one node (asked {node_count})")
    if node_count > len(nodes):
        raise SlurmError(f"--nodes {node_count}: the Slurm lab has {len(nodes)} node(s) ({_names(nodes)})")
    terms = constraint_terms(wishes, nodes)
    able = [n for n in nodes if _satisfies(n, terms) and n.gpus >= gpus_per_node]
    if not able:
        raise SlurmError(
            f"no Slurm node satisfies {wishes.describe()} with {gpus_per_node} GPU(s): "
            + "; ".join(
                f"{n.name} has {','.join(sorted(n.features)) or 'no features'}, {n.gpus} GPU(s)"
                for n in nodes
            )  # fmt: skip
        )
    if len(able) < node_count:
        raise SlurmError(
            f"--nodes {node_count}: only {len(able)} Slurm node(s) satisfy {wishes.describe()} "
            f"({_names(able)})"
        )
    return "&".join(terms), [n.name for n in able]


def _names(nodes: Sequence[SlurmNode]) -> str:
    return ", ".join(n.name for n in nodes) or "none"


# ------------------------------------------------------------------------------------------ sbatch script


@dataclass(frozen=True)
class BatchJob:
    """What one sbatch script runs: the same host-side launcher as the built-in queue, in the allocation."""

    job_id: str  # radeonlab's id: the Slurm job name
    job_dir: str  # the job folder, staged on every node that may run it (same path on each)
    launcher: Sequence[str]  # argv of the host-side launcher/supervisor
    gpus_per_node: int = 1
    nodes: int = 1
    constraint: str = ""
    partition: str = ""
    exclude: Sequence[str] = ()  # Slurm nodes the job may not run on (not staged there)
    env: Mapping[str, str] = field(default_factory=dict)
    master_port: int = MASTER_PORT
    port_span: int = PORT_SPAN


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def sbatch_script(job: BatchJob) -> str:
    """The batch script text. It runs in a login shell on the first node of the allocation (so the node's
    /etc/profile.d applies, as for the built-in launcher); one node: it becomes the launcher; several:
    rank 0 is the first node of the allocation, its NodeAddr is MASTER_ADDR, and `srun` starts one launcher
    per node with LLaMA-Factory's torchrun variables (FORCE_TORCHRUN, NNODES, NODE_RANK = SLURM_NODEID,
    MASTER_ADDR, MASTER_PORT, NPROC_PER_NODE) and the allocation's node names in rank order
    (RADEONLAB_SLURM_NODES), from which each launcher records its rank and peers in job.json."""
    if not job.launcher:
        raise SlurmError(f"{job.job_id}: no launcher command")
    bad = [k for k in job.env if not _ENV_NAME.match(k)]
    if bad:
        raise SlurmError(f"{job.job_id}: not an environment variable name: {bad[0]!r}")
    q = shlex.quote
    head = [
        "#!/bin/bash -l",
        f"# radeonlab job {job.job_id}: written by radeonlab (jobs/plan/slurm.py), run by Slurm.",
        f"#SBATCH --job-name={job.job_id}",
        f"#SBATCH --nodes={job.nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --chdir={job.job_dir}",
        f"#SBATCH --output={job.job_dir}/slurm-%j.out",
    ]
    head += [f"#SBATCH --gres=gpu:{job.gpus_per_node}"] if job.gpus_per_node else []
    head += [f"#SBATCH --constraint={job.constraint}"] if job.constraint else []
    head += [f"#SBATCH --partition={job.partition}"] if job.partition else []
    head += [f"#SBATCH --exclude={','.join(job.exclude)}"] if job.exclude else []
    body = ["set -eu", f"cd {q(job.job_dir)}"]
    body += [f"export {k}={q(v)}" for k, v in job.env.items()]
    launcher = shlex.join(job.launcher)
    if job.nodes == 1:
        return "\n".join([*head, "", *body, f"exec {launcher}", ""])
    span = job.port_span
    port = f"$(( {job.master_port} + SLURM_JOB_ID % {span} ))" if span > 1 else str(job.master_port)
    body += [
        # the allocation's nodes in SLURM_NODEID order; each launcher records its rank and peers from it
        f'{SLURM_NODES_ENV}=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | paste -sd, -)',
        f"first=${{{SLURM_NODES_ENV}%%,*}}",
        "MASTER_ADDR=$(scontrol show node \"$first\" | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p')",
        f"MASTER_PORT={port}",
        f"export FORCE_TORCHRUN=1 NNODES={job.nodes} NPROC_PER_NODE={max(1, job.gpus_per_node)} "
        f"MASTER_ADDR MASTER_PORT {SLURM_NODES_ENV}",
        # one launcher per node; NODE_RANK is the node's place in the allocation (0 = $first)
        f"exec srun --nodes={job.nodes} --ntasks-per-node=1 --kill-on-bad-exit=1 "
        f"bash -lc 'export NODE_RANK=$SLURM_NODEID; exec \"$@\"' radeonlab-rank {launcher}",
    ]
    return "\n".join([*head, "", *body, ""])


def parse_sbatch(text: str) -> str:
    """`sbatch --parsable` -> the Slurm job id ("123", or "123;cluster")."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    job_id = first.split(";", 1)[0].strip()
    if not job_id.isdigit():
        raise SlurmError(f"sbatch did not give a job id: {text.strip()[:200]!r}")
    return job_id


# ------------------------------------------------------------------------------------------------- states

# Slurm job states (squeue(1) "JOB STATE CODES", 22.05) -> radeonlab's. A job that holds an allocation is
# running (suspended too: its processes exist); requeued or held jobs wait again: queued.
SLURM_STATES: dict[str, JobState] = {
    **dict.fromkeys(
        ["PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"]
        + ["SPECIAL_EXIT"],
        JobState.QUEUED,
    ),
    **dict.fromkeys(
        ["RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESIZING"],
        JobState.RUNNING,
    ),
    "COMPLETED": JobState.SUCCEEDED,
    **dict.fromkeys(
        ["FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"],
        JobState.FAILED,
    ),
    **dict.fromkeys(["CANCELLED", "REVOKED"], JobState.CANCELLED),
}


def job_state(slurm_state: str) -> JobState:
    """`RUNNING` -> running, `CANCELLED by 1000` -> cancelled, `OUT_OF_MEMORY` -> failed."""
    word = slurm_state.strip().split()[0].upper() if slurm_state.strip() else ""
    if word not in SLURM_STATES:
        raise SlurmError(f"unknown Slurm job state {slurm_state!r}")
    return SLURM_STATES[word]


@dataclass(frozen=True)
class SlurmJob:
    """One Slurm job as squeue / sacct show it."""

    job_id: str
    name: str
    state: str
    reason: str
    nodes: tuple[str, ...]

    @property
    def radeonlab_state(self) -> JobState:
        return job_state(self.state)


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compressed node list -> names: `sl-[1-3,5],ws01` -> sl-1, sl-2, sl-3, sl-5, ws01."""
    names: list[str] = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]*)\])?([^,\[]*)", text.strip()):
        prefix, ranges, suffix = m.group(1), m.group(2), m.group(3)
        if not prefix or prefix in {"(null)", "None"}:
            continue
        if ranges is None:
            names.append(prefix + suffix)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            width = len(lo)
            for n in range(int(lo), int(hi or lo) + 1):
                names.append(f"{prefix}{n:0{width}d}{suffix}")
    return names


def parse_squeue(text: str) -> list[SlurmJob]:
    """`squeue -h -o '%i|%j|%T|%r|%N'` -> jobs (pending jobs have no nodes yet)."""
    jobs = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 5 and parts[0]:
            reason = "" if parts[3] in ("None", "(null)") else parts[3]
            jobs.append(SlurmJob(parts[0], parts[1], parts[2], reason, tuple(expand_hostlist(parts[4]))))
    return jobs


def parse_squeue_json(data: Mapping[str, object]) -> list[SlurmJob]:
    """`squeue --json` (already json.loads'ed) -> jobs. 22.05 writes job_state as a string."""
    jobs = []
    listed = data.get("jobs")
    for job in listed if isinstance(listed, list) else []:
        state = job.get("job_state")
        state = state[0] if isinstance(state, list) else state  # later Slurm writes a list of flags
        reason = str(job.get("state_reason") or "")
        jobs.append(
            SlurmJob(
                str(job.get("job_id")),
                str(job.get("name") or ""),
                str(state or ""),
                "" if reason == "None" else reason,
                tuple(expand_hostlist(str(job.get("nodes") or ""))),
            )
        )
    return jobs


def parse_jobcomp_log(text: str) -> list[SlurmJob]:
    """The controller's job completion log (jobcomp/filetxt, roles/slurm `slurm_jobcomp_log`, world-readable)
    -> finished jobs, with their exit code as the reason: `JobId=5 ... Name=wrap JobState=COMPLETED ...
    NodeList=sl-2 ... ExitCode=0:0`. A job listed twice (requeued) keeps its last line. (`sacct -c` reads
    the same file but opens it for writing: only root and SlurmUser may run it.)"""
    jobs: dict[str, SlurmJob] = {}
    for line in text.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        if fields.get("JobId", "").isdigit() and "JobState" in fields:
            jobs[fields["JobId"]] = SlurmJob(
                fields["JobId"],
                fields.get("Name", ""),
                fields["JobState"],
                f"exit {fields['ExitCode']}" if fields.get("ExitCode") else "",
                tuple(expand_hostlist(fields.get("NodeList", ""))),
            )
    return list(jobs.values())

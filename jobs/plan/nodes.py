"""Multi-node LoRA: one job across N workstations, launched by LLaMA-Factory's own torchrun path.

`radeonlab submit SPEC --nodes 2` (or `radeonlab: {nodes: 2}`) puts the SAME job id and the same rendered
config on every node (datasets uploaded to each), and starts each node's launcher detached, as for one
host. What makes it one job is the environment each launcher passes to `llamafactory-cli train`, through
job.json's `env` (jobs/host/launcher.py applies it to the training process):

    FORCE_TORCHRUN=1 NNODES=N NODE_RANK=i MASTER_ADDR=<rank 0's address> MASTER_PORT=<port> NPROC_PER_NODE=n

LLaMA-Factory then runs `torchrun --nnodes N --node_rank i --nproc_per_node n --master_addr A
--master_port P` (static rendezvous: rank 0's torchrun serves the TCP store on P, the others connect).

- Rank 0 = the first host (placement's best, or the first of `--host a,b`). Its address is the one the
  other hosts reach it by: the inventory's ssh_hostname, or host data `radeonlab_node_address` when the SSH
  name is not the LAN address (a jump host, a DNS name the peers cannot resolve).
- MASTER_PORT: rank 0's host data `radeonlab_master_port`, default 29500 (torch's usual port).
- `radeonlab_node_env` (host data, a mapping) adds per-host environment, e.g. NCCL_SOCKET_IFNAME /
  GLOO_SOCKET_IFNAME to pin the interface (README-multinode.md).
- NPROC_PER_NODE is explicit: LLaMA-Factory's default is torch's device count, which is 0 on a CPU host.
- PATH: LLaMA-Factory calls `torchrun` by name; the venv's bin is not on a login PATH, so each node's job
  env carries PATH = <venv>/bin + that host's login PATH (read at submit).
- Backend: accelerate picks it when ddp_backend is unset: nccl when torch sees a GPU (ROCm torch answers to
  "nccl" with RCCL), else gloo for a multi-CPU run (mpi if the torch build has MPI). radeonlab sets it
  explicitly for multi-node only, so the config says what runs: `nccl` on cards, `gloo` on the simulated
  CPU hosts (never for one node: a single process needs no backend).
- `save_on_each_node: true`: the job folders are on different disks, so every node keeps its own
  checkpoints (a resume needs them on every node) and writes its own output/. Rank 0's folder is the job's
  result: status, watch and fetch read rank 0 (`is_rank_zero`).
- job.json carries `nodes`: {rank, world_size, master, master_addr, master_port, peers: [{rank, host,
  address}]}, so each host's record names its rank and its peers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from radeonlab.jobs.apply import launch
from radeonlab.jobs.fleet import store
from radeonlab.jobs.fleet.hostrecord import read_host_record
from radeonlab.jobs.fleet.inventory import HostTarget, get_host
from radeonlab.jobs.plan import placement
from radeonlab.jobs.plan.render import (
    Rendered,
    is_simulated_cpu,
    local_model_dir,
    pick_gpus,
    render,
    to_yaml,
)
from radeonlab.jobs.spec.load import Spec
from radeonlab.jobs.ssh.connection import Remote, connect

from radeonlab.contract.jobid import new_job_id
from radeonlab.contract.records import JobPaths, StateRecord
from radeonlab.errors import RadeonlabError

MULTINODE_DEFAULTS: dict[str, Any] = {
    "master_port": 29500,
    "address_key": "radeonlab_node_address",  # host data: the address peers reach this host by
    "port_key": "radeonlab_master_port",  # host data of rank 0: the rendezvous port
    "env_key": "radeonlab_node_env",  # host data: extra env for this host's rank (interface pinning...)
    "backend_gpu": "nccl",  # RCCL in ROCm torch
    "backend_cpu": "gloo",
}
PRECISION_KEYS = ("bf16", "fp16", "pure_bf16")


@dataclass(frozen=True)
class Node:
    rank: int
    host: str
    address: str


def node_address(target: HostTarget) -> str:
    """The address the other nodes reach `target` by."""
    return str(target.data.get(MULTINODE_DEFAULTS["address_key"]) or target.hostname)


def master_port(target: HostTarget) -> int:
    return int(target.data.get(MULTINODE_DEFAULTS["port_key"]) or MULTINODE_DEFAULTS["master_port"])


def plan_nodes(targets: Sequence[HostTarget]) -> list[Node]:
    return [Node(rank, t.name, node_address(t)) for rank, t in enumerate(targets)]


def nodes_block(rank: int, nodes: Sequence[Node], port: int) -> dict[str, Any]:
    """job.json's `nodes`: this host's rank and every peer."""
    return {
        "rank": rank,
        "world_size": len(nodes),
        "master": nodes[0].host,
        "master_addr": nodes[0].address,
        "master_port": port,
        "peers": [dataclasses.asdict(n) for n in nodes],
    }


def node_env(
    rank: int, nodes: Sequence[Node], port: int, nproc: int, target: HostTarget, venv: str, login_path: str
) -> dict[str, str]:
    """The training process's environment on node `rank` (job.json `env`)."""
    extra = target.data.get(MULTINODE_DEFAULTS["env_key"]) or {}
    if not isinstance(extra, Mapping):
        raise RadeonlabError(f"{target.name}: host data {MULTINODE_DEFAULTS['env_key']} must be a mapping")
    return {
        "FORCE_TORCHRUN": "1",
        "NNODES": str(len(nodes)),
        "NODE_RANK": str(rank),
        "MASTER_ADDR": nodes[0].address,
        "MASTER_PORT": str(port),
        "NPROC_PER_NODE": str(nproc),
        "PATH": f"{posixpath.join(venv, 'bin')}:{login_path}",
        **{str(k): str(v) for k, v in extra.items()},
    }


def rank_of(job: Mapping[str, Any]) -> int:
    """A job.json's node rank (0 for a single-node job)."""
    return int((job.get("nodes") or {}).get("rank") or 0)


def is_rank_zero(job: Mapping[str, Any]) -> bool:
    return rank_of(job) == 0


def peer_hosts(job: Mapping[str, Any]) -> list[tuple[int, str]]:
    """(rank, host) of a multi-node job's other ranks, from one rank's job.json; [] for a single-node job."""
    nodes = job.get("nodes") or {}
    me = rank_of(job)
    return [(int(p["rank"]), str(p["host"])) for p in nodes.get("peers") or [] if int(p["rank"]) != me]


def cancel_rank(
    targets: Mapping[str, HostTarget], host: str, inventory: str | Path, job_id: str
) -> StateRecord:
    """Cancel one rank's copy of `job_id` on `host` (the same launcher `cancel` as a single-node job)."""
    with connect(get_host(targets, host)) as remote:
        record = read_host_record(remote, str(inventory))
        result = remote.run(launch.cancel_argv(JobPaths.for_job(record["jobs_dir"], job_id)))
    return launch.parse_state_output(result.stdout)[0]


def multinode_keys(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The config keys a multi-node job adds (the same on every node)."""
    cpu = {is_simulated_cpu(r) for r in records}
    if len(cpu) > 1:
        names = ", ".join(str(r.get("host")) for r in records)
        raise RadeonlabError(f"{names}: a multi-node job needs the same kind of node (all GPU or all CPU)")
    backend = MULTINODE_DEFAULTS["backend_cpu" if cpu.pop() else "backend_gpu"]
    return {"ddp_backend": backend, "save_on_each_node": True}


def common_spec(spec: Spec, records: Sequence[Mapping[str, Any]]) -> tuple[Spec, str | None]:
    """The spec every node renders: when the cards differ in bf16 and the spec leaves precision open,
    fp16 everywhere (one precision across ranks); a forced bf16 on a card without it is refused by render."""
    open_choice = not any(spec.train.get(k) is True for k in PRECISION_KEYS)
    lacking = [r["host"] for r in records for g in pick_gpus(r, None) if not g.get("bf16")]
    if open_choice and lacking and len(lacking) < len(records) and not any(map(is_simulated_cpu, records)):
        train = {**spec.train, "fp16": True}
        return dataclasses.replace(spec, train=train), f"fp16 on every node: {', '.join(lacking)} has no bf16"
    return spec, None


def pick_targets(
    targets: Mapping[str, HostTarget], wanted: str | None, spec: Spec, count: int, say: Any
) -> list[HostTarget]:
    """`--host a,b` (exactly `count` names, rank 0 first), else placement's `count` best hosts."""
    if wanted:
        names = [n.strip() for n in wanted.split(",") if n.strip()]
        if len(names) != count or len(set(names)) != count:
            raise RadeonlabError(f"--nodes {count} needs {count} different hosts in --host (got {wanted!r})")
        return [get_host(targets, n) for n in names]
    return placement.place(targets, placement.needs_of(spec), count, say=say)


def login_path(remote: Remote) -> str:
    """The PATH a login shell has on the host (what the launcher's `bash -lc` sees)."""
    return remote.run(["bash", "-lc", 'printf %s "$PATH"']).stdout.strip()


def submit_nodes(
    spec: Spec,
    spec_path: str | Path,
    inventory: str | Path,
    targets: Mapping[str, HostTarget],
    host: str | None,
    count: int,
    *,
    allow_shared: bool,
    say: Any,
    progress_bar: Any,
    strict: bool = False,
) -> Any:
    """Place, render, check, upload and launch a `count`-node job; returns rank 0's runner.SubmitResult.

    Every node is rendered and pre-flight checked (VRAM estimate; --strict refuses) before anything is
    uploaded, then staged by runner.stage_job exactly like a single-node job (supervisor files, secrets),
    and started with the launcher's no-queue mode: a rank waiting in its host's GPU line while its peer
    waits in torchrun's rendezvous would time out, so a busy GPU on any node cancels every node."""
    from radeonlab.jobs.apply import submit as runner

    chosen = pick_targets(targets, host, spec, count, say)
    nodes = plan_nodes(chosen)
    port = master_port(chosen[0])
    job_id = new_job_id(Path(spec_path).stem)
    created = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    with contextlib.ExitStack() as stack:
        remotes = [stack.enter_context(connect(t)) for t in chosen]
        records = [read_host_record(r, str(inventory)) for r in remotes]
        for record in records:
            runner.check_placement(spec, record)
        extra_keys = multinode_keys(records)
        spec_used, precision_note = common_spec(spec, records)
        model_dir = local_model_dir(spec)
        renders = []
        for node, target, record in zip(nodes, chosen, records, strict=True):
            paths = JobPaths.for_job(record["jobs_dir"], job_id)
            rendered = render(
                spec_used,
                record,
                paths,
                job_id=job_id,
                model_local=model_dir is not None,
                base_dataset_info=runner._local_dataset_info(spec),
            )
            _add_multinode(rendered, record, extra_keys, node, nodes, port, job_id, precision_note)
            say(f"{job_id}: rank {node.rank} on {target.name} ({node.address}), {rendered.notes[0]}")
            runner.preflight_check(rendered, record, model_dir, strict, say)  # before any node uploads
            renders.append(rendered)
        staged = []
        for node, target, remote, record, rendered in zip(
            nodes, chosen, remotes, records, renders, strict=True
        ):
            gpus = pick_gpus(record, None)
            env = node_env(
                node.rank, nodes, port, max(1, len(gpus)), target, record["venv"], login_path(remote)
            )
            staged.append(
                runner.stage_job(
                    remote,
                    record,
                    spec,
                    spec_path,
                    rendered,
                    job_id=job_id,
                    created=created,
                    say=say,
                    progress_bar=progress_bar,
                    node_env=env,
                    job_extra={"nodes": nodes_block(node.rank, nodes, port)},
                )
            )
        # every node staged: now start them, rank 0 first (its torchrun serves the rendezvous store)
        for remote, record, one in zip(remotes, records, staged, strict=True):
            remote.run(
                launch.start_argv(launch.launcher_argv(one.paths, record["venv"], allow_shared, queue=False))
            )
        states = [runner.wait_started(r, one.paths) for r, one in zip(remotes, staged, strict=True)]
        refused = [(t.name, s) for t, s in zip(chosen, states, strict=True) if s.state.is_finished()]
        if refused:
            for remote, one in zip(remotes, staged, strict=True):
                remote.run(launch.cancel_argv(one.paths), check=False)  # a lone rank would wait for its peer
            why = "; ".join(f"{name}: {s.state.value} ({s.reason})" for name, s in refused)
            raise RadeonlabError(f"{job_id}: a node did not start, every node cancelled: {why}")
        with contextlib.closing(store.connect()) as conn:  # the job's row is rank 0's
            store.upsert_from_host(
                conn,
                store.HostJob(chosen[0].name, str(staged[0].paths.root), staged[0].job, states[0].to_dict()),
            )
    peers = ", ".join(f"rank {n.rank} {n.host}" for n in nodes)
    return runner.SubmitResult(
        job_id,
        chosen[0].name,
        str(staged[0].paths.root),
        renders[0].precision,
        states[0],
        staged[0].datasets,
        staged[0].model,
        [*renders[0].notes, f"{count} nodes: {peers}; rendezvous {nodes[0].address}:{port}"],
    )


def _add_multinode(
    rendered: Rendered,
    record: Mapping[str, Any],
    keys: Mapping[str, Any],
    node: Node,
    nodes: Sequence[Node],
    port: int,
    job_id: str,
    precision_note: str | None,
) -> None:
    """Add the multi-node keys to a rendered config and re-render its YAML (with why, in the header)."""
    rendered.config.update(keys)
    if precision_note:
        rendered.notes.insert(0, precision_note)
    rendered.notes.append(
        f"multi-node: {len(nodes)} nodes, rendezvous {nodes[0].address}:{port}; "
        f"ddp_backend {keys['ddp_backend']}; save_on_each_node (each node's job folder is on its own disk)"
    )
    rendered.yaml_text = to_yaml(rendered, record, pick_gpus(record, None), job_id)

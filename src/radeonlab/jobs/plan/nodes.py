"""Multi-node arithmetic: ranks, addresses, the environment of each rank, and the keys every rank shares.

A job across N workstations is the same plan as a one-host job, with one NodePlan per host. What makes it one
job is the environment each launcher passes to `llamafactory-cli train` through job.json's `env`:

    FORCE_TORCHRUN=1 NNODES=N NODE_RANK=i MASTER_ADDR=<rank 0's address> MASTER_PORT=<port> NPROC_PER_NODE=n

LLaMA-Factory then runs `torchrun --nnodes N --node_rank i --nproc_per_node n --master_addr A --master_port P`
(static rendezvous: rank 0's torchrun serves the TCP store on P, the others connect).

- Rank 0 = the first host (placement's best, or the first of `--host a,b`). Its address is the one the other
  hosts reach it by: the inventory's ssh_hostname, or host data `radeonlab_node_address` when the SSH name is
  not the LAN address (a jump host, a DNS name the peers cannot resolve).
- MASTER_PORT: rank 0's host data `radeonlab_master_port`, default 29500 (torch's usual port).
- `radeonlab_node_env` (host data, a mapping) adds per-host environment, e.g. NCCL_SOCKET_IFNAME /
  GLOO_SOCKET_IFNAME to pin the interface.
- NPROC_PER_NODE is explicit: LLaMA-Factory's default is torch's device count, which is 0 on a CPU host.
- PATH: LLaMA-Factory calls `torchrun` by name; the launcher puts the venv's bin first on every job's PATH.
- Backend: `nccl` on cards (ROCm torch answers to it with RCCL), `gloo` on CPU hosts; set for multi-node only.
- `save_on_each_node: true`: each node keeps its own checkpoints (a resume needs them on every node).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from radeonlab.contract.parts import Nodes, Peer
from radeonlab.contract.records import HostRecord
from radeonlab.errors import InputError
from radeonlab.jobs.fleet.inventory import HostTarget, get_host
from radeonlab.jobs.plan.render import PRECISION_KEYS
from radeonlab.jobs.spec.load import Spec

MULTINODE_DEFAULTS: dict[str, Any] = {
    "master_port": 29500,
    "address_key": "radeonlab_node_address",  # host data: the address peers reach this host by
    "port_key": "radeonlab_master_port",  # host data of rank 0: the rendezvous port
    "env_key": "radeonlab_node_env",  # host data: extra env for this host's rank (interface pinning...)
    "backend_gpu": "nccl",  # RCCL in ROCm torch
    "backend_cpu": "gloo",
}


def node_address(target: HostTarget) -> str:
    """The address the other nodes reach `target` by."""
    return str(target.data.get(MULTINODE_DEFAULTS["address_key"]) or target.hostname)


def master_port(target: HostTarget) -> int:
    return int(target.data.get(MULTINODE_DEFAULTS["port_key"]) or MULTINODE_DEFAULTS["master_port"])


def plan_nodes(targets: Sequence[HostTarget]) -> list[Peer]:
    return [Peer(rank, t.name, node_address(t)) for rank, t in enumerate(targets)]


def nodes_block(rank: int, nodes: Sequence[Peer], port: int) -> Nodes:
    """job.json's `nodes`: this host's rank and every peer."""
    return Nodes(rank, len(nodes), nodes[0].host, nodes[0].address, port, list(nodes))


def node_env(rank: int, nodes: Sequence[Peer], port: int, nproc: int, target: HostTarget) -> dict[str, str]:
    """The training process's environment on node `rank` (job.json `env`)."""
    extra = target.data.get(MULTINODE_DEFAULTS["env_key"]) or {}
    if not isinstance(extra, Mapping):
        raise InputError(f"{target.name}: host data {MULTINODE_DEFAULTS['env_key']} must be a mapping")
    return {
        "FORCE_TORCHRUN": "1",
        "NNODES": str(len(nodes)),
        "NODE_RANK": str(rank),
        "MASTER_ADDR": nodes[0].address,
        "MASTER_PORT": str(port),
        "NPROC_PER_NODE": str(nproc),
        **{str(k): str(v) for k, v in extra.items()},
    }


def shared_keys(records: Sequence[HostRecord]) -> dict[str, tuple[Any, str]]:
    """The config keys a multi-node job adds (the same on every node), with why."""
    cpu = {r.cpu_torch for r in records}
    if len(cpu) > 1:
        names = ", ".join(r.host for r in records)
        raise InputError(f"{names}: a multi-node job needs the same kind of node (all GPU or all CPU)")
    backend = MULTINODE_DEFAULTS["backend_cpu" if cpu.pop() else "backend_gpu"]
    return {
        "ddp_backend": (backend, f"multi-node: {backend} ({'CPU hosts' if backend == 'gloo' else 'RCCL'})"),
        "save_on_each_node": (True, "each node's job folder is on its own disk"),
    }


def common_spec(spec: Spec, records: Sequence[HostRecord]) -> tuple[Spec, str | None]:
    """The spec every node renders: when the cards differ in bf16 and the spec leaves precision open,
    fp16 everywhere (one precision across ranks); a forced bf16 on a card without it is refused by render."""
    open_choice = not any(spec.train.get(k) is True for k in PRECISION_KEYS)
    lacking = [r.host for r in records for g in r.training_gpus() if not g.bf16]
    if open_choice and lacking and len(lacking) < len(records) and not any(r.cpu_torch for r in records):
        train = {**spec.train, "fp16": True}
        return dataclasses.replace(spec, train=train), f"fp16 on every node: {', '.join(lacking)} has no bf16"
    return spec, None


def pick_named(targets: Mapping[str, HostTarget], wanted: str, count: int) -> list[HostTarget]:
    """`--host a,b`: exactly `count` different names, rank 0 first."""
    names = [n.strip() for n in wanted.split(",") if n.strip()]
    if len(names) != count or len(set(names)) != count:
        raise InputError(f"--nodes {count} needs {count} different hosts in --host (got {wanted!r})")
    return [get_host(targets, n) for n in names]

"""Multi-node planning without hosts: addresses, ports, the env each rank gets, the keys the config gets,
one precision across ranks, rank 0 as the job's face. (tests/test_multinode_e2e.py runs it on two hosts.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs import multinode
from jobs.errors import RadeonlabError
from jobs.hosts import HostTarget
from jobs.spec import parse_text


def target(name: str, address: str, **data: object) -> HostTarget:
    return HostTarget(name=name, hostname=address, data=data)


def record(host: str, bf16: bool | None, simulated: bool = False) -> dict:
    gpus = [] if bf16 is None else [{"index": 0, "name": "card", "gfx": "gfx1100", "bf16": bf16}]
    return {"host": host, "gpus": gpus, "torch": {"simulated_cpu_build": simulated}}


def test_master_is_the_first_host_at_the_address_its_peers_reach() -> None:
    a = target("ws1", "ws1.lan", radeonlab_master_port=29617)
    b = target("ws2", "10.0.0.12", radeonlab_node_address="10.1.0.12")
    nodes = multinode.plan_nodes([a, b])
    assert [(n.rank, n.host, n.address) for n in nodes] == [(0, "ws1", "ws1.lan"), (1, "ws2", "10.1.0.12")]
    assert multinode.master_port(a) == 29617
    assert multinode.master_port(b) == 29500  # the default: torch's usual port
    block = multinode.nodes_block(1, nodes, 29617)
    assert block["rank"] == 1 and block["master"] == "ws1" and block["master_addr"] == "ws1.lan"
    assert block["peers"] == [
        {"rank": 0, "host": "ws1", "address": "ws1.lan"},
        {"rank": 1, "host": "ws2", "address": "10.1.0.12"},
    ]


def test_each_rank_gets_llamafactorys_torchrun_environment() -> None:
    a = target("ws1", "10.0.0.11")
    b = target("ws2", "10.0.0.12", radeonlab_node_env={"NCCL_SOCKET_IFNAME": "enp5s0"})
    nodes = multinode.plan_nodes([a, b])
    env = multinode.node_env(1, nodes, 29500, 1, b, "/home/lab/radeonlab/venv", "/usr/bin:/bin")
    assert env == {
        "FORCE_TORCHRUN": "1",
        "NNODES": "2",
        "NODE_RANK": "1",
        "MASTER_ADDR": "10.0.0.11",
        "MASTER_PORT": "29500",
        "NPROC_PER_NODE": "1",  # explicit: LLaMA-Factory's default (device count) is 0 on a CPU host
        "PATH": "/home/lab/radeonlab/venv/bin:/usr/bin:/bin",  # LLaMA-Factory runs `torchrun` by name
        "NCCL_SOCKET_IFNAME": "enp5s0",
    }
    with pytest.raises(RadeonlabError, match="radeonlab_node_env must be a mapping"):
        multinode.node_env(0, nodes, 1, 1, target("x", "y", radeonlab_node_env="NCCL=1"), "/v", "/bin")


def test_backend_follows_the_kind_of_node_and_mixing_kinds_is_refused() -> None:
    gpu = multinode.multinode_keys([record("a", True), record("b", False)])
    assert gpu == {"ddp_backend": "nccl", "save_on_each_node": True}  # nccl = RCCL in ROCm torch
    cpu = multinode.multinode_keys([record("a", True, True), record("b", True, True)])
    assert cpu["ddp_backend"] == "gloo"
    with pytest.raises(RadeonlabError, match="same kind of node"):
        multinode.multinode_keys([record("a", True, True), record("b", True)])


def test_one_precision_across_ranks(tmp_path: Path) -> None:
    spec = parse_text("stage: sft\nfinetuning_type: lora\n", tmp_path / "s.yaml")
    mixed = [record("xtx", True), record("r6700", False)]
    used, note = multinode.common_spec(spec, mixed)
    assert used.train["fp16"] is True and note == "fp16 on every node: r6700 has no bf16"
    same, note = multinode.common_spec(spec, [record("a", True), record("b", True)])
    assert same is spec and note is None  # render picks bf16 on both
    forced = parse_text("stage: sft\nbf16: true\n", tmp_path / "f.yaml")
    assert multinode.common_spec(forced, mixed) == (forced, None)  # render refuses it on the 6700 XT


def test_explicit_hosts_must_name_every_node(tmp_path: Path) -> None:
    targets = {n: target(n, n) for n in ("ws1", "ws2", "ws3")}
    spec = parse_text("stage: sft\n", tmp_path / "s.yaml")
    chosen = multinode.pick_targets(targets, "ws2,ws1", spec, 2, print)
    assert [t.name for t in chosen] == ["ws2", "ws1"]  # the order given: ws2 is rank 0
    for wrong in ("ws1", "ws1,ws1", "ws1,ws2,ws3"):
        with pytest.raises(RadeonlabError, match="--nodes 2 needs 2 different hosts"):
            multinode.pick_targets(targets, wrong, spec, 2, print)


def test_rank_zero_is_the_jobs_face() -> None:
    assert multinode.is_rank_zero({"id": "x"})  # a single-node job
    assert multinode.is_rank_zero({"nodes": {"rank": 0}})
    assert not multinode.is_rank_zero({"nodes": {"rank": 1}})

"""Multi-node planning without hosts: addresses, ports, the env each rank gets, the keys the config gets,
one precision across ranks, rank 0 as the job's face, and apply_plan staging every rank before it starts
any. (tests/e2e/test_multinode_e2e.py runs it on two hosts.)"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from radeonlab.contract.records import JobRecord
from radeonlab.errors import InputError, RadeonlabError
from radeonlab.jobs.apply import submit
from radeonlab.jobs.host import launcher
from radeonlab.jobs.plan import nodes as multinode
from radeonlab.jobs.spec.load import parse_text
from radeonlab.jobs.ssh import hostcode
from radeonlab.jobs.track.resume import common_checkpoint_step
from tests.support.laptop_doubles import demo_job, gpu, host_record, planned_on, target


def test_master_is_the_first_host_at_the_address_its_peers_reach() -> None:
    a = target("ws1", "ws1.lan", radeonlab_master_port=29617)
    b = target("ws2", "10.0.0.12", radeonlab_node_address="10.1.0.12")
    nodes = multinode.plan_nodes([a, b])
    assert [(n.rank, n.host, n.address) for n in nodes] == [(0, "ws1", "ws1.lan"), (1, "ws2", "10.1.0.12")]
    assert multinode.master_port(a) == 29617
    assert multinode.master_port(b) == 29500  # the default: torch's usual port
    block = asdict(multinode.nodes_block(1, nodes, 29617))  # as job.json holds it
    assert block["rank"] == 1 and block["master"] == "ws1" and block["master_addr"] == "ws1.lan"
    assert block["world_size"] == 2 and block["master_port"] == 29617
    assert block["peers"] == [
        {"rank": 0, "host": "ws1", "address": "ws1.lan"},
        {"rank": 1, "host": "ws2", "address": "10.1.0.12"},
    ]


def test_each_rank_gets_llamafactorys_torchrun_environment() -> None:
    a = target("ws1", "10.0.0.11")
    b = target("ws2", "10.0.0.12", radeonlab_node_env={"NCCL_SOCKET_IFNAME": "enp5s0"})
    nodes = multinode.plan_nodes([a, b])
    assert multinode.node_env(1, nodes, 29500, 1, b) == {
        "FORCE_TORCHRUN": "1",
        "NNODES": "2",
        "NODE_RANK": "1",
        "MASTER_ADDR": "10.0.0.11",
        "MASTER_PORT": "29500",
        "NPROC_PER_NODE": "1",  # explicit: LLaMA-Factory's default (device count) is 0 on a CPU host
        "NCCL_SOCKET_IFNAME": "enp5s0",
    }
    with pytest.raises(InputError, match="radeonlab_node_env must be a mapping"):
        multinode.node_env(0, nodes, 1, 1, target("x", "y", radeonlab_node_env="NCCL=1"))


def test_the_launcher_puts_the_venv_first_on_path_for_torchrun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LLaMA-Factory runs `torchrun` by name: the launcher's child environment finds the venv's first; the
    job's env (NODE_RANK ...) reaches the training, radeonlab's own PYTHONPATH does not."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("PYTHONPATH", "/job/host")
    job = JobRecord("j", "j", "j.yaml", "t", "ws2", gpus=[0], env={"NODE_RANK": "1"})
    env = launcher.child_env(str(tmp_path), job, {"HF_TOKEN": "x"}, "/home/lab/radeonlab/venv")
    assert env["PATH"] == "/home/lab/radeonlab/venv/bin:/usr/bin:/bin"
    assert (env["NODE_RANK"], env["HIP_VISIBLE_DEVICES"], env["HF_TOKEN"]) == ("1", "0", "x")
    assert "PYTHONPATH" not in env


def test_backend_follows_the_kind_of_node_and_mixing_kinds_is_refused() -> None:
    xtx, r6700 = host_record("a", [gpu("rx7900xtx")]), host_record("b", [gpu("rx6700xt")])
    cpu_a, cpu_b = host_record("a", cpu_torch=True), host_record("b", cpu_torch=True)
    keys = multinode.shared_keys([xtx, r6700])
    assert {k: v for k, (v, _why) in keys.items()} == {"ddp_backend": "nccl", "save_on_each_node": True}
    assert keys["ddp_backend"][1] == "multi-node: nccl (RCCL)"  # nccl = RCCL in ROCm torch
    assert multinode.shared_keys([cpu_a, cpu_b])["ddp_backend"][0] == "gloo"
    with pytest.raises(InputError, match="a multi-node job needs the same kind of node"):
        multinode.shared_keys([cpu_a, r6700])


def test_one_precision_across_ranks(tmp_path: Path) -> None:
    spec = parse_text("stage: sft\nfinetuning_type: lora\n", tmp_path / "s.yaml")
    mixed = [host_record("xtx", [gpu("rx7900xtx")]), host_record("r6700", [gpu("rx6700xt")])]
    used, note = multinode.common_spec(spec, mixed)
    assert used.train["fp16"] is True and note == "fp16 on every node: r6700 has no bf16"
    assert "fp16" not in spec.train  # the spec itself is left as written
    same = [host_record("a", [gpu("rx7900xtx")]), host_record("b", [gpu("rx9070xt")])]
    assert multinode.common_spec(spec, same) == (spec, None)  # render picks bf16 on both
    forced = parse_text("stage: sft\nbf16: true\n", tmp_path / "f.yaml")
    assert multinode.common_spec(forced, mixed) == (forced, None)  # render refuses it on the 6700 XT


def test_explicit_hosts_must_name_every_node() -> None:
    targets = {n: target(n) for n in ("ws1", "ws2", "ws3")}
    chosen = multinode.pick_named(targets, "ws2,ws1", 2)
    assert [t.name for t in chosen] == ["ws2", "ws1"]  # the order given: ws2 is rank 0
    for wrong in ("ws1", "ws1,ws1", "ws1,ws2,ws3"):
        with pytest.raises(InputError, match="--nodes 2 needs 2 different hosts"):
            multinode.pick_named(targets, wrong, 2)
    with pytest.raises(InputError, match="unknown host 'ws9'"):
        multinode.pick_named(targets, "ws1,ws9", 2)


def test_rank_zero_is_the_jobs_face() -> None:
    base = {"id": "x", "name": "x", "spec_file": "x.yaml", "created_at": "t", "host": "ws1"}
    assert JobRecord.from_dict(base).rank == 0  # a single-node job
    assert JobRecord.from_dict({**base, "nodes": {"rank": 0}}).rank == 0
    assert JobRecord.from_dict({**base, "nodes": {"rank": 1}}).rank == 1


def test_peer_hosts_are_the_other_ranks() -> None:
    base = {"id": "x", "name": "x", "spec_file": "x.yaml", "created_at": "t", "host": "ws2"}
    peers = {"rank": 1, "peers": [{"rank": 0, "host": "ws1"}, {"rank": 1, "host": "ws2"}]}
    assert JobRecord.from_dict({**base, "nodes": peers}).peers() == [(0, "ws1")]
    assert JobRecord.from_dict(base).peers() == []


BUSY = "GPU 0 is in use by other-job (lock /l/gpu0.lock)"


def two_node_answer(module: str, args: list[str], request: dict[str, Any] | None) -> dict[str, Any]:
    """The hosts: ws1's launcher starts; ws2's refuses at once (its GPU is busy, no queueing for a rank)."""
    if module == "stage" and request and request.get("launch"):
        if request["job_dir"].startswith("/ws2/"):
            return {"state": {"state": "failed", "exit_code": 75, "end": "gpu_busy", "reason": BUSY}}
        return {"state": {"state": "running", "pid": 7}, "alive": True}
    if module == "launcher":
        return {"state": "cancelled"}
    return {"state": {"state": "queued"}, "alive": False}


def test_ranks_are_staged_like_one_host_and_a_busy_gpu_cancels_every_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """plan_job + apply_plan for `--host ws1,ws2 --nodes 2` with recording remotes: every rank is staged
    (job.json with its rank, remedies and env, the supervisor's config.json, the host code) before any
    starts; then each starts without queueing, rank 0 first. ws2's launcher refuses: every rank is
    cancelled and the error is one line."""
    spec = demo_job(tmp_path)
    hosts = {
        n: (target(n, f"10.0.0.{i + 1}"), host_record(n, cpu_torch=True, jobs_dir=f"/{n}/jobs", venv="/v"))
        for i, n in enumerate(("ws1", "ws2"))
    }
    monkeypatch.setattr(submit, "upload_blobs", lambda remote, files, blobs, bar: (set(), 0))
    monkeypatch.setenv("RADEONLAB_HOME", str(tmp_path / "home"))
    seen: list[tuple[str, str]] = []  # (host, stage | start), in the order the hosts were asked

    def answer(module: str, args: list[str], request: dict[str, Any] | None) -> dict[str, Any]:
        if module == "stage" and request:
            seen.append((request["job_dir"].split("/")[1], "start" if request.get("launch") else "stage"))
        return two_node_answer(module, args, request)

    plan, fleet = planned_on(spec, hosts, answer, host="ws1,ws2", nodes=2)
    with fleet, pytest.raises(RadeonlabError) as err:
        submit.apply_plan(plan, fleet, say=lambda _m: None)
    message = str(err.value)
    assert "\n" not in message
    assert message == f"{plan.job_id}: a node did not start, every node cancelled: ws2: failed ({BUSY})"
    remotes: dict[str, Any] = dict(fleet.remotes)  # RecordingRemotes (closed now, their calls kept)
    # every rank staged before any starts, rank 0 started first
    assert seen == [("ws1", "stage"), ("ws2", "stage"), ("ws1", "start"), ("ws2", "start")]
    for rank, node in enumerate(plan.nodes):
        stages = remotes[node.host].of("stage")
        staged, start = stages[0].request, stages[1].request
        assert staged is not None and start is not None
        assert staged["launch"] is None and staged["job_dir"] == node.job.root  # staged, not started
        job = staged["job"]
        assert job["nodes"]["rank"] == rank and job["nodes"]["world_size"] == 2 and "nan" in job["remedies"]
        assert job["env"]["NODE_RANK"] == str(rank) and job["env"]["MASTER_ADDR"] == "10.0.0.1"
        assert job["code"]["files"] == hostcode.file_digests()  # what the launcher checks before it runs
        assert {"config.yaml", "config.json", "data/dataset_info.json"} <= set(staged["files"])
        assert staged["code"].endswith(hostcode.digest())
        assert start["launch"]["queue"] is False and start["launch"]["venv"] == "/v"
        cancels = remotes[node.host].of("launcher")
        assert [c.args for c in cancels] == [["cancel", node.job.root]]  # every rank, ws1 included
    assert plan.nodes[0].rendered.config["ddp_backend"] == "gloo"  # CPU hosts


@pytest.mark.parametrize(
    "listings,step",
    [
        ([["checkpoint-10/trainer_state.json", "checkpoint-20/trainer_state.json"],
          ["checkpoint-10/trainer_state.json", "checkpoint-20/adapter_model.safetensors"]], 10),
        ([["checkpoint-10/trainer_state.json"], ["checkpoint-20/trainer_state.json"]], 0),
        ([["checkpoint-30/trainer_state.json", "checkpoint-20/trainer_state.json"],
          ["checkpoint-20/trainer_state.json", "checkpoint-30/trainer_state.json"]], 30),
        ([[], ["checkpoint-10/trainer_state.json"]], 0),
    ],
)  # fmt: skip
def test_ranks_resume_from_the_newest_complete_checkpoint_all_hold(listings: list, step: int) -> None:
    assert common_checkpoint_step(listings) == step


class _PeersAnswer:
    """A handle whose rank 0 has succeeded; each call of peer_states returns the next answer."""

    def __init__(self, *answers: list) -> None:
        from radeonlab.contract.records import StateRecord
        from radeonlab.contract.state import JobState

        self.answers = list(answers)
        self.asked = 0
        self.state = StateRecord(JobState.SUCCEEDED)

    def peer_states(self) -> list:
        self.asked += 1
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def _rank(state: str | None, error: str | None = None):
    from radeonlab.contract.records import StateRecord
    from radeonlab.contract.state import JobState
    from radeonlab.jobs.track.handle import RankResult

    return RankResult(1, "ws2", StateRecord(JobState(state)) if state else None, error)


def test_watch_returns_when_every_rank_has_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 0 ends first; torchrun's agent on the other node records its end seconds later: watch waits for
    it (the multi-node e2e test read `running` on rank 1 just after watch returned)."""
    from radeonlab.jobs.track import watch

    said: list[str] = []
    handle = _PeersAnswer([_rank("running")], [_rank("running")], [_rank("succeeded")])
    ranks = watch.wait_for_peers(handle, said.append, poll_s=0)  # type: ignore[arg-type]
    assert handle.asked == 3 and ranks[0].state.state.value == "succeeded" and said == []

    failed = _PeersAnswer([_rank("failed")])
    watch.wait_for_peers(failed, said.append, poll_s=0)  # type: ignore[arg-type]
    assert said == ["rank 1 on ws2: failed"]

    said.clear()
    monkeypatch.setitem(watch.FOLLOW, "peers_end_s", 0.0)
    stuck = _PeersAnswer([_rank("running")])
    watch.wait_for_peers(stuck, said.append, poll_s=0)  # type: ignore[arg-type]
    assert said == ["rank 1 on ws2 is still running 0s after rank 0 ended"]

    said.clear()
    watch.wait_for_peers(_PeersAnswer([_rank(None, "cannot reach ws2")]), said.append, poll_s=0)  # type: ignore[arg-type]
    assert said == ["rank 1 on ws2: cannot reach ws2"]

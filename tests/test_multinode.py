"""Multi-node planning without hosts: addresses, ports, the env each rank gets, the keys the config gets,
one precision across ranks, rank 0 as the job's face. (tests/test_multinode_e2e.py runs it on two hosts.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from radeonlab.jobs.apply import launch
from radeonlab.jobs.apply import submit as runner
from radeonlab.jobs.apply.sync import UploadReport
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.plan import nodes as multinode
from radeonlab.jobs.spec.load import load, parse_text
from radeonlab.jobs.ssh.connection import RunResult

from radeonlab.contract.records import JobPaths
from radeonlab.errors import RadeonlabError


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


class NodeRemote:
    """A Remote stand-in for one node (no SSH): records commands and files; its launcher reports `state`."""

    def __init__(self, name: str, state: dict) -> None:
        self.target = target(name, f"10.0.0.{len(name)}")
        self.state = state
        self.runs: list[list[str]] = []
        self.writes: dict[str, str] = {}

    def run(self, argv: list[str], check: bool = True, stdin_text: str | None = None, **_kw: object):  # noqa: ANN201
        self.runs.append(list(argv))
        if argv[:2] == ["bash", "-lc"]:
            return RunResult("/usr/bin:/bin", "", 0)
        if argv[2:3] == ["status"]:
            return RunResult(json.dumps(self.state), "", 0)
        return RunResult("", "", 0)

    def write_text_atomic(self, path: str, text: str) -> None:
        self.writes[path] = text

    def __enter__(self) -> NodeRemote:
        return self

    def __exit__(self, *_exc: object) -> None:
        pass


def test_ranks_are_staged_like_one_host_and_a_busy_gpu_cancels_every_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each rank gets the supervisor's files and supervision fields (runner.stage_job) and starts with
    --no-queue; ws2's GPU is busy, so its launcher refuses at once: both ranks cancelled, one line."""
    busy = {"state": "failed", "exit_code": 75, "reason": "GPU 0 is in use by other-job (lock /l/gpu0.lock)"}
    remotes = {"ws1": NodeRemote("ws1", {"state": "running", "pid": 7}), "ws2": NodeRemote("ws2", busy)}
    records = {
        n: {
            "host": n,
            "gpus": [],
            "torch": {"simulated_cpu_build": True},
            "jobs_dir": f"/{n}/jobs",
            "venv": "/v",
        }
        for n in remotes
    }
    monkeypatch.setattr(multinode, "connect", lambda t: remotes[t.name])
    monkeypatch.setattr(multinode, "read_host_record", lambda r, _inv: records[r.target.name])
    monkeypatch.setattr(runner, "upload_files", lambda *_a, **_k: UploadReport())
    monkeypatch.setenv("RADEONLAB_HOME", str(tmp_path / "home"))
    spec_path = tmp_path / "two.yaml"
    spec_path.write_text("stage: sft\nfinetuning_type: lora\ndataset_dir: ONLINE\n")
    spec = load(spec_path)
    targets = {n: r.target for n, r in remotes.items()}
    with pytest.raises(RadeonlabError) as err:
        multinode.submit_nodes(
            spec, spec_path, "inv.py", targets, "ws1,ws2", 2, allow_shared=False, say=lambda _m: None,
            progress_bar=runner.no_progress,
        )  # fmt: skip
    message = str(err.value)
    assert "\n" not in message and message.endswith(
        f"a node did not start, every node cancelled: ws2: failed ({busy['reason']})"
    )
    for rank, (name, remote) in enumerate(remotes.items()):
        paths = JobPaths.for_job(records[name]["jobs_dir"], message.split(":")[0])
        job = json.loads(remote.writes[str(paths.job)])
        assert job["nodes"]["rank"] == rank and "remedies" in job and job["env"]["NODE_RANK"] == str(rank)
        assert str(paths.config_json) in remote.writes  # the supervisor's first config
        python = launch.LAUNCH_DEFAULTS["host_python"]
        assert any(a[:2] == [python, "-c"] for a in remote.runs)  # the supervisor's code installed
        starts = [a for a in remote.runs if a[:2] == ["sh", "-c"] and "launcher.py" in a[2]]
        assert len(starts) == 1 and "--no-queue" in starts[0][2]
        assert launch.cancel_argv(paths) in remote.runs  # both ranks cancelled


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
    from radeonlab.jobs.track.resume import common_checkpoint_step

    assert common_checkpoint_step(listings) == step


def test_peer_hosts_are_the_other_ranks() -> None:
    job = {"nodes": {"rank": 1, "peers": [{"rank": 0, "host": "ws1"}, {"rank": 1, "host": "ws2"}]}}
    assert multinode.peer_hosts(job) == [(0, "ws1")]
    assert multinode.peer_hosts({"id": "single"}) == []

"""jobs/plan/slurm.py: the pure pieces of `radeonlab_scheduler: slurm`, over output recorded from Slurm
22.05.8 on the SIMULATED lab (tests/fixtures/slurm/, see tests/fixtures/SOURCES.md)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from radeonlab.contract.parts import Nodes
from radeonlab.contract.records import JobRecord
from radeonlab.contract.state import JobState
from radeonlab.jobs.plan import slurm
from radeonlab.jobs.plan.wishes import CardWishes

FIXTURES = Path(__file__).parents[1] / "fixtures" / "slurm"
NODES = slurm.parse_sinfo((FIXTURES / "sinfo-three-nodes.txt").read_text())


# --- which scheduler ------------------------------------------------------------------------------------


def test_builtin_queue_unless_asked() -> None:
    assert slurm.slurm_controller({}, {"ws1": {}, "ws2": {"radeonlab_scheduler": "builtin"}}) is None
    groups = {"slurm_controller": ["ctl"], "slurm_nodes": ["ws1"]}
    assert slurm.slurm_controller(groups, {"ws1": {"radeonlab_scheduler": "slurm"}}) == "ctl"


def test_slurm_without_controller_group_is_refused_in_one_line() -> None:
    with pytest.raises(slurm.SlurmError) as err:
        slurm.slurm_controller({"workstations": ["ws1"]}, {"ws1": {"radeonlab_scheduler": "Slurm"}})
    assert str(err.value) == (
        "radeonlab_scheduler is slurm for ws1 but the inventory has no slurm_controller group: add the host "
        "that runs slurmctld to a group slurm_controller and provision it (roles/slurm/README.md)"
    )


# --- nodes and constraints ----------------------------------------------------------------------------------


def test_sinfo_fixture() -> None:
    assert [(n.name, n.state, n.gpus, n.usable) for n in NODES] == [
        ("sl-1", "mixed", 1, True),
        ("sl-2", "mixed", 1, True),
        ("sl-3", "mixed", 1, True),
    ]
    assert "bf16" in NODES[0].features and "bf16" not in NODES[1].features
    assert slurm.gres_gpu_count("gpu:gfx1100:1,gpu:gfx1201:2(S:0)") == 3
    down = slurm.parse_sinfo("sl-3|down*|gfx1201,bf16|gpu:gfx1201:1|Not responding\n")[0]
    assert not down.usable and down.reason == "Not responding"


@pytest.mark.parametrize(
    ("wishes", "constraint", "able"),
    [
        (CardWishes(), "", ["sl-1", "sl-2", "sl-3"]),
        (CardWishes(bf16=True), "bf16", ["sl-1", "sl-3"]),  # never the RX 6700 XT
        (CardWishes(gfx_family="gfx110x"), "gfx110x", ["sl-1"]),
        (CardWishes(gfx_family="RDNA4", bf16=True), "rdna4&bf16", ["sl-3"]),
        (CardWishes(min_vram_gb=16), "(vram16g|vram24g)", ["sl-1", "sl-3"]),
        (CardWishes(gfx_family="gfx11", min_vram_gb=20), "gfx11&vram24g", ["sl-1"]),
    ],
)
def test_wishes_become_features(wishes: CardWishes, constraint: str, able: list[str]) -> None:
    assert slurm.plan_request(wishes, NODES) == (constraint, able)


@pytest.mark.parametrize(
    ("wishes", "nodes", "gpus", "message"),
    [
        (
            CardWishes(gfx_family="rdna2", bf16=True),
            1,
            1,
            "no Slurm node satisfies rdna2, bf16 with 1 GPU(s): "
            "sl-1 has bf16,gfx11,gfx1100,gfx110x,rdna3,vram24g, 1 GPU(s); "
            "sl-2 has gfx10,gfx1031,gfx103x,rdna2,vram12g, 1 GPU(s); "
            "sl-3 has bf16,gfx12,gfx1201,gfx120x,rdna4,vram16g, 1 GPU(s)",
        ),
        (CardWishes(), 4, 1, "--nodes 4: the Slurm lab has 3 node(s) (sl-1, sl-2, sl-3)"),
        (CardWishes(bf16=True), 3, 1, "--nodes 3: only 2 Slurm node(s) satisfy bf16 (sl-1, sl-3)"),
        (CardWishes(min_vram_gb=48), 1, 1, "no Slurm node satisfies min_vram_gb 48 with 1 GPU(s): "),
        (CardWishes(), 1, 2, "no Slurm node satisfies no wishes with 2 GPU(s): "),
    ],
)
def test_requests_no_node_can_take_are_refused_in_one_line(
    wishes: CardWishes, nodes: int, gpus: int, message: str
) -> None:
    with pytest.raises(slurm.SlurmError) as err:
        slurm.plan_request(wishes, NODES, node_count=nodes, gpus_per_node=gpus)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_nodes_3_on_a_two_node_lab() -> None:
    with pytest.raises(slurm.SlurmError, match=r"^--nodes 3: the Slurm lab has 2 node\(s\) \(sl-1, sl-2\)$"):
        slurm.plan_request(CardWishes(), NODES[:2], node_count=3)


# --- the sbatch script ---------------------------------------------------------------------------------

LAUNCHER = ["python3", "/home/lab/radeonlab/jobs/demo-1/host/launcher.py", "--job", "demo 1; $(x)"]


def test_single_node_script() -> None:
    job = slurm.BatchJob(
        "demo-20260101-120000-ab12",
        "/home/lab/radeonlab/jobs/demo-20260101-120000-ab12",
        LAUNCHER,
        constraint="bf16&(vram16g|vram24g)",
        env={"HF_HUB_OFFLINE": "1"},
    )
    text = slurm.sbatch_script(job)
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash -l"  # a login shell: the node's /etc/profile.d applies
    for directive in (
        "#SBATCH --job-name=demo-20260101-120000-ab12",
        "#SBATCH --nodes=1",
        "#SBATCH --gres=gpu:1",
        "#SBATCH --constraint=bf16&(vram16g|vram24g)",
        "#SBATCH --output=/home/lab/radeonlab/jobs/demo-20260101-120000-ab12/slurm-%j.out",
    ):
        assert directive in lines
    assert "export HF_HUB_OFFLINE=1" in lines
    assert lines[-1] == ("exec python3 /home/lab/radeonlab/jobs/demo-1/host/launcher.py --job 'demo 1; $(x)'")
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


def test_bad_env_name_refused() -> None:
    with pytest.raises(slurm.SlurmError, match="not an environment variable name"):
        slurm.sbatch_script(slurm.BatchJob("j", "/tmp/j", ["true"], env={"A B": "1"}))


def stub(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_two_node_script_gives_each_rank_torchrun_variables(tmp_path: Path) -> None:
    """The two-node script run with stand-in scontrol/srun (the real ones: tests/e2e/test_slurm.py): rank 0 is
    the allocation's first node, MASTER_ADDR its NodeAddr, each srun task gets NODE_RANK = SLURM_NODEID."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub(bin_dir / "scontrol", '#!/bin/sh\n[ "$2" = hostnames ] && printf "sl-1\\nsl-3\\n" && exit 0\n'
         '[ "$2" = node ] && echo "   NodeAddr=127.0.77.9 NodeHostName=$3 Version=22.05.8"\n')  # fmt: skip
    # srun: drop its options, run the command once per node with that node's SLURM_NODEID
    stub(bin_dir / "srun", '#!/bin/sh\nwhile [ "${1#--}" != "$1" ]; do shift; done\n'
         'for id in 0 1; do SLURM_NODEID=$id "$@"; done\n')  # fmt: skip
    show = "echo $NODE_RANK $MASTER_ADDR $MASTER_PORT $NNODES $NPROC_PER_NODE $FORCE_TORCHRUN"
    show += " $RADEONLAB_SLURM_NODES"
    job = slurm.BatchJob("j", str(tmp_path), ["sh", "-c", show], nodes=2, gpus_per_node=1, master_port=29500)
    script = tmp_path / "job.sh"
    script.write_text(slurm.sbatch_script(job))
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path)}
    env |= {"SLURM_JOB_NODELIST": "sl-[1,3]", "SLURM_JOB_ID": "1234"}
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    port = 29500 + 1234 % 1000
    assert done.stdout.splitlines() == [
        f"0 127.0.77.9 {port} 2 1 1 sl-1,sl-3",
        f"1 127.0.77.9 {port} 2 1 1 sl-1,sl-3",
    ]


def test_sbatch_parsable() -> None:
    assert slurm.parse_sbatch("42\n") == "42" and slurm.parse_sbatch("42;radeonlab\n") == "42"
    with pytest.raises(slurm.SlurmError, match="did not give a job id"):
        slurm.parse_sbatch("sbatch: error: Batch job submission failed: Invalid feature specification")


# --- states --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("word", "state"),
    [
        ("PENDING", JobState.QUEUED),
        ("REQUEUE_HOLD", JobState.QUEUED),
        ("RUNNING", JobState.RUNNING),
        ("COMPLETING", JobState.RUNNING),
        ("COMPLETED", JobState.SUCCEEDED),
        ("FAILED", JobState.FAILED),
        ("OUT_OF_MEMORY", JobState.FAILED),
        ("NODE_FAIL", JobState.FAILED),
        ("TIMEOUT", JobState.FAILED),
        ("CANCELLED by 1000", JobState.CANCELLED),
        ("cancelled", JobState.CANCELLED),
    ],
)
def test_state_map(word: str, state: JobState) -> None:
    assert slurm.job_state(word) is state


def test_unknown_state_refused() -> None:
    with pytest.raises(slurm.SlurmError, match="unknown Slurm job state 'EXPLODED'"):
        slurm.job_state("EXPLODED")


def test_squeue_text_and_json_agree() -> None:
    """Four one-GPU jobs on the three-GPU lab, recorded while three ran and one waited for a GPU."""
    text = slurm.parse_squeue((FIXTURES / "squeue-four-jobs.txt").read_text())
    summary = [(j.job_id, j.name, j.radeonlab_state, j.reason, j.nodes) for j in text]
    assert summary == [
        ("9", "four-4", JobState.QUEUED, "Resources", ()),
        ("6", "four-1", JobState.RUNNING, "", ("sl-1",)),
        ("7", "four-2", JobState.RUNNING, "", ("sl-2",)),
        ("8", "four-3", JobState.RUNNING, "", ("sl-3",)),
    ]
    # --json ignores squeue's filters: it also lists the jobs that ended within MinJobAge (1-5 here)
    data = slurm.parse_squeue_json(json.loads((FIXTURES / "squeue-four-jobs.json").read_text()))
    live = [(j.job_id, j.name, j.radeonlab_state, j.reason, j.nodes) for j in data if int(j.job_id) > 5]
    assert sorted(live) == sorted(summary)
    ended = [j for j in data if int(j.job_id) <= 5]
    assert len(ended) == 5 and {j.radeonlab_state for j in ended} == {JobState.SUCCEEDED}


def test_jobcomp_log() -> None:
    jobs = {j.job_id: j for j in slurm.parse_jobcomp_log((FIXTURES / "jobcomp.log").read_text())}
    assert sorted(jobs, key=int) == [str(i) for i in range(1, 10)]
    assert jobs["5"] == slurm.SlurmJob("5", "wrap", "COMPLETED", "exit 0:0", ("sl-2",))
    assert jobs["9"].radeonlab_state is JobState.CANCELLED and jobs["9"].nodes == ()  # cancelled waiting
    assert jobs["8"].radeonlab_state is JobState.SUCCEEDED and jobs["8"].nodes == ("sl-3",)


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("sl-1", ["sl-1"]),
        ("sl-[1-3,5]", ["sl-1", "sl-2", "sl-3", "sl-5"]),
        ("ws[01-02],ctl", ["ws01", "ws02", "ctl"]),
        ("", []),
        ("(null)", []),
    ],
)
def test_hostlist(text: str, names: list[str]) -> None:
    assert slurm.expand_hostlist(text) == names


# --- the job runner's side (jobs/apply/slurm.py, jobs/track/slurm.py): pure parts -------------------------


def _targets(**hosts: tuple[tuple[str, ...], dict]) -> dict:
    from radeonlab.jobs.fleet.inventory import HostTarget

    return {n: HostTarget(n, f"10.0.0.{i}", groups=g, data=d) for i, (n, (g, d)) in enumerate(hosts.items())}


def test_the_inventory_picks_the_scheduler_and_names_slurm_nodes() -> None:
    from radeonlab.jobs.apply.slurm import lab_of

    on = {"radeonlab_scheduler": "slurm"}
    targets = _targets(
        ctl=(("slurm_controller",), on),
        ws1=(("slurm_nodes",), {**on, "slurm_node_name": "gpu-a"}),
        ws2=(("slurm_nodes",), on),
        solo=((), {}),
    )
    lab = lab_of(targets)
    assert lab is not None and lab.controller.name == "ctl"
    assert {k: v.name for k, v in lab.hosts.items()} == {"gpu-a": "ws1", "ws2": "ws2"}
    assert lab.host_of("gpu-a") == "ws1" and lab.jobcomp_log == "/var/log/slurm/jobcomp.log"
    assert lab_of(targets, host="solo") is None  # a host of the built-in scheduler, named: no Slurm
    assert lab_of(targets, host="ws2") is not None
    assert lab_of(_targets(ws1=((), {}))) is None
    with pytest.raises(slurm.SlurmError, match="no slurm_controller group"):
        lab_of(_targets(ws1=(("slurm_nodes",), on)))


def test_the_batch_script_runs_the_launcher_without_radeonlab_queue_on_the_staged_nodes_only() -> None:
    from radeonlab.jobs.apply.slurm import launcher_argv

    argv = launcher_argv("/home/lab/radeonlab/jobs/demo-1", "/opt/radeonlab/venv")
    job = slurm.BatchJob("demo-1", "/home/lab/radeonlab/jobs/demo-1", argv, constraint="bf16",
                         exclude=("slurm-6700",))  # fmt: skip
    script = slurm.sbatch_script(job)
    assert "#SBATCH --constraint=bf16\n#SBATCH --exclude=slurm-6700\n" in script
    assert script.endswith(
        "exec env PYTHONPATH=/home/lab/radeonlab/jobs/demo-1/host python3 -m radeonlab.jobs.host.launcher "
        "run /home/lab/radeonlab/jobs/demo-1 --venv /opt/radeonlab/venv --allow-shared --no-queue\n"
    )


def test_a_folder_that_has_not_started_shows_what_slurm_says() -> None:
    from radeonlab.contract.records import StateRecord
    from radeonlab.jobs.track.slurm import fold, overlay

    queued = StateRecord.from_dict({"state": "queued"})
    pending = slurm.SlurmJob("7", "demo-1", "PENDING", "Resources", ())
    gone = slurm.SlurmJob("8", "demo-2", "CANCELLED", "exit 0:0", ())
    assert overlay(queued, pending).reason == "Slurm job 7 pending (Resources)"
    assert overlay(queued, gone).state is JobState.CANCELLED
    running = StateRecord.from_dict({"state": "running", "pid": 5})
    assert overlay(running, gone) is running  # a folder that started is the truth
    rows = [
        {"id": "demo-1", "state": "queued", "reason": "", "slurm": "7", "host": "ws1"},
        {"id": "demo-1", "state": "queued", "reason": "", "slurm": "7", "host": "ws2"},
        {"id": "demo-2", "state": "queued", "reason": "", "slurm": "8", "host": "ws1"},
        {"id": "demo-2", "state": "cancelled", "reason": "x", "slurm": "8", "host": "ws2"},
        {"id": "own-1", "state": "running", "reason": "", "slurm": "", "host": "ws3"},
    ]
    folded = {r["id"]: (r["host"], r["state"], r["reason"]) for r in fold(rows, {"demo-1": pending})}
    assert folded == {
        "demo-1": ("ws1", "queued", "Slurm job 7 pending (Resources)"),
        "demo-2": ("ws2", "cancelled", "x"),
        "own-1": ("ws3", "running", ""),
    }


def test_under_srun_the_allocation_names_the_ranks_not_job_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from radeonlab.contract.records import JobRecord
    from radeonlab.jobs.host import launcher

    job = JobRecord("j", "j", "j.yaml", "t", "ws2", gpus=[0], env={"NODE_RANK": "0", "MASTER_ADDR": "old"})
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("NODE_RANK", "1")
    outside = launcher.child_env(str(tmp_path), job, {}, "/v")
    assert (outside["NODE_RANK"], outside["MASTER_ADDR"]) == ("0", "old")  # the built-in: job.json
    monkeypatch.setenv("SLURM_JOB_ID", "12")
    monkeypatch.setenv("MASTER_ADDR", "127.0.77.3")
    inside = launcher.child_env(str(tmp_path), job, {}, "/v")
    assert (inside["NODE_RANK"], inside["MASTER_ADDR"]) == ("1", "127.0.77.3")


# --- two nodes through Slurm: planned without a rank, the rank recorded from the allocation at start -------

ALLOCATION = {"SLURM_JOB_ID": "41", "RADEONLAB_SLURM_NODES": "sl-3,sl-1", "NODE_RANK": "1", "NNODES": "2",
              "MASTER_ADDR": "127.0.77.3", "MASTER_PORT": "29541", "FORCE_TORCHRUN": "1",
              "NPROC_PER_NODE": "1"}  # fmt: skip
STAGED = {"id": "j", "env": {"GLOO_SOCKET_IFNAME": "lo"}, "nodes": {"world_size": 2},
          "slurm": {"nodes": {"sl-1": {"host": "ws1", "address": "127.0.77.1"},
                              "sl-3": {"host": "ws3", "address": "127.0.77.3"}}}}  # fmt: skip


def test_each_rank_records_its_rank_and_peers_from_the_allocation(tmp_path: Path) -> None:
    from radeonlab.jobs.host import launcher

    (tmp_path / "job.json").write_text(json.dumps(STAGED))
    raw = launcher.record_slurm_rank(str(tmp_path), dict(STAGED), ALLOCATION)
    assert json.loads((tmp_path / "job.json").read_text()) == raw  # written before anything else runs
    assert raw["nodes"] == {
        "rank": 1, "world_size": 2, "master": "ws3", "master_addr": "127.0.77.3", "master_port": 29541,
        "peers": [{"rank": 0, "host": "ws3", "address": "127.0.77.3"},
                  {"rank": 1, "host": "ws1", "address": "127.0.77.1"}],
        "slurm_job_id": "41", "slurm_node": "sl-1",
    }  # fmt: skip
    assert raw["env"] == {
        "GLOO_SOCKET_IFNAME": "lo",
        **{k: ALLOCATION[k] for k in launcher.SLURM_TORCHRUN_KEYS},
    }
    record = JobRecord.from_dict({"name": "j", "spec_file": "", "created_at": "", "host": "ws1", **raw})
    assert record.rank == 1 and record.peers() == [(0, "ws3")]
    # a one-node Slurm job, and the built-in scheduler, keep job.json as the laptop wrote it
    for environ in ({"SLURM_JOB_ID": "42"}, {k: v for k, v in ALLOCATION.items() if k != "SLURM_JOB_ID"}):
        (tmp_path / "job.json").write_text(json.dumps(STAGED))
        assert launcher.record_slurm_rank(str(tmp_path), dict(STAGED), environ) == STAGED
        assert json.loads((tmp_path / "job.json").read_text()) == STAGED


class _Remote:
    def __init__(self, sinfo: str) -> None:
        self.sinfo = sinfo

    def __enter__(self) -> _Remote:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def run(self, argv: list[str], **_kw: object) -> SimpleNamespace:
        assert argv[0] == "sinfo", argv
        return SimpleNamespace(stdout=self.sinfo)


def _node(host: str, env: dict[str, str]) -> SimpleNamespace:
    job = SimpleNamespace(root="/home/lab/radeonlab/jobs/demo-1")
    return SimpleNamespace(host=host, env=env, nodes={"rank": 9}, job=job, record=SimpleNamespace(venv="/v"))


def test_two_nodes_are_planned_as_ranks_of_one_job_on_every_candidate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """sinfo in -> one multi-node plan over every node that satisfies the wishes (one config for all), no
    rank or torchrun variable fixed, the per-host env kept; sbatch asks for two nodes and srun starts them."""
    from radeonlab.jobs.apply import slurm as apply

    targets = _targets(ctl=(("slurm_controller",), {}), **{
        n: (("slurm_nodes",), {"radeonlab_scheduler": "slurm", "slurm_node_name": f"sl-{i}"})
        for i, n in enumerate(["ws1", "ws2", "ws3"], 1)
    })  # fmt: skip
    lab = apply.lab_of(targets)
    asked: list[dict] = []

    def plan_job(*_observed: object, **kw: object) -> SimpleNamespace:
        asked.append(kw)
        rank_env = {"NODE_RANK": "0", "NNODES": "2", "MASTER_ADDR": "10.0.0.1", "GLOO_SOCKET_IFNAME": "lo"}
        nodes = [_node(h, dict(rank_env)) for h in str(kw["host"]).split(",")]
        return SimpleNamespace(nodes=nodes, rank0=nodes[0], job_id=kw["job_id"])

    monkeypatch.setattr(
        apply, "connect", lambda _t: _Remote((FIXTURES / "sinfo-three-nodes.txt").read_text())
    )
    monkeypatch.setattr(apply, "plan_job", plan_job)
    observed: list[tuple[str, int]] = []  # the hosts probed (one probe each), as ranks or not
    monkeypatch.setattr(
        apply, "observe_job", lambda *_a, host, nodes, **_k: observed.append((host, nodes)) or (None, {})
    )
    fleet = SimpleNamespace(inventory="inv.py", targets=targets)
    monkeypatch.setattr(
        apply, "load_checked", lambda *_a: (SimpleNamespace(radeonlab=SimpleNamespace(nodes=1)), [])
    )
    monkeypatch.setattr(apply, "asks_of", lambda *_a: SimpleNamespace(card=CardWishes(bf16=True)))
    said: list[str] = []
    sp = apply.plan_slurm_job("demo.yaml", fleet, lab, nodes=2, say=said.append)  # type: ignore[arg-type]
    assert observed == [("ws1,ws3", 2)]
    [kw] = asked
    assert (kw["host"], kw["nodes"], kw["allow_shared"]) == ("ws1,ws3", 2, True)  # the bf16 nodes, as ranks
    assert [(n.host, n.env, n.nodes) for n in sp.plan.nodes] == [
        (h, {"GLOO_SOCKET_IFNAME": "lo"}, Nodes(world_size=2)) for h in ("ws1", "ws3")
    ]
    assert (sp.nodes, sp.constraint, sp.exclude) == (2, "bf16", ["sl-2"])
    assert said[-1].endswith("Slurm may run it on 2 of ws1, ws3 (--constraint=bf16)")
    assert apply.slurm_info(sp).to_dict() == {
        "controller": "ctl", "candidates": ["ws1", "ws3"],
        "nodes": {"sl-1": {"host": "ws1", "address": "10.0.0.1"},
                  "sl-3": {"host": "ws3", "address": "10.0.0.3"}},
    }  # fmt: skip
    script = apply.batch_script(sp)
    assert "#SBATCH --nodes=2\n" in script and "#SBATCH --exclude=sl-2\n" in script
    assert "exec srun --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 " in script
    assert script.rstrip().endswith("run /home/lab/radeonlab/jobs/demo-1 --venv /v --allow-shared --no-queue")
    # one node: each candidate planned as a job of its own, as before
    asked.clear()
    apply.plan_slurm_job("demo.yaml", fleet, lab, nodes=1, say=said.append)  # type: ignore[arg-type]
    assert [(kw["host"], kw["nodes"]) for kw in asked] == [("ws1", 1), ("ws3", 1)]
    assert observed[-1] == ("ws1,ws3", 2)  # both candidates probed once, then planned one by one


def test_cancel_marks_every_rank_then_scancels_then_stops_what_is_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The marker first (each supervisor Slurm stops records a cancel), then scancel (Slurm records CANCELLED,
    not the launchers' exit as FAILED), then the launcher's cancel on every candidate."""
    from radeonlab.contract.parts import SlurmInfo
    from radeonlab.jobs.track import slurm as track

    calls: list[tuple[str, str]] = []

    class Remote:
        def __init__(self, target: object) -> None:
            self.name = target.name  # type: ignore[attr-defined]

        def __enter__(self) -> Remote:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def close(self) -> None:
            pass

        def run(self, argv: list[str], **_kw: object) -> SimpleNamespace:
            calls.append((self.name, " ".join(argv)))
            return SimpleNamespace(ok=True)

        def tool(self, name: str, argv: list[str]) -> SimpleNamespace:
            calls.append((self.name, " ".join([name, *argv])))
            return SimpleNamespace(last_json=lambda: {"state": "cancelled"})

    record = SimpleNamespace(job_dir=lambda job_id: SimpleNamespace(root=f"/jobs/{job_id}"))
    monkeypatch.setattr(track, "connect", Remote)
    monkeypatch.setattr(track, "read_host", lambda *_a, **_k: None)
    monkeypatch.setattr(track, "require_record", lambda *_a: record)
    targets = _targets(ctl=(("slurm_controller",), {}), ws1=((), {}), ws3=((), {}))
    lab = track.SlurmLab(targets["ctl"], {})
    word, done = track.cancel("j", SlurmInfo("ctl", ["ws1", "ws3"], job_id="41"), targets, lab)
    assert word == "scancel 41: ok" and [(d.host, d.state.state) for d in done] == [
        ("ws1", JobState.CANCELLED), ("ws3", JobState.CANCELLED)
    ]  # fmt: skip
    assert sorted(calls[:2]) == [
        ("ws1", "touch /jobs/j/cancel.requested"),
        ("ws3", "touch /jobs/j/cancel.requested"),
    ]
    assert calls[2] == ("ctl", "scancel 41")
    assert sorted(calls[3:]) == [("ws1", "launcher cancel /jobs/j"), ("ws3", "launcher cancel /jobs/j")]

"""roles/slurm without a host: inventory groups -> the lab, GPU facts and host records -> slurm.conf,
gres.conf and the task prolog, recorded tool output -> facts, config changes -> restart or reconfigure.

Recorded inputs: tests/fixtures/slurm/ (Slurm 22.05.8 on the SIMULATED lab) and tests/fixtures/gpu/ (real
cards' sysfs), see tests/fixtures/SOURCES.md. The end-to-end test is tests/e2e/test_slurm.py.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from radeonlab.roles.gpu.sysfs import read_sysfs
from radeonlab.roles.slurm import checks, daemons, plan
from radeonlab.roles.slurm.defaults import DEFAULTS
from radeonlab.roles.slurm.facts import MungeDecode, SlurmDaemons, SlurmNodeInfo, SlurmNodeStates, UserId
from tests.unit.test_gpu_facts import build_tree

FIXTURES = Path(__file__).parents[1] / "fixtures" / "slurm"
GIB = 1024**3
XTX = {"index": 0, "gfx": "gfx1100", "vram_total": 25753026560, "bf16": True, "render_minor": 128}
R6700 = {"index": 0, "gfx": "gfx1031", "vram_total": 12868124672, "bf16": False, "render_minor": 128}
R9070 = {"index": 0, "gfx": "gfx1201", "vram_total": 17095983104, "bf16": True, "render_minor": 128}
SLURMD_C = (FIXTURES / "slurmd-C.txt").read_text()


def record(*gpus: dict, rocm: str = "7.2.4", cpu_only: bool = False) -> dict:
    return {"rocm": {"version": rocm}, "cpu_only": cpu_only, "gpus": list(gpus)}


# --- who is who ---------------------------------------------------------------------------------------------


def test_no_slurm_groups_means_no_lab() -> None:
    assert plan.lab_of({"workstations": ["ws1", "ws2"]}, DEFAULTS) is None


def test_lab_from_groups_controller_may_also_be_a_node() -> None:
    lab = plan.lab_of({"slurm_controller": ["ctl"], "slurm_nodes": ["ws1", "ws2"]}, DEFAULTS)
    assert lab == plan.Lab("ctl", ("ws1", "ws2"))
    assert (
        lab.hosts() == ("ctl", "ws1", "ws2") and lab.controller_only("ctl") and not lab.controller_only("ws1")
    )
    both = plan.lab_of({"slurm_controller": ["ws1"], "slurm_nodes": ["ws1", "ws2"]}, DEFAULTS)
    assert both is not None and both.hosts() == ("ws1", "ws2") and not both.controller_only("ws1")


@pytest.mark.parametrize(
    ("groups", "words"),
    [
        ({"slurm_nodes": ["ws1"]}, "no slurm_controller group"),
        ({"slurm_controller": ["ctl"]}, "no slurm_nodes group"),
        ({"slurm_controller": ["a", "b"], "slurm_nodes": ["ws1"]}, "one controller"),
    ],
)
def test_incomplete_groups_are_refused_in_one_line(groups: dict, words: str) -> None:
    with pytest.raises(plan.SlurmPlanError) as err:
        plan.lab_of(groups, DEFAULTS)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_node_name_and_address() -> None:
    assert plan.node_name("ws1", {}) == "ws1"
    assert plan.node_name("192.168.1.5", {"slurm_node_name": "lab5"}) == "lab5"
    with pytest.raises(plan.SlurmPlanError, match="slurm_node_name"):
        plan.node_name("192.168.1.5", {})
    assert plan.address("ws1", {"ssh_hostname": "10.0.0.2"}) == "10.0.0.2"
    assert plan.address("ws1", {"ssh_hostname": "a", "radeonlab_node_address": "b"}) == "b"
    assert plan.address("ws1", {"ssh_hostname": "a", "slurm_address": "c"}) == "c"
    assert plan.address("ws1", {}) == "ws1"


# --- GPUs, features, gres --------------------------------------------------------------------------------


def test_features_per_card() -> None:
    assert plan.node_features([XTX]) == ["gfx1100", "gfx110x", "gfx11", "rdna3", "bf16", "vram24g"]
    assert plan.node_features([R6700]) == ["gfx1031", "gfx103x", "gfx10", "rdna2", "vram12g"]
    assert plan.node_features([R9070]) == ["gfx1201", "gfx120x", "gfx12", "rdna4", "bf16", "vram16g"]
    assert plan.gfx_features("gfx1151")[-1] == "rdna3_5" and plan.gfx_features("gfx90a")[:3] == [
        "gfx90a",
        "gfx90x",
        "gfx9",
    ]


def test_mixed_node_offers_only_what_every_card_has() -> None:
    """A bf16 job must not be handed the RX 6700 XT of a node that also holds a 7900 XTX."""
    mixed = [XTX, {**R6700, "index": 1, "render_minor": 129}]
    assert plan.node_features(mixed) == ["vram12g"]  # no gfx, family or bf16 common to both cards
    assert plan.node_features([XTX, {**R9070, "index": 1}]) == ["bf16", "vram16g"]
    assert plan.gres_field(mixed) == "gpu:gfx1100:1,gpu:gfx1031:1"
    assert plan.gres_field([XTX, {**XTX, "index": 1}]) == "gpu:gfx1100:2"


def test_gres_from_recorded_sysfs_skips_the_igpu_and_maps_positions_to_rocm(tmp_path: Path) -> None:
    """A Phoenix APU (LACT capture: iGPU = ROCm device 0) plus an RX 7900 XTX (tinygrad capture, renderD129):
    gres.conf lists only the 7900 XTX, and the prolog maps Slurm's position 0 to ROCm device 1."""
    root = build_tree(
        tmp_path,
        {
            0: "lact_phoenix_node0.properties",
            1: "lact_phoenix_node1.properties",
            2: "rx7900xtx_node1_tinygrad-mock_TEMPLATED.properties",
        },
        {"card1": "lact-phoenix-card1", "card0": "lact-rx7900xtx-card0"},
        render_minors={"card0": 129, "card1": 128},
    )
    # The LACT 7900 XTX capture has no mem_info_vram_total: its report's "VRAM Size: 24560 MiB" (the value
    # radeonlab/sandbox/simcards.py uses too) is written in.
    (root / "sys/class/drm/card0/device/mem_info_vram_total").write_text("25753026560\n")
    gpus = [g.to_dict() for g in read_sysfs(root, "7.2.4")]
    assert [(g["gfx"], g["rocr_index"], g["render_minor"]) for g in gpus] == [
        ("gfx1103", 0, 128),
        ("gfx1100", 1, 129),
    ]
    chosen = plan.training_gpus(gpus, "7.2.4", 6 * GIB)
    assert plan.gres_lines("ws1", chosen) == [
        "NodeName=ws1 Name=gpu Type=gfx1100 File=/dev/dri/renderD129 Flags=amd_gpu_env"
    ]
    assert plan.rocr_map(chosen) == [1]


def test_gres_needs_a_render_node() -> None:
    with pytest.raises(plan.SlurmPlanError, match="render node"):
        plan.gres_lines("ws1", [{**XTX, "render_minor": None}])


def run_prolog(tmp_path: Path, rocr_map: list[int], env: dict[str, str], profile: str) -> list[str]:
    """The rendered task prolog run by sh, as slurmd runs it: the lines it prints."""
    (tmp_path / "profile.sh").write_text(profile)
    script = plan.render(
        "task-prolog.sh.j2", node_name="ws1", profile=str(tmp_path / "profile.sh"), rocr_map=rocr_map
    )
    (tmp_path / "prolog").write_text(script)
    done = subprocess.run(
        ["sh", str(tmp_path / "prolog")],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.splitlines()


def test_task_prolog_gives_the_node_gpu_environment_not_the_submitters(tmp_path: Path) -> None:
    profile = 'export PYTORCH_ROCM_ARCH="gfx1030"\nexport HSA_OVERRIDE_GFX_VERSION="10.3.0"\n'
    submitter = {"HSA_OVERRIDE_GFX_VERSION_1": "11.0.0", "PYTORCH_ROCM_ARCH": "gfx1100"}
    lines = run_prolog(tmp_path, [0], {**submitter, "ROCR_VISIBLE_DEVICES": "0"}, profile)
    assert sorted(lines) == sorted(
        [
            "unset HSA_OVERRIDE_GFX_VERSION_1",
            "unset PYTORCH_ROCM_ARCH",
            "export HSA_OVERRIDE_GFX_VERSION=10.3.0",
            "export PYTORCH_ROCM_ARCH=gfx1030",
            "export ROCR_VISIBLE_DEVICES=0",
        ]
    )


def test_task_prolog_translates_slurm_positions_to_rocm_devices(tmp_path: Path) -> None:
    lines = run_prolog(tmp_path, [1, 2], {"ROCR_VISIBLE_DEVICES": "1"}, "")
    assert lines == ["export ROCR_VISIBLE_DEVICES=2"]
    assert run_prolog(tmp_path, [1, 2], {"ROCR_VISIBLE_DEVICES": "0,1"}, "") == [
        "export ROCR_VISIBLE_DEVICES=1,2"
    ]
    assert run_prolog(tmp_path, [1, 2], {}, "") == []  # a job without GPUs: nothing to translate


# --- slurm.conf --------------------------------------------------------------------------------------------


def lab_conf(**data: object) -> str:
    settings = {**DEFAULTS, **data}
    specs = [
        plan.node_spec("ws1", {"ssh_hostname": "10.0.0.11"}, record(XTX), SLURMD_C, 6 * GIB),
        plan.node_spec("ws2", {"ssh_hostname": "10.0.0.12"}, record(R6700), SLURMD_C, 6 * GIB),
        plan.node_spec("ws3", {"ssh_hostname": "10.0.0.13"}, record(R9070), SLURMD_C, 6 * GIB),
    ]
    return plan.slurm_conf(settings, "ctl.lab.example", "10.0.0.10", specs)


def test_slurm_conf_from_records_and_slurmd_c() -> None:
    text = lab_conf()
    lines = text.splitlines()
    assert "SlurmctldHost=ctl(10.0.0.10)" in lines
    settings = [line for line in lines if not line.startswith("#")]
    assert "GresTypes=gpu" in settings and not any("AutoDetect" in line for line in settings)
    assert (
        "NodeName=ws2 NodeAddr=10.0.0.12 CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 "
        "RealMemory=24064 Gres=gpu:gfx1031:1 Features=gfx1031,gfx103x,gfx10,rdna2,vram12g State=UNKNOWN"
    ) in lines
    assert "PartitionName=gpu Nodes=ws1,ws2,ws3 Default=YES MaxTime=INFINITE State=UP" in lines
    assert "ProctrackType=proctrack/cgroup" in lines  # real-lab default (docs/guide/slurm.md: not verified)


def test_accounting_only_when_a_slurmdbd_host_is_named() -> None:
    assert "AccountingStorageType=accounting_storage/none" in lab_conf().splitlines()
    lines = lab_conf(slurm_accounting_host="ctl").splitlines()
    assert "AccountingStorageType=accounting_storage/slurmdbd" in lines
    assert "AccountingStorageHost=ctl" in lines and "AccountingStoragePort=6819" in lines
    assert plan.change_action(lab_conf(), lab_conf(slurm_accounting_host="ctl")) == "restart"


def test_node_without_record_is_refused() -> None:
    with pytest.raises(plan.SlurmPlanError, match="no host record"):
        plan.node_spec("ws1", {}, None, SLURMD_C, 6 * GIB)


def test_cpu_only_node_has_no_gres() -> None:
    spec = plan.node_spec("cpu1", {}, record(XTX, cpu_only=True), SLURMD_C, 6 * GIB)
    assert "Gres=" not in spec.line and "Features=" not in spec.line


def test_per_node_ports_must_differ() -> None:
    a = plan.node_spec("ws1", {"slurm_node_port": 17001}, record(XTX), SLURMD_C, 6 * GIB)
    b = plan.node_spec("ws2", {"slurm_node_port": 17001}, record(R6700), SLURMD_C, 6 * GIB)
    with pytest.raises(plan.SlurmPlanError, match="share slurm_node_port 17001"):
        plan.slurm_conf(DEFAULTS, "ctl", "10.0.0.10", [a, b])


def test_change_action() -> None:
    base = lab_conf()
    assert plan.change_action(base, base) == "none"
    assert plan.change_action(None, base) == "restart"
    assert plan.change_action(base, lab_conf(slurm_extra_config=["MaxJobCount=5000"])) == "reconfigure"
    assert plan.change_action(base, lab_conf(slurm_min_job_age=600)) == "reconfigure"
    assert plan.change_action(base, lab_conf(slurm_slurmd_port=7000)) == "restart"
    assert plan.change_action(base, base.replace("# Managed", "# Kept")) == "none"  # comments only
    more_memory = base.replace("RealMemory=24064", "RealMemory=48128", 1)
    assert plan.change_action(base, more_memory) == "restart"  # a node definition changed


def test_slurmd_c_parse() -> None:
    assert plan.parse_slurmd_c(SLURMD_C)["RealMemory"] == 24105
    with pytest.raises(plan.SlurmPlanError):
        plan.parse_slurmd_c("slurmd: error: no slurm.conf")


def test_munge_key_created_once_private(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "munge.key"
    first = plan.load_or_create_key(str(path))
    assert len(first) == plan.MUNGE_KEY_BYTES and path.stat().st_mode & 0o777 == 0o600
    assert plan.load_or_create_key(str(path)) == first
    path.write_bytes(b"short")
    with pytest.raises(plan.SlurmPlanError, match="32..1024"):
        plan.load_or_create_key(str(path))


# --- facts (recorded output -> value) and checks -----------------------------------------------------------


def test_node_info_fact() -> None:
    fact = SlurmNodeInfo()
    lines = ['{"host": "ws1", "gpus": []}', "", "@@radeonlab-slurmd-C", *SLURMD_C.splitlines()[:1]]
    info = fact.process(lines)
    assert info["record"] == {"host": "ws1", "gpus": []} and info["slurmd_c"].startswith("NodeName=sl-1")
    assert fact.process(["", "@@radeonlab-slurmd-C"]) == {"record": None, "slurmd_c": None}


def test_munge_decode_fact_reads_unmunge() -> None:
    fact = MungeDecode()
    assert fact.process(["rc=0", ""]) == {"ok": True, "error": ""}
    bad = fact.process(["rc=15", "unmunge: Error: Invalid credential"])
    assert bad == {"ok": False, "error": "Invalid credential"}
    line = checks.munge_problem("ws3", "ctl", bad)
    assert line == (
        "munge key mismatch: ctl cannot decode a credential made on ws3 (Invalid credential); "
        "every Slurm host needs the same /etc/munge/munge.key (slurm_munge_key_file)"
    )
    assert checks.munge_problem("ws3", "ctl", {"ok": True}) is None


def test_daemons_fact_and_user_id() -> None:
    value = SlurmDaemons().process(["systemd=0", "munged=312", "slurmd="])
    assert value == {"systemd": False, "munged": 312, "slurmd": None}
    assert UserId().process(["1000"]) == 1000 and UserId().process([]) is None


def test_uid_problems() -> None:
    assert checks.uid_problems("lab", {"a": 1000, "b": 1000}) == []
    [line] = checks.uid_problems("lab", {"a": 1000, "b": 1001})
    assert (
        line == "training user lab has different uids (uid 1000 on a; uid 1001 on b): Slurm runs jobs by uid"
    )
    assert "does not exist on b" in checks.uid_problems("lab", {"a": 1000, "b": None})[0]


def test_node_states_fact_and_registration() -> None:
    down = "sl-1|idle|none\nsl-2|mixed|none\nsl-3|down*|Not responding\n"
    states = SlurmNodeStates().process((FIXTURES / "sinfo-three-nodes.txt").read_text().splitlines())
    assert (
        checks.registration_problems(["sl-1", "sl-2", "sl-3"], {k: (v[0], "") for k, v in states.items()})
        == []
    )
    problems = checks.registration_problems(["sl-1", "sl-2", "sl-3", "sl-4"], checks.parse_node_states(down))
    assert problems == [
        "Slurm node sl-3 is down*: Not responding (see /var/log/slurm/slurmd.log on it)",
        "Slurm node sl-4 is missing (see /var/log/slurm/slurmd.log on it)",
    ]


# --- daemons where systemd does not run -------------------------------------------------------------------


def test_daemon_script_starts_waits_and_fails_in_one_line(tmp_path: Path) -> None:
    """The start script against a stand-in daemon: `sleep` as the daemon, a marker file as its answer."""
    pidfile, marker = tmp_path / "d.pid", tmp_path / "up"
    start = f"sleep 30 >/dev/null 2>&1 & echo $! > {pidfile}; touch {marker}"
    ready, log = f"[ -e {marker} ]", str(tmp_path / "d.log")
    fake = daemons.Daemon("sleep", "fake.service", str(pidfile), start, ready, log)
    done = subprocess.run(["sh", "-c", daemons.daemon_script(fake, 2, stop_first=False)], capture_output=True)
    assert done.returncode == 0 and pidfile.exists()
    first = int(pidfile.read_text())
    marker.unlink()
    again = subprocess.run(["sh", "-c", daemons.daemon_script(fake, 2, stop_first=True)], capture_output=True)
    assert again.returncode == 0 and int(pidfile.read_text()) != first
    assert not Path(f"/proc/{first}").exists() or Path(f"/proc/{first}/stat").read_text().split()[2] == "Z"
    os.kill(int(pidfile.read_text()), 9)
    silent = daemons.Daemon("sleep", "x", str(pidfile), "true", "false", str(tmp_path / "none.log"))
    failed = subprocess.run(
        ["sh", "-c", daemons.daemon_script(silent, 0.3, False)], capture_output=True, text=True
    )
    assert failed.returncode == 1
    assert failed.stderr.splitlines()[0] == f"sleep did not answer within 0.3 s; see {tmp_path / 'none.log'}"

"""Placement: which host a job goes to when `submit` is not told, and why every other host was not chosen.

Host records as the deploy writes them (contract HostRecord, schema 2) for the three simulated cards'
recorded values (radeonlab/sandbox/simcards.py CARDS: VRAM from LACT / rocm-smi / rocminfo recordings, see
its `derived` notes), a cpu-only sandbox demo host and an unreachable host, seen through the probe's parser
(tests/support/laptop_doubles.py). No SSH here; the last test runs the real probe tool from the shipped code
against job folders made on disk.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from radeonlab.errors import EXIT_FAILURE, PlacementError
from radeonlab.jobs.fleet import context
from radeonlab.jobs.fleet.probe import HostView, parse_probe
from radeonlab.jobs.plan import model as model_module
from radeonlab.jobs.plan.placement import Asks, asks_of, card_problems, choose, gfx_matches
from radeonlab.jobs.spec.load import parse_text
from tests.support.laptop_doubles import (
    CLOSED_HUB,
    gpu,
    host_record,
    job_summary,
    recorded_reading,
    run_host_tool,
    ship_code,
    target,
    unreachable,
    view,
)
from tests.unit.test_estimate import LLAMA3_8B

CARDS = {"ws-xtx": "rx7900xtx", "ws-6700": "rx6700xt", "ws-9070": "rx9070xt", "demo": None}
TARGETS = {
    **{name: target(name, groups=("lab",) if card else ()) for name, card in CARDS.items()},
    "ws-off": target("ws-off", "10.0.0.9", groups=("lab",)),
}


def fleet(queues: dict[str, int] | None = None) -> list[HostView]:
    """ws-xtx (RX 7900 XTX), ws-6700 (RX 6700 XT), ws-9070 (RX 9070 XT), demo (cpu-only), ws-off (down);
    `queues`: how many live jobs wait or run on each host's GPU (the CPU for demo)."""
    q = {"ws-xtx": 1, "ws-6700": 0, "ws-9070": 0, "demo": 0, **(queues or {})}
    out = []
    for name, card in CARDS.items():
        record = host_record(name, [gpu(card)] if card else [], cpu_torch=card is None)
        jobs = [job_summary(f"{name}-{i}", "queued", [0] if card else []) for i in range(q[name])]
        out.append(view(record, jobs=jobs))
    out.append(unreachable("ws-off", "timed out connecting to 10.0.0.9:22"))
    return out


def spec_asks(tmp_path: Path, text: str, model_config: dict | None = None) -> Asks:
    """What a LoRA spec asks whose model is a local folder holding `model_config` as its config.json
    (None: the model's shape is unknown, as for a Hub model the Hub cannot be asked about; a local folder
    without config.json is no model folder and is refused)."""
    base = "model_name_or_path: llama\nstage: sft\nfinetuning_type: lora\ncutoff_len: 1024\n"
    spec = parse_text(base + text, tmp_path / "job.yaml")
    if model_config is None:
        return asks_of(spec, None, "VRAM estimate skipped: the Hub is unreachable (SIMULATED)")
    (tmp_path / "llama").mkdir(exist_ok=True)
    (tmp_path / "llama" / "model.safetensors").write_bytes(b"SIMULATED weights")
    (tmp_path / "llama" / "config.json").write_text(json.dumps(model_config))
    info = model_module.resolve(spec)
    return asks_of(spec, info.config, info.note)


def lines(decisions: list) -> dict[str, str]:
    return {d.host: d.line() for d in decisions}


def test_no_model_config_no_estimate_and_the_shortest_queue_wins_then_free_vram(
    tmp_path: Path,
) -> None:
    chosen, decisions = choose(fleet(), TARGETS, spec_asks(tmp_path, ""))
    # ws-6700 and ws-9070 both have an empty queue; the 9070 XT has more free VRAM; ws-xtx has a queue of 1
    assert chosen == ["ws-9070"]
    said = lines(decisions)
    assert said["ws-off"] == "ws-off: rejected: unreachable (timed out connecting to 10.0.0.9:22)"
    assert "accepted" in said["ws-xtx"] and "queue 1" in said["ws-xtx"]
    assert "VRAM estimate skipped: the Hub is unreachable" in said["ws-9070"]
    assert said["demo"].startswith("demo: accepted: no GPU (trains on CPU)")
    # the cpu-only host is a fallback: last even with the shortest queue, and with the others busy
    busy = {"ws-xtx": 3, "ws-6700": 2, "ws-9070": 2}
    assert choose(fleet(busy), TARGETS, spec_asks(tmp_path, ""), count=4)[0] == [
        "ws-9070",
        "ws-6700",
        "ws-xtx",
        "demo",
    ]


def test_a_job_whose_launcher_died_does_not_count_in_the_queue(tmp_path: Path) -> None:
    views = fleet({"ws-9070": 0})
    dead = job_summary("ws-9070-dead", "queued", [0], alive=False)
    views[2] = view(
        host_record("ws-9070", [gpu("rx9070xt")]), jobs=[dead, dead | {"id": "x", "alive": False}]
    )
    assert choose(views, TARGETS, spec_asks(tmp_path, ""))[0] == ["ws-9070"]


def test_the_vram_estimate_sends_an_8b_lora_to_the_24gb_card_despite_its_queue(tmp_path: Path) -> None:
    asks = spec_asks(tmp_path, "per_device_train_batch_size: 1\n", LLAMA3_8B)
    chosen, decisions = choose(fleet(), TARGETS, asks)
    assert chosen == ["ws-xtx"]
    said = lines(decisions)
    assert re.search(r"estimate ~\d+\.\d GiB fits", said["ws-xtx"]), said["ws-xtx"]
    assert "rejected: GPU 0 AMD Radeon RX 9070 XT: does not fit" in said["ws-9070"]
    assert "rejected: GPU 0 AMD Radeon RX 6700 XT: does not fit" in said["ws-6700"]


def test_the_estimate_counts_the_live_vram_reading_not_the_recorded_one(tmp_path: Path) -> None:
    """The same 8B job, but the XTX's card now has 10 GiB in use (another process): it no longer fits."""
    asks = spec_asks(tmp_path, "per_device_train_batch_size: 1\n", LLAMA3_8B)
    views = fleet()
    busy_reading = recorded_reading(gpu("rx7900xtx"), vram_used=10 * 2**30)
    views[0] = view(views[0].record, readings=[busy_reading])
    views[0].jobs = fleet()[0].jobs  # the same queue
    chosen, decisions = choose(views, TARGETS, asks)
    assert lines(decisions)["ws-xtx"].startswith(
        "ws-xtx: rejected: GPU 0 AMD Radeon RX 7900 XTX: does not fit"
    )
    assert chosen == ["demo"]  # only the cpu-only fallback is left (no card, so no VRAM estimate)


def test_forced_bf16_rejects_the_6700xt_and_the_cpu_only_host(tmp_path: Path) -> None:
    chosen, decisions = choose(fleet(), TARGETS, spec_asks(tmp_path, "bf16: true\n"), count=2)
    assert chosen == ["ws-9070", "ws-xtx"]
    said = lines(decisions)
    assert "RX 6700 XT (gfx1031, RDNA2) has no bf16 and the spec forces bf16" in said["ws-6700"]
    assert said["demo"] == "demo: rejected: no GPU in its host record, the spec asks for bf16"


@pytest.mark.parametrize(
    ("wish", "accepted"),
    [
        ("gfx_family: gfx120x", {"ws-9070"}),
        ("gfx_family: gfx110x", {"ws-xtx"}),
        ("gfx_family: gfx103x", {"ws-6700"}),
        ("gfx_family: RDNA3", {"ws-xtx"}),
        ("min_vram_gb: 16", {"ws-xtx", "ws-9070"}),  # the "16 GB" 9070 XT reports 17.1 GB (15.9 GiB)
        ("min_vram_gb: 24", {"ws-xtx"}),  # the "24 GB" 7900 XTX reports 25.8 GB (23.98 GiB)
        ("host_group: lab", {"ws-xtx", "ws-6700", "ws-9070"}),
    ],
)
def test_placement_wishes(tmp_path: Path, wish: str, accepted: set[str]) -> None:
    asks = spec_asks(tmp_path, f"radeonlab:\n  placement: {{{wish}}}\n")
    _chosen, decisions = choose(fleet(), TARGETS, asks)
    assert {d.host for d in decisions if d.accepted} == accepted


def test_rejection_reasons_name_the_card_and_the_wish(tmp_path: Path) -> None:
    asks = spec_asks(tmp_path, "radeonlab:\n  placement: {min_vram_gb: 16, host_group: lab}\n")
    said = lines(choose(fleet(), TARGETS, asks)[1])
    assert said["ws-6700"] == (
        "ws-6700: rejected: GPU 0 AMD Radeon RX 6700 XT (gfx1031, RDNA2) has 12.9 GB (12.0 GiB) of memory, "
        "placement min_vram_gb is 16 GB"
    )
    assert said["demo"] == "demo: rejected: not in host group lab"


def test_a_named_host_is_held_to_the_same_wishes(tmp_path: Path) -> None:
    """`--host ws9` skips placement, not the spec's wishes: plan_job checks the named host's cards."""
    asks = spec_asks(tmp_path, "radeonlab:\n  placement: {min_vram_gb: 24}\n")
    small = host_record("ws9", [gpu("rx6700xt")]).training_gpus()
    assert card_problems(asks, small) == [
        "GPU 0 AMD Radeon RX 6700 XT (gfx1031, RDNA2) has 12.9 GB (12.0 GiB) of memory, "
        "placement min_vram_gb is 24 GB"
    ]
    assert card_problems(asks, host_record("ws1", [gpu("rx7900xtx")]).training_gpus()) == []


def test_not_provisioned_is_a_reason_too() -> None:
    with pytest.raises(PlacementError) as err:
        choose([view(None, "bare")], {"bare": target("bare")}, Asks())
    assert str(err.value) == "no host fits this job: bare: rejected: not provisioned (no host record)"
    assert [d.host for d in err.value.decisions] == ["bare"]


def test_none_fits_lists_every_host(tmp_path: Path) -> None:
    with pytest.raises(PlacementError) as err:
        choose(fleet(), TARGETS, spec_asks(tmp_path, "radeonlab:\n  placement: {min_vram_gb: 48}\n"))
    message = str(err.value)
    assert message.startswith("no host fits this job: ")
    for host in ("ws-xtx", "ws-6700", "ws-9070", "demo", "ws-off"):
        assert f"{host}: rejected: " in message


def test_too_few_hosts_for_a_multi_node_job_says_how_many_fit(tmp_path: Path) -> None:
    with pytest.raises(PlacementError, match=r"^2 host\(s\) fit, the job needs 3: "):
        choose(fleet(), TARGETS, spec_asks(tmp_path, "bf16: true\n"), count=3)


def test_gfx_family_forms() -> None:
    card = gpu("rx7900xtx")
    assert all(gfx_matches(w, card) for w in ("gfx110x", "gfx11", "gfx1100", "GFX110X", "rdna3"))
    assert not any(gfx_matches(w, card) for w in ("gfx120x", "gfx1101", "RDNA4", "gfx103x"))


INVENTORY = """
lab = [
    ("ws-xtx", {"ssh_hostname": "127.0.0.1", "ssh_port": 1}),
    ("ws-6700", {"ssh_hostname": "127.0.0.1", "ssh_port": 1}),
]
"""


def test_submit_without_a_fitting_host_exits_nonzero_with_every_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inventory = tmp_path / "inv.py"
    inventory.write_text(INVENTORY)
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "model_name_or_path: m/x\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
        "dataset: alpaca_en_demo\ntemplate: default\noutput_dir: out\ndataset_dir: ONLINE\nbf16: true\n"
        "radeonlab:\n  placement: {min_vram_gb: 30}\n"
    )
    probed = {v.name: v for v in fleet()}
    monkeypatch.setattr(context, "probe_hosts", lambda hosts, _timeout, ask: [probed[t.name] for t in hosts])
    env = {"RADEONLAB_HOME": str(tmp_path / "home"), "HF_ENDPOINT": CLOSED_HUB}  # no Hub to ask
    from radeonlab.cli import main

    result = CliRunner().invoke(main, ["submit", str(spec), "-i", str(inventory)], env=env)
    assert result.exit_code == EXIT_FAILURE, result.output  # nothing fits: a host failure, not bad input
    said = result.stderr.splitlines()
    assert any(
        line.startswith(
            "placement: ws-6700: rejected: GPU 0 AMD Radeon RX 6700 XT (gfx1031, RDNA2) has 12.9 GB"
        )
        and line.endswith("has no bf16 and the spec forces bf16")
        for line in said
    ), said
    assert any(line.startswith("placement: ws-xtx: rejected: ") and "30 GB" in line for line in said), said
    assert said[-1].startswith("radeonlab: error: no host fits this job: ws-xtx: rejected")


def test_the_probe_tool_counts_queued_and_live_running_jobs_per_gpu(tmp_path: Path) -> None:
    """The real tool from the shipped code: record + job folders on this disk (what a host's jobs_dir
    holds). This test's own process stands for the live launchers."""
    jobs = tmp_path / "jobs"
    rec = host_record("here", [gpu("rx7900xtx", device_id=None, revision=None)], jobs_dir=str(jobs)).to_dict()
    (tmp_path / "host.json").write_text(json.dumps(rec))
    me, gone = os.getpid(), 2**22 + 7  # gone: above the largest pid_max, no such process
    folders = {
        "a-queued": ({"gpus": [0]}, {"state": "queued", "pid": me}),
        "b-running": ({"gpus": [0]}, {"state": "running", "pid": me}),
        "c-stale": ({"gpus": [0]}, {"state": "running", "pid": gone}),
        "d-done": ({"gpus": [0]}, {"state": "succeeded"}),
        "e-cpu": ({"gpus": []}, {"state": "queued", "pid": me}),
        "f-gpu1": ({"gpus": [1]}, {"state": "queued", "pid": me}),
    }
    for name, (job, state) in folders.items():
        (jobs / name).mkdir(parents=True)
        (jobs / name / "job.json").write_text(json.dumps({"id": name, **job}))
        (jobs / name / "state.json").write_text(json.dumps(state))
    done = run_host_tool(ship_code(tmp_path / "code"), "probe", "--record", str(tmp_path / "host.json"))
    assert done.returncode == 0, done.stderr
    status = parse_probe("here", json.loads(done.stdout))
    assert status.queue() == {"0": 2, "cpu": 1, "1": 1}
    assert status.provisioned and status.raw_record == rec
    assert status.stale == ["c-stale"]

"""Placement: which host a job goes to when `submit` is not told, and why every other host was not chosen.

Host records as the deploy writes them (roles/verify/record.py), for the three simulated cards' recorded
values (radeonlab/sandbox/simcards.py CARDS: VRAM from LACT / rocm-smi / rocminfo recordings, see its
`derived`
notes), a cpu-only sandbox demo host and an unreachable host. No SSH here except the last tests, which run
the real probe script under this machine's bash against a job folder made on disk.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from radeonlab.jobs.plan import placement
from radeonlab.jobs.plan.placement import Candidate, Needs, PlacementError, choose, gfx_matches, needs_of
from radeonlab.jobs.spec.load import parse_text

from radeonlab.sandbox.simcards import CARDS
from tests.test_estimate import LLAMA3_8B

BF16 = {"rx7900xtx": True, "rx6700xt": False, "rx9070xt": True}  # rocm-facts.md card table
GFX = {"rx7900xtx": ("gfx1100", "RDNA3"), "rx6700xt": ("gfx1031", "RDNA2"), "rx9070xt": ("gfx1201", "RDNA4")}


def record(host: str, card: str | None) -> dict[str, Any]:
    gpus = []
    if card:
        c = CARDS[card]
        gpus = [{"index": 0, "node": 1, "gfx": GFX[card][0], "name": c["name"], "family": GFX[card][1],
                 "vram_total": c["vram_total"], "vram_used": c["vram_used"], "bf16": BF16[card],
                 "override": "10.3.0" if card == "rx6700xt" else None, "igpu": False}]  # fmt: skip
    return {
        "schema": 1,
        "host": host,
        "user": "lab",
        "venv": "/home/lab/radeonlab/venv",
        "jobs_dir": "/home/lab/radeonlab/jobs",
        "cpu_only": card is None,
        "torch": {
            "version": "2.13.0",
            "hip": "7.2.53211",
            "cuda_available": True,
            "simulated_cpu_build": False,
        },
        "gpus": gpus,
    }


def fleet(queues: dict[str, int] | None = None) -> list[Candidate]:
    """ws-xtx (RX 7900 XTX), ws-6700 (RX 6700 XT), ws-9070 (RX 9070 XT), demo (cpu-only), ws-off (down)."""
    q = {"ws-xtx": 1, "ws-6700": 0, "ws-9070": 0, "demo": 0, **(queues or {})}
    cards = {"ws-xtx": "rx7900xtx", "ws-6700": "rx6700xt", "ws-9070": "rx9070xt", "demo": None}
    out = [
        Candidate(name, ("lab",) if card else (), record=record(name, card),
                  queue={("0" if card else "cpu"): q[name]})
        for name, card in cards.items()
    ]  # fmt: skip
    out.append(Candidate("ws-off", ("lab",), reachable=False, error="timed out connecting to 10.0.0.9:22"))
    return out


def spec_needs(tmp_path: Path, text: str, model_config: dict | None = None) -> Needs:
    model = "meta-llama/Meta-Llama-3-8B"
    if model_config is not None:
        (tmp_path / "llama").mkdir()
        (tmp_path / "llama" / "config.json").write_text(json.dumps(model_config))
        model = "llama"
    base = f"model_name_or_path: {model}\nstage: sft\nfinetuning_type: lora\ncutoff_len: 1024\n"
    return needs_of(parse_text(base + text, tmp_path / "job.yaml"))


def lines(decisions: list) -> dict[str, str]:
    return {d.host: d.line() for d in decisions}


def test_hub_model_skips_the_estimate_and_the_shortest_queue_wins_then_free_vram(tmp_path: Path) -> None:
    chosen, decisions = choose(fleet(), spec_needs(tmp_path, ""))
    # ws-6700 and ws-9070 both have an empty queue; the 9070 XT has more free VRAM; ws-xtx has a queue of 1
    assert chosen == ["ws-9070"]
    said = lines(decisions)
    assert said["ws-off"] == "ws-off: rejected: unreachable (timed out connecting to 10.0.0.9:22)"
    assert "accepted" in said["ws-xtx"] and "queue 1" in said["ws-xtx"]
    assert "VRAM estimate skipped: meta-llama/Meta-Llama-3-8B is a hub model" in said["ws-9070"]
    assert said["demo"].startswith("demo: accepted: no GPU (trains on CPU)")
    # the cpu-only host is a fallback: last even with the shortest queue, and with the others busy
    busy = {"ws-xtx": 3, "ws-6700": 2, "ws-9070": 2}
    assert choose(fleet(busy), spec_needs(tmp_path, ""), count=4)[0] == [
        "ws-9070",
        "ws-6700",
        "ws-xtx",
        "demo",
    ]


def test_the_vram_estimate_sends_an_8b_lora_to_the_24gb_card_despite_its_queue(tmp_path: Path) -> None:
    needs = spec_needs(tmp_path, "per_device_train_batch_size: 1\n", LLAMA3_8B)
    chosen, decisions = choose(fleet(), needs)
    assert chosen == ["ws-xtx"]
    said = lines(decisions)
    assert re.search(r"estimate ~\d+\.\d GiB fits", said["ws-xtx"]), said["ws-xtx"]
    assert "rejected: GPU 0 AMD Radeon RX 9070 XT: does not fit" in said["ws-9070"]
    assert "rejected: GPU 0 AMD Radeon RX 6700 XT: does not fit" in said["ws-6700"]


def test_forced_bf16_rejects_the_6700xt_and_the_cpu_only_host(tmp_path: Path) -> None:
    chosen, decisions = choose(fleet(), spec_needs(tmp_path, "bf16: true\n"), count=2)
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
    needs = spec_needs(tmp_path, f"radeonlab:\n  placement: {{{wish}}}\n")
    _chosen, decisions = choose(fleet(), needs)
    assert {d.host for d in decisions if d.accepted} == accepted


def test_rejection_reasons_name_the_card_and_the_wish(tmp_path: Path) -> None:
    needs = spec_needs(tmp_path, "radeonlab:\n  placement: {min_vram_gb: 16, host_group: lab}\n")
    said = lines(choose(fleet(), needs)[1])
    assert said["ws-6700"] == (
        "ws-6700: rejected: GPU 0 AMD Radeon RX 6700 XT (gfx1031, RDNA2) has 12.9 GB (12.0 GiB) VRAM, "
        "placement min_vram_gb is 16 GB"
    )
    assert said["demo"] == "demo: rejected: not in host group lab"


def test_not_provisioned_is_a_reason_too() -> None:
    bare = Candidate("bare", record=None, provisioned_note="no host record")
    with pytest.raises(PlacementError) as err:
        choose([bare], Needs())
    assert str(err.value) == "no host fits this job: bare: rejected: not provisioned (no host record)"


def test_none_fits_lists_every_host(tmp_path: Path) -> None:
    with pytest.raises(PlacementError) as err:
        choose(fleet(), spec_needs(tmp_path, "radeonlab:\n  placement: {min_vram_gb: 48}\n"))
    message = str(err.value)
    assert message.startswith("no host fits this job: ")
    for host in ("ws-xtx", "ws-6700", "ws-9070", "demo", "ws-off"):
        assert f"{host}: rejected: " in message


def test_gfx_family_forms() -> None:
    card = {"gfx": "gfx1100", "family": "RDNA3"}
    assert all(gfx_matches(w, card) for w in ("gfx110x", "gfx11", "gfx1100", "GFX110X", "rdna3"))
    assert not any(gfx_matches(w, card) for w in ("gfx120x", "gfx1101", "RDNA4", "gfx103x"))


INVENTORY = """
lab = [
    ("ws-xtx", {"ssh_hostname": "127.0.0.1", "ssh_port": 1}),
    ("ws-6700", {"ssh_hostname": "127.0.0.1", "ssh_port": 1}),
]
"""


def test_submit_without_a_fitting_host_exits_nonzero_with_every_reason(tmp_path: Path, monkeypatch) -> None:
    inventory = tmp_path / "inv.py"
    inventory.write_text(INVENTORY)
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "model_name_or_path: m/x\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
        "dataset: alpaca_en_demo\ntemplate: default\noutput_dir: out\ndataset_dir: ONLINE\nbf16: true\n"
        "radeonlab:\n  placement: {min_vram_gb: 30}\n"
    )
    gathered = {c.name: c for c in fleet()}
    monkeypatch.setattr(placement, "gather", lambda targets, timeout: [gathered[t.name] for t in targets])
    env = {"RADEONLAB_HOME": str(tmp_path / "home")}
    from radeonlab.cli import main

    result = CliRunner().invoke(main, ["submit", str(spec), "-i", str(inventory)], env=env)
    assert result.exit_code == 1, result.output
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


def test_the_probe_script_counts_queued_and_live_running_jobs_per_gpu(tmp_path: Path) -> None:
    """The real script under bash: record + job folders on this disk (what a host's jobs_dir holds)."""
    jobs = tmp_path / "jobs"
    rec = record("here", "rx7900xtx") | {"jobs_dir": str(jobs)}
    (tmp_path / "host.json").write_text(json.dumps(rec))
    folders = {
        "a-queued": ({"gpus": [0]}, {"state": "queued"}),
        "b-running": ({"gpus": [0]}, {"state": "running", "pid": os.getpid()}),
        "c-stale": ({"gpus": [0]}, {"state": "running", "pid": 2**22 + 7}),  # no such process
        "d-done": ({"gpus": [0]}, {"state": "succeeded"}),
        "e-cpu": ({"gpus": []}, {"state": "queued"}),
        "f-gpu1": ({"gpus": [1]}, {"state": "queued"}),
    }
    for name, (job, state) in folders.items():
        (jobs / name).mkdir(parents=True)
        (jobs / name / "job.json").write_text(json.dumps({"id": name, **job}))
        (jobs / name / "state.json").write_text(json.dumps(state))
    out = subprocess.run(
        ["bash", "-s", str(tmp_path / "host.json")],
        input=placement.probe_script(),
        capture_output=True,
        text=True,
    )
    status = placement.parse_probe("here", out.stdout)
    assert status.gpu_queue == {"0": 2, "cpu": 1, "1": 1}
    assert status.provisioned and status.record == rec
    assert status.running == ["b-running"] and status.stale == ["c-stale"]  # fleet's own summary still parsed

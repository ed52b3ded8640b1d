"""End to end through the `radeonlab` CLI on ONE provisioned SIMULATED workstation (radeonlab/sandbox).

The host is provisioned once for the module by deploy/setup.py (real SSH; CPU torch stands in for ROCm
torch), then the demo job runs through submit / watch / fetch exactly as a user types them, and the failure
paths are driven for real: an SSH connection killed mid-training, cancel, a lost local SQLite cache, specs
that must upload nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from radeonlab.cli import main
from radeonlab.jobs.host.metrics import parse_line
from radeonlab.sandbox import demodata, tinymodel
from radeonlab.sandbox.demo import write_spec
from radeonlab.sandbox.hosts import Sandbox, SandboxHost
from radeonlab.sandbox.provision import SHARED_TRAINER, shared_trainer

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
INVENTORY = str(REPO / "inventories/sandbox.py")
HOST = SHARED_TRAINER
JOBS_DIR = "/home/lab/radeonlab/jobs"
BLOBS_DIR = "/home/lab/radeonlab/blobs"
DEMO_STEPS = 60  # enough for a clear fall of the loss, a few seconds of CPU
LONG_STEPS = 5000  # a job that is still running whenever the test needs it (it is cancelled)
RESULT_NAMES = ("output/adapter_model.safetensors", "output/adapter_config.json", "output/trainer_log.jsonl",
                "config.yaml", "train.log", "output/training_loss.png")  # fmt: skip


@dataclass
class Lab:
    sandbox: Sandbox
    host: SandboxHost
    work: Path
    spec: Path
    long_spec: Path
    env: dict[str, str]
    jobs: dict[str, str]  # what the tests submitted: label -> job id


@pytest.fixture(scope="module")
def lab(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    provisioned = shared_trainer(sandbox)
    print(f"\nprovisioned {HOST} in {provisioned.seconds:.1f}s")
    work = tmp_path_factory.mktemp("jobs")
    spec = write_spec(work, {"max_steps": DEMO_STEPS})
    long_spec = write_spec(work, {"max_steps": LONG_STEPS, "save_steps": 1000}, name="long.yaml")
    data = demodata.write_dataset(work / "data")
    tinymodel.build_model(work / "tiny-llama", data)
    env = {"RADEONLAB_SANDBOX_DIR": str(sandbox.state_dir), "RADEONLAB_HOME": str(work / "laptop")}
    yield Lab(sandbox, provisioned.host, work, spec, long_spec, env, {})


def cli(lab: Lab, *args: str):
    return CliRunner().invoke(main, [args[0], *args[1:]], env=lab.env, catch_exceptions=False)


def submit(lab: Lab, spec: Path) -> tuple[str, str]:
    result = cli(lab, "submit", str(spec), "-i", INVENTORY, "--host", HOST)
    assert result.exit_code == 0, result.output
    return re.search(r"submitted (\S+) to", result.stdout).group(1), result.output  # type: ignore[union-attr]


def host_listing(host: SandboxHost, path: str) -> list[str]:
    return host.exec(f"find {path} -mindepth 1 2>/dev/null | sort", check=False).stdout.split()


def state_on_host(host: SandboxHost, job_id: str) -> dict:
    return json.loads(host.exec(["cat", f"{JOBS_DIR}/{job_id}/state.json"]).stdout)


@pytest.fixture(scope="module")
def demo_job(lab: Lab) -> dict[str, object]:
    """The demo flow: submit, watch to the end, fetch --try."""
    t0 = time.monotonic()
    job_id, out = submit(lab, lab.spec)
    watched = cli(lab, "watch", job_id, "-i", INVENTORY)
    took = time.monotonic() - t0
    local = lab.work / "results" / job_id  # fetch --to DIR: the job's files in DIR/JOB
    ask = ("--try", "Uppercase the word.\\napple")
    fetched = cli(lab, "fetch", job_id, "-i", INVENTORY, "--to", str(local.parent), *ask)
    lab.jobs["demo"] = job_id
    first = re.search(r"first logged step (\d+)s after submit", watched.stdout)
    first_s = first.group(1) if first else "?"
    print(f"\ndemo job: submit to end {took:.1f}s; first logged step {first_s}s after submit")
    return {"id": job_id, "submit": out, "watch": watched, "fetch": fetched, "local": local}


def test_demo_job_trains_and_the_loss_falls(lab: Lab, demo_job: dict) -> None:
    watched = demo_job["watch"]
    assert watched.exit_code == 0, watched.output
    last = watched.stdout.strip().splitlines()[-1]
    assert last.startswith(f"{demo_job['id']}: succeeded") and "effective" in last, last
    assert re.search(r" \d+ tok/s", watched.stdout), watched.stdout[-2000:]  # token counting is on
    assert re.search(rf"step {DEMO_STEPS}/{DEMO_STEPS}  loss ", watched.stdout)
    assert "VRAM" in watched.stdout and "°C" in watched.stdout  # readings of the simulated card
    log = (demo_job["local"] / "output/trainer_log.jsonl").read_text().splitlines()
    points = [p for p in map(parse_line, log) if p and p.loss is not None]
    losses = [p.loss for p in points]
    assert len(losses) == DEMO_STEPS
    assert sum(losses[-5:]) / 5 < 0.6 * sum(losses[:5]) / 5, losses


def test_fetch_brings_verified_files_and_an_answer(lab: Lab, demo_job: dict) -> None:
    fetched = demo_job["fetch"]
    assert fetched.exit_code == 0, fetched.output
    assert f"results in {demo_job['local']}" in fetched.stdout
    assert "adapter's answer: " in fetched.stdout  # generated on the host, in its venv
    remote_dir = f"{JOBS_DIR}/{demo_job['id']}"
    for name in RESULT_NAMES:
        local = demo_job["local"] / name
        on_host = lab.host.exec(["sha256sum", f"{remote_dir}/{name}"]).stdout.split()[0]
        assert hashlib.sha256(local.read_bytes()).hexdigest() == on_host, name
    again = cli(lab, "fetch", demo_job["id"], "-i", INVENTORY, "--to", str(demo_job["local"].parent))
    assert "received 0 B; 6 already here" in again.stdout, again.output  # nothing fetched twice


def test_the_fetched_adapter_loads_with_peft_and_was_trained(lab: Lab, demo_job: dict) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(lab.work / "tiny-llama")
    model = PeftModel.from_pretrained(base, demo_job["local"] / "output")
    lora_b = {n: p for n, p in model.named_parameters() if "lora_B" in n}
    assert lora_b, "no LoRA weights in the adapter"
    # lora_B starts at zero: non-zero weights prove the training updated them
    assert all(torch.count_nonzero(p) > 0 for p in lora_b.values()), [
        n for n, p in lora_b.items() if not p.any()
    ]


def test_resubmitting_unchanged_data_sends_no_dataset_bytes(lab: Lab, demo_job: dict) -> None:
    job_id, out = submit(lab, lab.long_spec)  # another spec, the same data and model
    lab.jobs["long"] = job_id
    assert "upload -> lab1: 8 file(s): sent 0 B; 8 already on the host" in out, out


def test_a_dropped_ssh_connection_neither_stops_training_nor_watch(lab: Lab, demo_job: dict) -> None:
    job_id = lab.jobs.get("long") or submit(lab, lab.long_spec)[0]
    lab.jobs["long"] = job_id
    exe = str(Path(sys.executable).with_name("radeonlab"))
    watch = subprocess.Popen([exe, "watch", job_id, "-i", INVENTORY], env={**os.environ, **lab.env},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    seen: list[str] = []
    # One thread reads the lines as they come. (select() on the pipe beside readline() missed lines: a read
    # takes every line already written into Python's buffer, where select() does not see them; the
    # "connection lost" line sat there unread while watch printed nothing more, and the test failed.)
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in watch.stdout:  # type: ignore[union-attr]
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()

    def read_until(pattern: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = lines.get(timeout=left)
            except queue.Empty:
                break
            seen.append(line)
            if re.search(pattern, line):
                return line
        raise AssertionError(f"no {pattern!r} in watch output:\n{''.join(seen[-30:])}")

    trainer_log = f"{JOBS_DIR}/{job_id}/output/trainer_log.jsonl"
    try:
        read_until(r"^step \d+/", 180)
        lab.host.stop_sshd()  # new connections are refused ...
        sessions = [line.split(None, 1)[0] for line in lab.host.exec("ps -eo pid=,args=").stdout.splitlines()
                    if line.split(None, 1)[1].startswith("sshd: lab")]  # fmt: skip
        for pid in sessions:  # ... and the open ones are cut, by their pids
            lab.host.exec(["kill", "-9", pid], check=False)
        read_until(r"connection to .* lost", 30)
        before = len(lab.host.exec(["cat", trainer_log]).stdout.splitlines())
        time.sleep(6)
        after = len(lab.host.exec(["cat", trainer_log]).stdout.splitlines())
        assert after > before, "training stopped with the SSH connection"
        assert state_on_host(lab.host, job_id)["state"] == "running"
        lab.host.start_sshd()
        read_until(r"reconnected to", 60)
        read_until(r"^step \d+/", 60)  # and the view goes on
        cancelled = cli(lab, "cancel", job_id, "-i", INVENTORY)
        assert cancelled.exit_code == 0, cancelled.output
        read_until(rf"^{job_id}: cancelled", 60)
        assert watch.wait(timeout=30) == 1  # watch ends with the job, non-zero for a job that did not succeed
    finally:
        if watch.poll() is None:
            watch.send_signal(signal.SIGINT)
            watch.wait(timeout=10)
        if lab.host.is_running():
            lab.host.start_sshd()


def test_cancel_killed_the_whole_process_tree(lab: Lab, demo_job: dict) -> None:
    job_id = lab.jobs.get("long")
    if job_id is None or state_on_host(lab.host, job_id)["state"] == "running":
        job_id = job_id or submit(lab, lab.long_spec)[0]
        assert cli(lab, "cancel", job_id, "-i", INVENTORY).exit_code == 0
    state = state_on_host(lab.host, job_id)
    assert state["state"] == "cancelled" and state["reason"] == "cancelled by user"
    procs = lab.host.exec("ps -eo pid=,pgid=,args=").stdout.splitlines()
    left = [p for p in procs if job_id in p or p.split()[1] == str(state["pgid"])]
    assert left == [], left
    status = cli(lab, "status", job_id, "-i", INVENTORY, "--json")
    assert json.loads(status.stdout)["state"] == "cancelled"


def test_list_and_status_show_states_and_survive_a_lost_sqlite(lab: Lab, demo_job: dict) -> None:
    listed = cli(lab, "list", "-i", INVENTORY, "--json")
    states = {row["id"]: row["state"] for row in json.loads(listed.stdout)}
    assert states[demo_job["id"]] == "succeeded"
    db = Path(lab.env["RADEONLAB_HOME"]) / "jobs.db"
    db.unlink()  # the laptop lost its cache: the hosts still know
    status = cli(lab, "status", demo_job["id"], "-i", INVENTORY)
    assert status.exit_code == 0, status.output
    assert f"{demo_job['id']} on {HOST}: succeeded" in status.stdout
    assert f"step {DEMO_STEPS}/{DEMO_STEPS}" in status.stdout
    db.unlink()
    listed = cli(lab, "list", "-i", INVENTORY, "--json")
    assert {row["id"]: row["state"] for row in json.loads(listed.stdout)} == states


def test_invalid_specs_upload_nothing(lab: Lab, demo_job: dict) -> None:
    blobs, jobs = host_listing(lab.host, BLOBS_DIR), host_listing(lab.host, JOBS_DIR)
    seed = cli(lab, "check", str(REPO / "src/radeonlab/jobs/examples/seed.yaml"))
    assert seed.exit_code != 0
    for key, fix in (("compute_type", "bf16: true"), ("disable_flash_attn", "flash_attn: disabled"),
                     ("ddp_backend", "remove ddp_backend")):  # fmt: skip
        assert any(key in line and fix in line for line in seed.stdout.splitlines()), (key, seed.stdout)
    seed_spec = str(REPO / "src/radeonlab/jobs/examples/seed.yaml")
    refused = cli(lab, "submit", seed_spec, "-i", INVENTORY, "--host", HOST)
    assert refused.exit_code == 2 and "nothing uploaded" in refused.stderr

    bad = lab.work / "bad"
    spec = write_spec(bad, {"max_steps": 5})
    data = demodata.write_dataset(bad / "data")
    lines = data.read_text().splitlines()
    lines[6] = '{"instruction": "Uppercase the word.", "input": "apple", "output": '  # line 7 cut short
    data.write_text("\n".join(lines) + "\n")
    (bad / "tiny-llama").symlink_to(lab.work / "tiny-llama")
    checked = cli(lab, "check", str(spec))
    assert checked.exit_code != 0
    assert any(line.startswith(f"{data}:7:") for line in checked.stdout.splitlines()), checked.stdout
    refused = cli(lab, "submit", str(spec), "-i", INVENTORY, "--host", HOST)
    assert refused.exit_code == 2 and f"{data}:7:" in refused.stderr
    assert host_listing(lab.host, BLOBS_DIR) == blobs and host_listing(lab.host, JOBS_DIR) == jobs


def test_an_unprovisioned_host_is_one_line_with_the_deploy_command(lab: Lab) -> None:
    lab.sandbox.create_host("jr-bare", card="rx7900xtx")
    try:
        result = cli(lab, "submit", str(lab.spec), "-i", INVENTORY, "--host", "jr-bare")
    finally:
        lab.sandbox.destroy_host("jr-bare")
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"radeonlab: error: jr-bare is not provisioned (no /etc/radeonlab/host.json): provision it first: "
        f"pyinfra -y --limit jr-bare {INVENTORY} deploy/setup.py"
    )


def test_dry_run_prints_the_plan_changes_nothing_then_the_same_spec_runs_as_planned(lab: Lab) -> None:
    spec = write_spec(lab.work / "dry", {"max_steps": 3})
    (lab.work / "dry" / "tiny-llama").symlink_to(lab.work / "tiny-llama")
    data = demodata.write_dataset(lab.work / "dry" / "data")
    data.write_text(
        data.read_text() + json.dumps({"instruction": "x", "input": "dry", "output": "DRY"}) + "\n"
    )
    blobs, jobs = host_listing(lab.host, BLOBS_DIR), host_listing(lab.host, JOBS_DIR)
    shown = cli(lab, "submit", str(spec), "-i", INVENTORY, "--host", HOST, "--dry-run", "learning_rate=1e-3")
    assert shown.exit_code == 0, shown.output
    text = shown.stdout
    assert f"host {HOST} (named with --host" in text and "GPU 0 AMD Radeon RX 7900 XTX" in text, text
    assert "precision fp32" in text and "~ output_dir: 'output' -> '/home/lab/radeonlab/jobs/" in text, text
    assert "~ include_num_input_tokens_seen: (unset) -> True" in text and "= learning_rate=1e-3" in text
    size = data.stat().st_size
    assert re.search(rf"to send: {size:,} bytes", text), text  # only the changed dataset: the model is there
    assert "VRAM estimate: fits" in text and "queue: the GPU is free" in text, text
    planned = json.loads(cli(lab, "submit", str(spec), "-i", INVENTORY, "--host", HOST, "--dry-run",
                             "--json", "learning_rate=1e-3").stdout)  # fmt: skip
    node = planned["nodes"][0]
    assert node["bytes_to_send"] == size and node["precision"] == "fp32"
    assert host_listing(lab.host, BLOBS_DIR) == blobs and host_listing(lab.host, JOBS_DIR) == jobs
    done = cli(lab, "submit", str(spec), "-i", INVENTORY, "--host", HOST, "learning_rate=1e-3")
    assert done.exit_code == 0, done.output
    job_id = re.search(r"submitted (\S+) to", done.stdout).group(1)  # type: ignore[union-attr]
    assert f"sent {size / 1000:.1f} KB" in done.output, done.output
    # as planned: the host, the GPU, the rendered keys (the override's too), the precision
    record = json.loads(lab.host.exec(["cat", f"{JOBS_DIR}/{job_id}/job.json"]).stdout)
    assert record["host"] == node["host"] == HOST and record["gpus"] == [g["index"] for g in node["gpus"]]
    assert record["overrides"] == planned["overrides"] == {"learning_rate": "1e-3"}, record["overrides"]
    config = yaml.safe_load(lab.host.exec(["cat", f"{JOBS_DIR}/{job_id}/config.yaml"]).stdout)
    assert config["include_num_input_tokens_seen"] is True and config["output_dir"].startswith(JOBS_DIR)
    assert float(config["learning_rate"]) == 1e-3
    assert not any(config.get(k) for k in ("bf16", "fp16", "pure_bf16")), config  # fp32, as planned
    assert cli(lab, "watch", job_id, "-i", INVENTORY).exit_code == 0


def test_job_refs_prefix_and_last(lab: Lab, demo_job: dict) -> None:
    job_id = str(demo_job["id"])
    by_prefix = cli(lab, "status", job_id[: len(job_id) - 3], "-i", INVENTORY, "--json")
    assert by_prefix.exit_code == 0 and json.loads(by_prefix.stdout)["id"] == job_id, by_prefix.output
    last = cli(lab, "status", "@last", "-i", INVENTORY, "--json")
    assert last.exit_code in (0, 1) and json.loads(last.stdout)["id"], last.output


def test_strict_refuses_a_model_that_does_not_fit_the_card_before_anything_is_sent(lab: Lab) -> None:
    """Llama-3-8B's real config.json (no weights: the estimate needs only the shape) at bf16 LoRA, cutoff
    1024: ~21 GB on this host's simulated 24 GB RX 7900 XTX fits; a batch of 8 does not, and --strict refuses
    it before any byte is sent (tests/e2e/test_hub_e2e.py judges it on a 16 GB card through the Hub)."""
    import shutil

    from radeonlab.sandbox import hubcatalog

    folder = lab.work / "big8b"
    spec = write_spec(folder, {"max_steps": 1, "cutoff_len": 1024, "per_device_train_batch_size": 1})
    spec.write_text(spec.read_text() + "bf16: true\n")
    demodata.write_dataset(folder / "data")
    model = folder / "tiny-llama"
    model.mkdir()
    shutil.copy(hubcatalog.RECORDED / "Meta-Llama-3-8B" / "config.json", model / "config.json")
    (model / "model.safetensors").write_bytes(b"SIMULATED weights: a model folder holds weights")
    blobs, jobs = host_listing(lab.host, BLOBS_DIR), host_listing(lab.host, JOBS_DIR)
    fits = cli(lab, "submit", str(spec), "-i", INVENTORY, "--host", HOST, "--dry-run", "--strict")
    assert fits.exit_code == 0 and "VRAM estimate: fits: ~19.7 GiB" in fits.stdout, fits.output
    refused = cli(lab, "submit", str(spec), "-i", INVENTORY, "--host", HOST, "--strict",
                  "per_device_train_batch_size=8")  # fmt: skip
    assert refused.exit_code == 1, refused.output
    assert "does not fit" in refused.stderr and "refused (--strict), nothing uploaded" in refused.stderr
    assert host_listing(lab.host, BLOBS_DIR) == blobs and host_listing(lab.host, JOBS_DIR) == jobs


def test_a_recorded_card_missing_from_sysfs_marks_the_host_not_provisioned(lab: Lab) -> None:
    lab.host.set_card(None)  # the card removed, or amdgpu not loaded after a kernel update
    try:
        fleet = json.loads(cli(lab, "fleet", "-i", INVENTORY, "--limit", HOST, "--json").stdout)[0]
        assert not fleet["provisioned"], fleet
        assert (
            "GPU 0 AMD Radeon RX 7900 XTX is not in sysfs (card removed, or amdgpu not loaded)"
            in (fleet["provisioned_note"])
        )
        refused = cli(lab, "submit", str(lab.spec), "-i", INVENTORY, "--host", HOST, "--dry-run")
        assert refused.exit_code == 1 and "is not in sysfs" in refused.stderr, refused.output
    finally:
        lab.host.set_card("rx7900xtx")

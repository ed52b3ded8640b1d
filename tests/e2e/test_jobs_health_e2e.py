"""Training health end to end on ONE provisioned SIMULATED workstation: real training of the tiny model.

The host-side supervisor (jobs/host/supervisor.py, inside the job's detached launcher) is driven into
real failures and must get out of them with no laptop involved: a real NaN (learning_rate 1e30), a real
CPU allocation failure (RLIMIT_AS from `radeonlab: limits`), a SIGKILLed trainer (auto resume) and a
SIGKILLed launcher (`radeonlab resume`), and the per-GPU FIFO queue. CPU torch stands in for ROCm torch.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
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
# The allocation failure: 64 rows of 4096 tokens under a 3 GiB address space (docs/notes/llamafactory-cpu.md
# section
# 7 saw the same error at batch 64). Measured here: batch 32, 16 and 8 fail ("can't allocate memory"),
# batch 4 trains (batch 8 once passed in CI): start at 16 so the ladder always has to halve at least once.
OOM = {"address_space_gb": 3, "cutoff_len": 4096, "rows": 64, "words": 4200, "batch": 16}


@dataclass
class Lab:
    host: SandboxHost
    work: Path
    env: dict[str, str]


@pytest.fixture(scope="module")
def lab(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    provisioned = shared_trainer(sandbox)
    print(f"\nprovisioned {HOST} in {provisioned.seconds:.1f}s")
    work = tmp_path_factory.mktemp("health")
    data = demodata.write_dataset(work / "data")
    tinymodel.build_model(work / "tiny-llama", data)
    env = {"RADEONLAB_SANDBOX_DIR": str(sandbox.state_dir), "RADEONLAB_HOME": str(work / "laptop")}
    yield Lab(provisioned.host, work, env)


def cli(lab: Lab, *args: str):
    return CliRunner().invoke(main, list(args), env=lab.env, catch_exceptions=False)


def spec(lab: Lab, name: str, overrides: dict[str, object], block: str = "") -> Path:
    """The demo spec with `overrides`: keys demo.yaml has are replaced, others (optim, warmup_steps) added."""
    demo = (REPO / "src/radeonlab/jobs/examples/demo.yaml").read_text()
    has = {k: v for k, v in overrides.items() if re.search(rf"(?m)^{k}:", demo)}
    path = write_spec(lab.work, has, name=name)
    added = "".join(f"{k}: {v}\n" for k, v in overrides.items() if k not in has)
    path.write_text(path.read_text() + added)
    if block:
        path.write_text(path.read_text() + "radeonlab:\n" + block)
    return path


def submit(lab: Lab, path: Path) -> str:
    result = cli(lab, "submit", str(path), "-i", INVENTORY, "--host", HOST)
    assert result.exit_code == 0, result.output
    return re.search(r"submitted (\S+) to", result.stdout).group(1)  # type: ignore[union-attr]


def on_host(lab: Lab, job_id: str, name: str) -> str:
    return lab.host.exec(["cat", f"{JOBS_DIR}/{job_id}/{name}"]).stdout


def job_json(lab: Lab, job_id: str) -> dict:
    return json.loads(on_host(lab, job_id, "job.json"))


def state(lab: Lab, job_id: str) -> dict:
    return json.loads(on_host(lab, job_id, "state.json"))


def logged_steps(lab: Lab, job_id: str) -> list[int]:
    lines = on_host(lab, job_id, "output/trainer_log.jsonl").splitlines()
    return [p.step for p in map(parse_line, lines) if p and p.loss is not None]


def wait_for(pred, timeout: float, what: str) -> None:
    until = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < until, f"timed out waiting for {what}"
        time.sleep(0.2)


def config_value(text: str, key: str) -> str:
    return re.search(rf"(?m)^{key}: (.*)$", text).group(1)  # type: ignore[union-attr]


def test_nan_is_stopped_and_the_ladder_reaches_a_finite_loss(lab: Lab) -> None:
    t0 = time.monotonic()
    job_id = submit(
        lab, spec(lab, "nan.yaml", {"max_steps": 12, "save_steps": 2, "learning_rate": "1.0e+30"})
    )
    watched = cli(lab, "watch", job_id, "-i", INVENTORY)
    print(f"\nNaN job: submit to end {time.monotonic() - t0:.1f}s")
    assert watched.exit_code == 0, watched.output
    assert re.search(r"(?m)^attempt 2: flash_attn auto -> disabled \(NaN at step \d+\)", watched.stdout)
    # line mode marks where each remedy's attempt starts (the steps after it are that attempt's)
    marks = [line for line in watched.stdout.splitlines() if line.endswith(") starting")]
    assert marks == ["attempt 2 (remedy: nan -> flash_attn_disabled) starting",
                     "attempt 3 (remedy: nan -> lower_lr) starting"], watched.stdout  # fmt: skip
    assert re.search(
        r"(?m)^attempt 3: learning_rate 1e\+30 -> 5e-05 \(NaN at step \d+\), fresh start", watched.stdout
    )
    job = job_json(lab, job_id)
    attempts = job["attempts"]
    assert [a["state"] for a in attempts] == ["stopped", "stopped", "succeeded"]
    # Stopped by the supervisor's SIGTERM after the first NaN and before LLaMA-Factory would have run on to
    # max_steps 12 and exited 0. How many steps slip by in between depends on the machine's load (a busy
    # 2-core CI runner logged step 9 once), so the bound is the run's end, not a step count.
    for a in attempts[:2]:
        nan_step = int(re.fullmatch(r"nan at step (\d+).*", a["reason"]).group(1))  # type: ignore[union-attr]
        assert a["exit_code"] == 128 + signal.SIGTERM and nan_step <= a["last_step"] < 12, a
    assert attempts[1]["changes"] == {"flash_attn": ["auto", "disabled"]}
    assert attempts[2]["changes"] == {"learning_rate": [1e30, 5e-05]}
    assert attempts[2]["resume_from_checkpoint"] is None  # a checkpoint would restore the old lr
    assert job["result"]["attempt"] == 3
    assert job["result"]["settings"] == {"flash_attn": "disabled", "learning_rate": 5e-05}
    config = on_host(lab, job_id, "config.yaml")
    assert (
        config_value(config, "learning_rate") == "5.0e-05"
        and config_value(config, "flash_attn") == '"disabled"'
    )
    lines = on_host(lab, job_id, "output/trainer_log.jsonl").splitlines()
    losses = [p.loss for p in map(parse_line, lines) if p and p.loss is not None]
    assert len(losses) == 12 and all(v == v and abs(v) < 1e6 for v in losses), losses
    status = cli(lab, "status", job_id, "-i", INVENTORY)
    assert "adapter from attempt 3: flash_attn=disabled, learning_rate=5e-05" in status.stdout, status.stdout


def test_a_real_allocation_failure_halves_the_batch_and_keeps_the_effective_batch(lab: Lab) -> None:
    data = lab.work / "longdata"
    data.mkdir()
    rows = []
    for i, row in enumerate(demodata.rows(OOM["rows"])):
        words = [demodata.WORDS[(i + j) % len(demodata.WORDS)] for j in range(OOM["words"])]
        rows.append({"instruction": demodata.INSTRUCTION, "input": " ".join(words), "output": row["output"]})
    (data / demodata.FILE_NAME).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (data / "dataset_info.json").write_text(json.dumps(demodata.DATASET_INFO))
    overrides = {"max_steps": 1, "save_steps": 100, "cutoff_len": OOM["cutoff_len"],
                 "dataset_dir": "longdata", "per_device_train_batch_size": OOM["batch"],
                 "gradient_accumulation_steps": 1}  # fmt: skip
    path = spec(lab, "oom.yaml", overrides, f"  limits: {{address_space_gb: {OOM['address_space_gb']}}}\n")
    t0 = time.monotonic()
    job_id = submit(lab, path)
    watched = cli(lab, "watch", job_id, "-i", INVENTORY)
    print(f"\nOOM job: submit to end {time.monotonic() - t0:.1f}s")
    assert watched.exit_code == 0, watched.output
    job = job_json(lab, job_id)
    # Where exactly the allocations start to fit varies a little between runs and machines: batch 16 always
    # fails under this limit, batch 4 always trains; each attempt in between halves the batch again.
    attempts = job["attempts"]
    assert len(attempts) >= 2 and attempts[-1]["state"] == "succeeded", attempts
    assert job["result"]["attempt"] == len(attempts)
    batch, accum = OOM["batch"], 1
    for failed, retry in zip(attempts, attempts[1:], strict=False):
        assert failed["state"] == "failed", failed
        assert "DefaultCPUAllocator: can't allocate memory" in failed["reason"], failed
        assert retry["changes"] == {"per_device_train_batch_size": [batch, batch // 2],
                                    "gradient_accumulation_steps": [accum, accum * 2]}  # fmt: skip
        batch, accum = batch // 2, accum * 2
    config = on_host(lab, job_id, "config.yaml")
    on_disk = (int(config_value(config, "per_device_train_batch_size")),
               int(config_value(config, "gradient_accumulation_steps")))  # fmt: skip
    assert on_disk == (batch, accum) and batch * accum == OOM["batch"]  # effective batch unchanged
    assert "can't allocate memory" in on_host(lab, job_id, "train.log")


def test_killed_trainer_resumes_itself_and_a_dead_launcher_resumes_by_command(lab: Lab) -> None:
    t0 = time.monotonic()
    job_id = submit(lab, spec(lab, "kill.yaml", {"max_steps": 300, "save_steps": 20}))
    out = f"{JOBS_DIR}/{job_id}/output"

    def checkpoint_done(n: int) -> bool:
        return (
            lab.host.exec(["test", "-e", f"{out}/checkpoint-{n}/trainer_state.json"], check=False).returncode
            == 0
        )

    # 1. SIGKILL the trainer only (like the kernel OOM killer): the supervisor resumes from its checkpoint
    wait_for(lambda: checkpoint_done(20), 120, "checkpoint-20")
    lab.host.exec(["kill", "-9", str(state(lab, job_id)["child_pid"])])
    wait_for(lambda: len(job_json(lab, job_id)["attempts"]) == 2, 30, "the automatic resume")
    auto = job_json(lab, job_id)["attempts"]
    assert auto[0]["state"] == "failed" and auto[0]["exit_code"] == 137
    assert auto[1]["cause"].startswith("killed") and auto[1]["resume_from_checkpoint"].startswith(
        "checkpoint-"
    )
    resumed_at = int(auto[1]["resume_from_checkpoint"].split("-")[1])
    # 2. SIGKILL the launcher, then the trainer (a host crash): nothing left to record it
    wait_for(lambda: checkpoint_done(resumed_at + 20), 120, f"checkpoint-{resumed_at + 20}")
    st = state(lab, job_id)
    lab.host.exec(["kill", "-9", str(st["pid"])])
    lab.host.exec(["python3", "-c", f"import os; os.killpg({int(st['pgid'])}, 9)"])  # by its recorded id
    assert state(lab, job_id)["state"] == "running"  # what the host file still says
    status = cli(lab, "status", job_id, "-i", INVENTORY)
    assert "failed" in status.stdout and "process gone" in status.stdout, status.stdout
    resumed = cli(lab, "resume", job_id, "-i", INVENTORY)
    assert resumed.exit_code == 0 and "resumed" in resumed.stdout, resumed.output
    watched = cli(lab, "watch", job_id, "-i", INVENTORY)
    print(f"\nkill/resume job: submit to end {time.monotonic() - t0:.1f}s")
    assert watched.exit_code == 0, watched.output
    attempts = job_json(lab, job_id)["attempts"]
    assert len(attempts) == 3 and attempts[1]["reason"].startswith("process gone") and attempts[2]["cause"]
    checkpoint = int(attempts[2]["resume_from_checkpoint"].split("-")[1])
    assert checkpoint >= resumed_at + 20
    # only the steps after each checkpoint ran again, and the final log has every step once
    assert attempts[1]["first_step"] == resumed_at + 1 and attempts[2]["first_step"] == checkpoint + 1
    assert logged_steps(lab, job_id) == list(range(1, 301))


def test_a_busy_gpu_queues_fifo_on_the_host_and_cancel_works_while_queued(lab: Lab) -> None:
    exe = str(Path(sys.executable).with_name("radeonlab"))
    env = {**os.environ, **lab.env}
    first = submit(lab, spec(lab, "long.yaml", {"max_steps": 5000, "save_steps": 1000}))
    wait_for(lambda: state(lab, first)["state"] == "running", 30, "the first job to run")
    short = spec(lab, "short.yaml", {"max_steps": 5})
    # submitted by a process that exits: the line lives on the host, in each job's own launcher
    out = subprocess.run([exe, "submit", str(short), "-i", INVENTORY, "--host", HOST], env=env,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    second = re.search(r"submitted (\S+) to \S+: queued \(waiting: GPU 0 is in use by (\S+)\)", out.stdout)
    assert second and second.group(2) == first, out.stdout
    second_id = second.group(1)
    planned = cli(lab, "submit", str(short), "-i", INVENTORY, "--host", HOST, "--dry-run")
    assert planned.exit_code == 0 and "queue: 2 job(s) on that GPU now" in planned.stdout, planned.output
    third = submit(lab, short)
    listed = {r["id"]: r["state"] for r in json.loads(cli(lab, "list", "-i", INVENTORY, "--json").stdout)}
    assert (listed[first], listed[second_id], listed[third]) == ("running", "queued", "queued")
    assert "1 job(s) ahead" in state(lab, third)["reason"]
    cancelled = cli(lab, "cancel", third, "-i", INVENTORY)
    assert cancelled.exit_code == 0 and "cancelled" in cancelled.stdout, cancelled.output
    assert state(lab, third)["reason"] == "cancelled while queued"
    assert cli(lab, "cancel", first, "-i", INVENTORY).exit_code == 0
    watched = cli(lab, "watch", second_id, "-i", INVENTORY)  # starts when the GPU frees, then runs to the end
    assert watched.exit_code == 0, watched.output
    assert state(lab, second_id)["started_at"] and state(lab, third)["state"] == "cancelled"
    procs = lab.host.exec("ps -eo args=").stdout
    assert third not in procs and first not in procs


# --- README claims that only unit tests backed (issue 18): each seen in a real run here -------------------

# A NaN that starts AFTER a checkpoint: constant_with_warmup from 1e30 over 1e13 steps makes the learning rate
# grow by 1e17 per step; measured here, the tiny model's loss first turns NaN at step 9 (steps 3 and 4 with a
# 10x and 100x faster ramp), so save_steps 5 leaves a complete checkpoint-5 written before it.
NAN_LATE = {"max_steps": 30, "save_steps": 5, "learning_rate": "1.0e+30",
            "lr_scheduler_type": "constant_with_warmup", "warmup_steps": 10000000000000}  # fmt: skip


def test_a_nan_after_a_checkpoint_resumes_from_the_checkpoint_before_it(lab: Lab) -> None:
    job_id = submit(lab, spec(lab, "nanlate.yaml", NAN_LATE))
    watched = cli(lab, "watch", job_id, "-i", INVENTORY)
    assert watched.exit_code == 0, watched.output
    attempts = job_json(lab, job_id)["attempts"]
    first_nan = int(re.search(r"nan at step (\d+)", attempts[0]["reason"]).group(1))  # type: ignore[union-attr]
    assert first_nan > 5, attempts[0]  # the premise: the NaN comes after checkpoint-5
    # attempt 2 (flash_attn disabled: a change a checkpoint keeps) resumes from the newest checkpoint written
    # before the first NaN step, and logs only the steps after it
    assert attempts[1]["changes"] == {"flash_attn": ["auto", "disabled"]}
    resumed = int(attempts[1]["resume_from_checkpoint"].split("-")[1])
    assert resumed < first_nan and resumed % 5 == 0, attempts[1]
    assert attempts[1]["first_step"] == resumed + 1, attempts[1]
    # the learning rate is what breaks it: the next rung starts fresh with 5e-05 and finishes
    assert attempts[-1]["state"] == "succeeded" and attempts[-1]["resume_from_checkpoint"] is None
    assert logged_steps(lab, job_id) == list(range(1, NAN_LATE["max_steps"] + 1))


def test_the_nan_ladder_tries_adamw_torch_and_then_gives_up_with_a_report(lab: Lab) -> None:
    overrides = {"max_steps": 12, "save_steps": 100, "learning_rate": "1.0e+30", "optim": "sgd"}
    path = spec(lab, "nanopt.yaml", overrides, "  remedies: {nan: [adamw_torch]}\n")
    job_id = submit(lab, path)
    watched = cli(lab, "watch", job_id, "-i", INVENTORY)
    assert watched.exit_code == 1, watched.output  # it failed: no rung fixed it
    job, st = job_json(lab, job_id), state(lab, job_id)
    attempts = job["attempts"]
    assert len(attempts) == 2 and attempts[1]["changes"] == {"optim": ["sgd", "adamw_torch"]}, attempts
    assert attempts[1]["resume_from_checkpoint"] is None  # a checkpoint would restore the old optimizer
    assert st["state"] == "failed" and st["end"] == "gave_up", st
    report = job["report"]
    assert report.startswith("gave up: every step of the nan ladder has been applied"), report
    assert "attempt 2: remedy nan/adamw_torch" in report and "values now: optim=adamw_torch" in report
    tried = [line.strip() for line in report.splitlines() if line.startswith("  attempt ")]
    assert len(tried) == len(attempts) - 1, report  # every remedy attempt named, in order
    status = cli(lab, "status", job_id, "-i", INVENTORY)
    assert "gave up:" in status.stdout and "remedies tried:" in status.stdout, status.stdout


def long_rows(lab: Lab, name: str) -> str:
    """A dataset folder of OOM["rows"] rows of OOM["words"] words (longer than any cutoff used here)."""
    data = lab.work / name
    if not data.is_dir():
        data.mkdir()
        rows = []
        for i, row in enumerate(demodata.rows(OOM["rows"])):
            words = [demodata.WORDS[(i + j) % len(demodata.WORDS)] for j in range(OOM["words"])]
            rows.append(
                {"instruction": demodata.INSTRUCTION, "input": " ".join(words), "output": row["output"]}
            )
        (data / demodata.FILE_NAME).write_text("".join(json.dumps(r) + "\n" for r in rows))
        (data / "dataset_info.json").write_text(json.dumps(demodata.DATASET_INFO))
    return name


def test_the_oom_ladder_lowers_cutoff_len_and_gives_up_naming_the_memory(lab: Lab) -> None:
    folder = long_rows(lab, "longdata2")
    block = f"  limits: {{address_space_gb: {OOM['address_space_gb']}}}\n  remedies: {{oom: [cutoff_1024]}}\n"

    def job(batch: int) -> str:
        overrides = {"max_steps": 1, "save_steps": 100, "cutoff_len": 4096, "dataset_dir": folder,
                     "per_device_train_batch_size": batch, "gradient_accumulation_steps": 1}  # fmt: skip
        return submit(lab, spec(lab, f"cut{batch}.yaml", overrides, block))

    # batch 16 x 4096 tokens does not fit the 3 GiB address space; 16 x 1024 does (like 4 x 4096)
    fits = job(16)
    assert cli(lab, "watch", fits, "-i", INVENTORY).exit_code == 0
    attempts = job_json(lab, fits)["attempts"]
    assert [a["state"] for a in attempts] == ["failed", "succeeded"], attempts
    assert attempts[1]["changes"] == {"cutoff_len": [4096, 1024]}
    assert config_value(on_host(lab, fits, "config.yaml"), "cutoff_len") == "1024"
    # batch 64 x 1024 is as much as 16 x 4096: still too much after the last rung -> the give-up report
    too_big = job(64)
    assert cli(lab, "watch", too_big, "-i", INVENTORY).exit_code == 1
    record, st = job_json(lab, too_big), state(lab, too_big)
    assert len(record["attempts"]) == 2 and st["end"] == "gave_up", st
    assert "values now: cutoff_len=1024" in record["report"]
    tried = [line.strip() for line in record["report"].splitlines() if line.startswith("  attempt ")]
    assert len(tried) == 1 and tried[0].startswith("attempt 2:") and "cutoff" in tried[0], record["report"]
    assert re.search(r"VRAM seen: .*GiB", record["report"]), record["report"]


def test_logs_follow_prints_the_whole_log_once_across_a_dropped_connection(lab: Lab) -> None:
    job_id = submit(lab, spec(lab, "follow.yaml", {"max_steps": 40, "save_steps": 100}))
    exe = str(Path(sys.executable).with_name("radeonlab"))
    follower = subprocess.Popen([exe, "logs", "-f", job_id, "-i", INVENTORY], env={**os.environ, **lab.env},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    trainer_log = f"{JOBS_DIR}/{job_id}/output/trainer_log.jsonl"
    steps = lambda: lab.host.exec(["cat", trainer_log], check=False).stdout.count("\n")  # noqa: E731
    wait_for(lambda: steps() >= 5, 120, "five logged steps")  # (the file appears with the first step)
    lab.host.stop_sshd()  # the follower's connection goes, the training does not
    sessions = [
        line.split(None, 1)[0]
        for line in lab.host.exec("ps -eo pid=,args=").stdout.splitlines()
        if line.split(None, 1)[1].startswith("sshd: lab")
    ]  # by pid: a pattern would match this shell
    for pid in sessions:
        lab.host.exec(["kill", "-9", pid], check=False)
    time.sleep(3)
    lab.host.start_sshd()
    out, err = follower.communicate(timeout=300)
    assert follower.returncode == 0, err.decode()
    assert b"reconnecting" in err and b"reconnected" in err, err.decode()
    # The host's bytes, read from its disk: train.log holds tqdm's carriage returns, which a text read turns
    # into newlines.
    host_log = (lab.host.root / JOBS_DIR.lstrip("/") / job_id / "train.log").read_bytes()
    assert b"\r" in host_log and out == host_log, "the followed log differs from the host's"
    assert state(lab, job_id)["state"] == "succeeded"


# SIMULATED GPU reset: CPU torch cannot fault a GPU, so the test bed (not the product) drops a .pth file into
# the host's training venv that makes llamafactory-cli print the first line ROCm/TheRock#7699 shows and abort
# (exit 134), only when the job's environment asks for it. The supervisor reads that log like a real one.
FAULT_PTH = "/home/lab/radeonlab/venv/lib/python3*/site-packages/zz_simulated_gpu_reset.pth"
FAULT_CODE = (
    "import os, sys; os.environ.get('SIMULATED_GPU_RESET')"
    " and any('llamafactory' in a for a in sys.orig_argv)"
    " and (os.write(2, b'Memory access fault by GPU node-1 (Agent handle: 0x1) on address 0x7f00. Reason: "
    "Page not present or supervisor privilege.\\n'), os.abort())\n"
)


def test_a_spec_that_turns_the_gpu_reset_ladder_off_is_honoured(lab: Lab) -> None:
    pth = lab.host.exec(["sh", "-c", f"ls {FAULT_PTH.replace('zz_simulated_gpu_reset.pth', '')} -d"])
    path = pth.stdout.strip() + "/zz_simulated_gpu_reset.pth"
    lab.host.exec(["sh", "-c", f"cat > {path} && chown lab: {path}"], input=FAULT_CODE)
    try:
        block = "  env: {SIMULATED_GPU_RESET: 1}\n  remedies: {gpu_reset: off}\n"
        reset_off = spec(lab, "reset-off.yaml", {"max_steps": 2}, block)
        submitted = cli(lab, "submit", str(reset_off), "-i", INVENTORY, "--host", HOST)
        job_id = re.search(r"submitted (\S+) to", submitted.stdout).group(1)  # type: ignore[union-attr]
        if submitted.exit_code == 1:  # it failed within submit's start wait (an idle machine is that fast)
            assert "failed (gpu_reset" in submitted.stdout, submitted.output
        else:
            assert submitted.exit_code == 0, submitted.output
            assert cli(lab, "watch", job_id, "-i", INVENTORY).exit_code == 1
    finally:
        lab.host.exec(["rm", "-f", path])
    record, st = job_json(lab, job_id), state(lab, job_id)
    attempts = record["attempts"]
    assert [(a["state"], a["exit_code"]) for a in attempts] == [("failed", 134)], attempts  # no retry
    assert attempts[0]["reason"].startswith("gpu_reset"), attempts[0]
    assert st["end"] == "gave_up" and "the spec turns the gpu_reset remedy off" in st["reason"], st
    assert "remedies tried: none" in record["report"], record["report"]

"""The host-side supervisor without SSH: shipped code imports on a bare python3, configs round-trip through
YAML, and the attempt loop (stop at NaN, remedy, rewrite config.yaml, record) against a SIMULATED
llamafactory-cli that writes a NaN loss whenever config.yaml's learning_rate is above 1."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from radeonlab.contract.jobdir import JobDir
from radeonlab.contract.messages import LaunchOptions
from radeonlab.contract.records import Attempt
from radeonlab.contract.state import AttemptState
from radeonlab.errors import DoesNotFitError
from radeonlab.jobs.host import stage
from radeonlab.jobs.host.supervisor import config_yaml, yaml_scalar
from radeonlab.jobs.plan import preflight
from tests.support.hostjob import fake_venv, job_json, make_job, run_launcher, state_of, unpack_code

FAKE_CLI = f"""#!{sys.executable}
# SIMULATED llamafactory-cli: reads learning_rate from the config it is given, logs steps, NaN if lr > 1.
import json, os, re, sys, time
text = open(sys.argv[2]).read()
lr = float(re.search(r"(?m)^learning_rate: (.*)$", text).group(1))
os.makedirs("output", exist_ok=True)
with open("output/trainer_log.jsonl", "a") as f:
    for step in range(1, 4):
        loss = float("nan") if lr > 1 and step >= 2 else 1.0 / step
        f.write(json.dumps({{"current_steps": step, "total_steps": 3, "loss": loss}}) + "\\n")
        f.flush()
        time.sleep(0.3 if lr > 1 else 0)
    if lr > 1:
        time.sleep(60)  # LLaMA-Factory would carry on; the supervisor must stop it
open("output/adapter_model.safetensors", "wb").write(b"simulated adapter")
"""


def test_shipped_code_imports_on_a_bare_python3(tmp_path: Path) -> None:
    code = unpack_code(tmp_path / "host")
    script = """
import importlib, json, pkgutil, sys
sys.path.insert(0, sys.argv[1])
import radeonlab.jobs.host as host
for tool in pkgutil.iter_modules(host.__path__):
    if tool.name not in host.VENV_TOOLS:  # those run on the training venv's python
        importlib.import_module("radeonlab.jobs.host." + tool.name)
outside = {m.split(".")[0] for m in sys.modules} - set(sys.stdlib_module_names) - {"__main__"}
print(json.dumps(sorted(outside)))
"""
    # -I: no PYTHONPATH, no user site; -S: no site-packages: only the standard library and the shipped files
    out = subprocess.run(["python3", "-I", "-S", "-c", script, str(code)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["radeonlab"]  # every system-python tool, on the standard library only


@pytest.mark.parametrize("value", [1e30, 5e-05, 0.005, 2, True, None, "a: b # c", "it's", [1, "x"], {"k": 1}])
def test_yaml_scalars_read_back_as_the_same_value(value: object) -> None:
    assert yaml.safe_load(f"k: {yaml_scalar(value)}")["k"] == value
    assert yaml.safe_load(config_yaml({"k": value}, ["header"]))["k"] == value


def test_attempt_line() -> None:
    attempt = Attempt(
        n=2, created_at="t", changes={"flash_attn": ["auto", "disabled"]}, cause="NaN at step 3"
    )
    assert attempt.line() == "attempt 2: flash_attn auto -> disabled (NaN at step 3), fresh start"
    attempt.resume_from_checkpoint, attempt.state = "checkpoint-20", AttemptState.SUCCEEDED
    assert attempt.line().endswith("(NaN at step 3), from checkpoint-20: succeeded")
    assert Attempt(n=1, created_at="t").line() == "attempt 1: first run"


def supervised_job(tmp_path: Path, job_id: str, config: dict, job: dict) -> tuple[JobDir, Path]:
    """A job folder as submit leaves it (job.json, config.json/.yaml, shipped code) and a venv whose
    llamafactory-cli is the SIMULATED one above: (job, venv); output_dir is the job's output/."""
    venv = fake_venv(tmp_path, FAKE_CLI)
    root = tmp_path / "jobs" / job_id
    config = {**config, "output_dir": str(root / "output")}
    return make_job(tmp_path / "jobs", job_id, config=config, **job), venv


def test_supervisor_stops_nan_lowers_lr_and_records_attempts(tmp_path: Path) -> None:
    job, venv = supervised_job(
        tmp_path,
        "n-20250101-000000-abcd",
        {"learning_rate": 1e30, "flash_attn": "disabled"},
        {"attempts": [Attempt(n=1, created_at="x")], "remedies": {"nan": {"enabled": True, "steps": []}}},
    )
    root = Path(job.root)
    assert run_launcher(job, venv) == 0
    state = state_of(job)
    assert state["state"] == "succeeded" and state["attempt"] == 2
    record = job_json(job)
    first, second = record["attempts"]
    assert first["state"] == "stopped" and first["exit_code"] == 143 and first["last_step"] in (2, 3)
    assert first["first_step"] == 1 and first["reason"].startswith("nan at step 2")
    # flash_attn is already disabled, so the ladder's next step applies: a lower lr, fresh start
    assert second["changes"] == {"learning_rate": [1e30, 5e-05]} and second["cause"] == "NaN at step 2"
    assert second["state"] == "succeeded" and second["resume_from_checkpoint"] is None
    assert (root / "output.attempt-1/trainer_log.jsonl").exists()
    assert yaml.safe_load(Path(job.config).read_text())["learning_rate"] == 5e-05
    assert record["result"]["settings"] == {"learning_rate": 5e-05} and record["result"]["attempt"] == 2
    assert record["lf_defaults"] and record["code"]["files"]  # the supervisor keeps what the laptop wrote


def test_preflight_warns_suggests_and_strict_refuses() -> None:
    model = {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
    }
    train = {"finetuning_type": "lora", "bf16": True, "per_device_train_batch_size": 8, "cutoff_len": 2048}
    free = 24 * 2**30 - 2**30  # a 24 GiB card with 1 GiB in use
    result = preflight.check(model, train, free)
    assert result.fits is False and "per_device_train_batch_size: 8 ->" in result.message
    assert result.free == free and result.peak is not None and result.peak > free
    with pytest.raises(DoesNotFitError, match="refused"):
        preflight.enforce(result, True, "ws1")
    preflight.enforce(result, False, "ws1")  # a warning only
    small = {**train, "per_device_train_batch_size": 1, "cutoff_len": 512}
    assert preflight.check(model, small, free).fits is True
    skipped = preflight.check(None, train, free, "the model is a hub id")
    assert skipped.fits is None and skipped.message == "the model is a hub id"
    assert preflight.check(model, train, None).fits is None  # the host record names no GPU memory


def test_resume_bounded_by_a_step_starts_from_the_checkpoint_every_node_holds(tmp_path: Path) -> None:
    """`--resume --resume-max-step 10` (what a multi-node resume sends when the other rank's newest complete
    checkpoint is 10): this node resumes from checkpoint-10 and drops its own later checkpoint-20."""
    job, venv = supervised_job(
        tmp_path,
        "r-20250101-000000-abcd",
        {"learning_rate": 5e-05},
        {"attempts": [Attempt(n=1, created_at="x", state="cancelled")]},
    )
    root = Path(job.root)
    for step in (10, 20):
        (root / f"output/checkpoint-{step}").mkdir(parents=True)
        (root / f"output/checkpoint-{step}/trainer_state.json").write_text("{}")
    Path(job.state).write_text(json.dumps({"state": "cancelled", "reason": "cancelled by user"}))
    Path(job.cancel_marker).write_text("t\n")  # the earlier cancel's request: a resume is done with it
    options = {"resume": True, "resume_max_step": 10}
    assert stage.launch_command(job.root, LaunchOptions(str(venv), **options))[2].endswith(
        "--resume --resume-max-step 10"
    )
    assert run_launcher(job, venv, **options) == 0
    last = job_json(job)["attempts"][-1]
    assert last["resume_from_checkpoint"] == "checkpoint-10", last
    assert "every node holds: up to step 10" in last["note"], last
    assert (root / "output/checkpoint-10").is_dir() and not (root / "output/checkpoint-20").exists()
    assert yaml.safe_load(Path(job.config).read_text())["resume_from_checkpoint"] == str(
        root / "output/checkpoint-10"
    )
    assert state_of(job)["state"] == "succeeded" and not Path(job.cancel_marker).exists()

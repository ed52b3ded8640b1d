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
from radeonlab.jobs.apply import bundle as hostbundle
from radeonlab.jobs.apply import launch
from radeonlab.jobs.host.supervisor import config_yaml, yaml_scalar
from radeonlab.jobs.plan import preflight

from radeonlab.contract.records import Attempt, JobPaths, attempt_line

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
    hostbundle.install_local(tmp_path / "host")
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from radeonlab.jobs.host import supervisor; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('yaml', 'jinja2', 'pyinfra', 'fabric')))"
    )
    # -I: no site-packages, no PYTHONPATH: only the standard library and the shipped files
    out = subprocess.run(
        ["python3", "-I", "-c", code, str(tmp_path / "host")], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("value", [1e30, 5e-05, 0.005, 2, True, None, "a: b # c", "it's", [1, "x"], {"k": 1}])
def test_yaml_scalars_read_back_as_the_same_value(value: object) -> None:
    assert yaml.safe_load(f"k: {yaml_scalar(value)}")["k"] == value
    assert yaml.safe_load(config_yaml({"k": value}, ["header"]))["k"] == value


def test_attempt_line() -> None:
    attempt = Attempt(
        n=2, created_at="t", changes={"flash_attn": ["auto", "disabled"]}, cause="NaN at step 3"
    )
    assert attempt_line(attempt) == "attempt 2: flash_attn auto -> disabled (NaN at step 3), fresh start"
    attempt.resume_from_checkpoint, attempt.state = "checkpoint-20", "succeeded"
    assert attempt_line(attempt).endswith("(NaN at step 3), from checkpoint-20: succeeded")


def supervised_job(tmp_path: Path, job_id: str, config: dict, job: dict) -> tuple[JobPaths, Path]:
    """A job folder as submit leaves it (job.json, config.json/.yaml, launcher, shipped code) and a venv
    whose llamafactory-cli is the SIMULATED one above: (paths, venv); output_dir is the job's output/."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    (venv / "bin/llamafactory-cli").write_text(FAKE_CLI)
    (venv / "bin/llamafactory-cli").chmod(0o755)
    paths = JobPaths.for_job(str(tmp_path / "jobs"), job_id)
    root = Path(paths.root)
    root.mkdir(parents=True, exist_ok=True)
    config = {**config, "output_dir": str(root / "output")}
    base = {"id": job_id, "name": job_id.split("-")[0], "spec_file": "s.yaml", "created_at": "x", "host": "h"}
    Path(paths.job).write_text(json.dumps({**base, "gpus": [0], **job}))
    Path(paths.config_json).write_text(json.dumps(config))
    Path(paths.config).write_text(config_yaml(config, ["first"]))
    Path(paths.launcher).write_text(launch.launcher_source())
    hostbundle.install_local(Path(paths.host_code))
    return paths, venv


def test_supervisor_stops_nan_lowers_lr_and_records_attempts(tmp_path: Path) -> None:
    paths, venv = supervised_job(
        tmp_path,
        "n-20250101-000000-abcd",
        {"learning_rate": 1e30, "flash_attn": "disabled"},
        {"attempts": [{"n": 1, "created_at": "x"}], "remedies": {"nan": {"enabled": True, "steps": []}}},
    )
    root = Path(paths.root)
    argv = launch.launcher_argv(paths, str(venv))
    done = subprocess.run([sys.executable, *argv[1:]], timeout=120)
    assert done.returncode == 0
    state = json.loads(Path(paths.state).read_text())
    assert state["state"] == "succeeded" and state["attempt"] == 2
    record = json.loads(Path(paths.job).read_text())
    first, second = record["attempts"]
    assert first["state"] == "stopped" and first["exit_code"] == 143 and first["last_step"] in (2, 3)
    # flash_attn is already disabled, so the ladder's next step applies: a lower lr, fresh start
    assert second["changes"] == {"learning_rate": [1e30, 5e-05]} and second["cause"] == "NaN at step 2"
    assert (root / "output.attempt-1/trainer_log.jsonl").exists()
    assert yaml.safe_load(Path(paths.config).read_text())["learning_rate"] == 5e-05
    assert record["result"]["settings"] == {"learning_rate": 5e-05}


def test_preflight_warns_suggests_and_strict_refuses(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "hidden_size": 4096,
                "intermediate_size": 14336,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "vocab_size": 128256,
            }
        )  # fmt: skip
    )
    train = {"finetuning_type": "lora", "bf16": True, "per_device_train_batch_size": 8, "cutoff_len": 2048}
    small = {"vram_total": 24 * 2**30, "vram_used": 2**30}
    result = preflight.check(str(tmp_path), train, small)
    assert result.fits is False and "per_device_train_batch_size: 8 ->" in result.message
    with pytest.raises(preflight.DoesNotFitError, match="refused"):
        preflight.enforce(result, True, "ws1")
    preflight.enforce(result, False, "ws1")  # a warning only
    assert preflight.check(str(tmp_path), {**train, "per_device_train_batch_size": 1, "cutoff_len": 512},
                           small).fits is True  # fmt: skip
    assert preflight.check(None, train, small).fits is None


def test_resume_bounded_by_a_step_starts_from_the_checkpoint_every_node_holds(tmp_path: Path) -> None:
    """`--resume --resume-max-step 10` (what a multi-node resume sends when the other rank's newest complete
    checkpoint is 10): this node resumes from checkpoint-10 and drops its own later checkpoint-20."""
    paths, venv = supervised_job(
        tmp_path,
        "r-20250101-000000-abcd",
        {"learning_rate": 5e-05},
        {"attempts": [{"n": 1, "created_at": "x", "state": "cancelled"}]},
    )
    root = Path(paths.root)
    for step in (10, 20):
        (root / f"output/checkpoint-{step}").mkdir(parents=True)
        (root / f"output/checkpoint-{step}/trainer_state.json").write_text("{}")
    Path(paths.state).write_text(json.dumps({"state": "cancelled", "reason": "cancelled by user"}))
    argv = launch.launcher_argv(paths, str(venv), resume=True, resume_max_step=10)
    assert argv[-3:] == ["--resume", "--resume-max-step", "10"]
    done = subprocess.run([sys.executable, *argv[1:]], timeout=120)
    assert done.returncode == 0
    last = json.loads(Path(paths.job).read_text())["attempts"][-1]
    assert last["resume_from_checkpoint"] == "checkpoint-10", last
    assert "every node holds: up to step 10" in last["note"], last
    assert (root / "output/checkpoint-10").is_dir() and not (root / "output/checkpoint-20").exists()
    assert yaml.safe_load(Path(paths.config).read_text())["resume_from_checkpoint"] == str(
        root / "output/checkpoint-10"
    )

"""Secrets without a sandbox host: which names are secret, what a job gets, that submit sends them only in
the stage request's stdin, which the host's stage tool writes to env.secret (0600; job.json keeps the
names), that the launcher deletes env.secret even when the job never runs, that EVERY attempt of the
supervisor gets them, and that resume sends them again. The host tools run here from the shipped code.
(On a provisioned SIMULATED workstation, end to end: tests/unit/test_security.py.)"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from radeonlab.contract.jobdir import FILES
from radeonlab.contract.parts import CodeDigest
from radeonlab.contract.records import JobRecord, StateRecord
from radeonlab.contract.state import JobState
from radeonlab.jobs.apply import secrets, submit
from radeonlab.jobs.host import supervisor
from radeonlab.jobs.spec import load as spec_module
from radeonlab.jobs.ssh import hostcode
from radeonlab.jobs.track import resume as resume_module
from radeonlab.jobs.track.handle import JobHandle
from tests.support.laptop_doubles import (
    RecordingRemote,
    demo_job,
    host_record,
    planned_on,
    run_host_tool,
    ship_code,
    target,
)

TOKEN = "hf_unitSECRET0123456789"
KEY = "wandb-unitSECRET-abcdef"


@pytest.mark.parametrize(
    ("name", "secret"),
    [("HF_TOKEN", True), ("WANDB_API_KEY", True), ("my_password", True), ("AWS_SECRET_ACCESS_KEY", True),
     ("HF_HUB_OFFLINE", False), ("PATH", False), ("NCCL_SOCKET_IFNAME", False)],
)  # fmt: skip
def test_names_that_look_secret(name: str, secret: bool) -> None:
    assert secrets.is_secret(name) is secret


def test_a_jobs_env_splits_into_plain_and_secret() -> None:
    spec_env = {"HF_HUB_OFFLINE": "1", "WANDB_API_KEY": KEY, "ORG": "lab"}
    laptop = {"HF_TOKEN": TOKEN, "ORG": "laptop-org", "OTHER": "x", "EMPTY": ""}
    plain, secret = secrets.job_env(spec_env, ["ORG", "EMPTY"], laptop)
    assert plain == {"HF_HUB_OFFLINE": "1"}
    # HF_TOKEN always forwarded; ORG is forwarded (so a secret) but keeps the spec's value; EMPTY is unset
    assert secret == {"HF_TOKEN": TOKEN, "WANDB_API_KEY": KEY, "ORG": "lab"}
    assert secrets.job_env({}, [], {}) == ({}, {})


def test_forward_env_is_validated(tmp_path: Path) -> None:
    good = spec_module.parse_text(
        "stage: sft\nradeonlab:\n  forward_env: [WANDB_API_KEY, ORG]\n", tmp_path / "s"
    )
    assert good.radeonlab.forward_env == ["WANDB_API_KEY", "ORG"] and good.block_problems == []
    bad = spec_module.parse_text("stage: sft\nradeonlab:\n  forward_env: [ok, 'no way', 3]\n", tmp_path / "s")
    assert [m for _line, m in bad.block_problems] == [
        "forward_env: 'no way' is not an environment variable name",
        "forward_env: 3 is not an environment variable name",
    ]
    assert spec_module.parse_text("a: 1\nradeonlab:\n  forward_env: X\n", tmp_path / "s").block_problems


def staged_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env_block: str, environ: dict[str, str]):  # noqa: ANN201
    """plan_job + apply_plan of a one-host job on ws9 (a recording remote): the plan and ws9's remote."""
    spec = demo_job(tmp_path)
    spec.write_text(spec.read_text() + env_block)
    hosts = {"ws9": (target("ws9"), host_record("ws9", cpu_torch=True, jobs_dir=str(tmp_path / "jobs")))}
    monkeypatch.setattr(submit, "upload_blobs", lambda remote, files, blobs, bar: (set(), 0))
    monkeypatch.setenv("RADEONLAB_HOME", str(tmp_path / "home"))
    plan, fleet = planned_on(spec, hosts, environ=environ, host="ws9")
    with fleet:
        submit.apply_plan(plan, fleet, say=lambda _m: None)
        remote = fleet.remotes["ws9"]
    return plan, remote


def stage_here(tmp_path: Path, request: dict[str, Any]) -> Path:
    """The host's stage tool, run here on the request the laptop sent (no links, code or launch: those need
    a content store, a code cache and a venv)."""
    kept = {k: v for k, v in request.items() if k not in ("links", "code", "launch")}
    done = run_host_tool(ship_code(tmp_path / "code"), "stage", stdin=json.dumps(kept))
    assert done.returncode == 0, done.stderr
    return Path(request["job_dir"])


def test_submit_sends_secrets_only_on_stdin_and_the_host_keeps_them_in_env_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    block = f"radeonlab:\n  env: {{WANDB_API_KEY: {KEY}, HF_HUB_OFFLINE: '1'}}\n  forward_env: [ORG]\n"
    plan, remote = staged_plan(tmp_path, monkeypatch, block, {"HF_TOKEN": TOKEN, "ORG": "lab"})
    (stage,) = remote.of("stage")
    request = stage.request
    assert request is not None and request["launch"]  # one round trip: staged and started
    for secret in (TOKEN, KEY):
        assert not [c for c in remote.calls if secret in " ".join(c.args)], "a secret on a command line"
        without = {k: v for k, v in request.items() if k != "secret"}
        assert secret not in json.dumps(without), "a secret outside the request's `secret`"
        assert secret not in json.dumps(plan.to_dict()), "a secret in `submit --dry-run --json`"
    assert request["secret"] == {"HF_TOKEN": TOKEN, "ORG": "lab", "WANDB_API_KEY": KEY}
    job = request["job"]
    assert job["secret_names"] == ["HF_TOKEN", "ORG", "WANDB_API_KEY"]
    assert job["env"] == {"HF_HUB_OFFLINE": "1"}
    assert FILES["config_json"] in request["files"]  # the supervisor's first config is staged too
    # ... and what the host's stage tool makes of it: env.secret 0600, job.json with names only
    folder = stage_here(tmp_path, request)
    env_secret = folder / FILES["env_secret"]
    assert stat.S_IMODE(env_secret.stat().st_mode) == 0o600
    assert json.loads(env_secret.read_text()) == request["secret"]
    on_disk = [p for p in folder.rglob("*") if p.is_file() and p != env_secret]
    assert not [p for p in on_disk if TOKEN.encode() in p.read_bytes() or KEY.encode() in p.read_bytes()]


def test_no_secrets_no_env_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _plan, remote = staged_plan(tmp_path, monkeypatch, "", {})
    request = remote.of("stage")[0].request
    assert request is not None and request["secret"] is None and request["job"]["secret_names"] == []
    assert not (stage_here(tmp_path, request) / FILES["env_secret"]).exists()


# --- on this machine: the real launcher and supervisor against a SIMULATED llamafactory-cli ---------------
FAKE_CLI = f"""#!{sys.executable}
# SIMULATED llamafactory-cli: records the token it sees per run; NaN loss while learning_rate > 1.
import json, os, re, sys, time
open("tokens.txt", "a").write(str(os.environ.get("HF_TOKEN")) + "\\n")
lr = float(re.search(r"(?m)^learning_rate: (.*)$", open(sys.argv[2]).read()).group(1))
os.makedirs("output", exist_ok=True)
with open("output/trainer_log.jsonl", "a") as f:
    for step in (1, 2):
        f.write(json.dumps({{"current_steps": step, "total_steps": 2,
                             "loss": float("nan") if lr > 1 else 1.0 / step}}) + "\\n")
        f.flush()
if lr > 1:
    time.sleep(60)  # the supervisor stops it at the NaN
open("output/adapter_model.safetensors", "wb").write(b"simulated adapter")
"""
JOB_ID = "t-20250101-000000-abcd"


def supervised_job(tmp_path: Path, lr: float) -> tuple[Path, Path]:
    """A job folder as stage leaves it (job.json with the code digests, config.json/.yaml, the shipped host
    code in host/) and a venv whose llamafactory-cli is the SIMULATED one above: (job folder, venv)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin/llamafactory-cli").write_text(FAKE_CLI)
    (venv / "bin/llamafactory-cli").chmod(0o755)
    folder = tmp_path / "jobs" / JOB_ID
    ship_code(folder / FILES["code"])
    config = {"learning_rate": lr, "flash_attn": "disabled", "output_dir": str(folder / "output")}
    job = JobRecord(
        JOB_ID, "t", "t.yaml", "x", "h", gpus=[0], secret_names=["HF_TOKEN"],
        remedies={"nan": {"enabled": True, "steps": []}},
        code=CodeDigest(hostcode.digest(), hostcode.file_digests()),
    )  # fmt: skip
    (folder / FILES["job"]).write_text(json.dumps(job.to_dict()))
    (folder / FILES["config_json"]).write_text(json.dumps(config))
    (folder / FILES["config"]).write_text(supervisor.config_yaml(config, ["first"]))
    fd = os.open(folder / FILES["env_secret"], os.O_WRONLY | os.O_CREAT, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"HF_TOKEN": TOKEN}, f)
    return folder, venv


def run_launcher(folder: Path, venv: Path, *extra: str) -> int:
    """`python3 -m radeonlab.jobs.host.launcher run` from the job's own copy of the host code, as stage
    starts it (without the login shell)."""
    done = run_host_tool(folder / FILES["code"], "launcher", "run", str(folder), "--venv", str(venv), *extra)
    return done.returncode


def test_every_attempt_of_the_supervisor_gets_the_secrets(tmp_path: Path) -> None:
    folder, venv = supervised_job(tmp_path, 1e30)  # attempt 1: NaN, stopped; attempt 2: lower lr
    assert run_launcher(folder, venv) == 0, (folder / FILES["launcher_log"]).read_text()
    state = json.loads((folder / FILES["state"]).read_text())
    assert (state["state"], state["attempt"]) == ("succeeded", 2)
    assert (folder / "tokens.txt").read_text().splitlines() == [TOKEN, TOKEN]
    assert not (folder / FILES["env_secret"]).exists()
    on_disk = [p for p in folder.rglob("*") if p.is_file() and p.name != "tokens.txt"]
    assert not [p for p in on_disk if TOKEN.encode() in p.read_bytes()], "a secret left in the job folder"


def test_a_job_that_never_runs_leaves_no_env_secret(tmp_path: Path) -> None:
    import fcntl

    folder, venv = supervised_job(tmp_path, 5e-5)
    locks = tmp_path / "locks"  # <jobs_dir>/../locks: one lock per GPU, shared by the host's jobs
    locks.mkdir()
    with open(locks / "gpu0.lock", "w") as held:  # another job holds GPU 0
        fcntl.flock(held, fcntl.LOCK_EX)
        assert run_launcher(folder, venv, "--no-queue") == 75
    state = json.loads((folder / FILES["state"]).read_text())
    assert state["state"] == "failed" and state["end"] == "gpu_busy" and "GPU 0 is in use" in state["reason"]
    assert not (folder / FILES["env_secret"]).exists()
    assert not (folder / "tokens.txt").exists()  # it never ran


def test_resume_sends_the_recorded_secrets_again(tmp_path: Path) -> None:
    """`radeonlab resume` starts a new launcher (no secrets in memory): env.secret is written again from the
    laptop's environment, in the same stage request that starts the launcher (stage writes it first); a name
    not set there is named in a warning."""
    record = host_record("ws9", cpu_torch=True)
    remote = RecordingRemote(target("ws9"))
    job = JobRecord(JOB_ID, "t", "t.yaml", "x", "ws9", secret_names=["HF_TOKEN", "WANDB_API_KEY"])
    failed = StateRecord(JobState.FAILED, pid=1, reason="gone", end="process_gone")
    handle = JobHandle("inv.py", {"ws9": remote.target}, remote.target, remote, record, job, failed, False)  # type: ignore[arg-type]
    handle.refresh = lambda: handle  # type: ignore[method-assign]  # no host to read back
    said: list[str] = []
    resume_module.resume(handle, environ={"HF_TOKEN": TOKEN, "WANDB": "x"}, say=said.append)
    (stage,) = remote.of("stage")
    request = stage.request
    assert request is not None and request["secret"] == {"HF_TOKEN": TOKEN}
    assert request["launch"]["resume"] is True and request["job_dir"] == record.job_dir(JOB_ID).root
    assert TOKEN not in " ".join(stage.args)
    assert said == [
        f"warning: {JOB_ID}: WANDB_API_KEY not set in this environment: the job resumes without it"
    ]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DISCORD_WEBHOOK", "https://discord.com/api/webhooks/123/abc"),
        ("SLACK_WEBHOOK_URL", "https://hooks.slack.com/services/T0/B0/XYZ"),
        ("MLFLOW_TRACKING_URI", "https://user:pw@mlflow.example/"),
        ("NOTES", "hf_" + "a" * 34),
        ("CI_THING", "ghp_" + "b" * 36),
    ],
)
def test_a_secret_is_known_by_its_value_too(name: str, value: str) -> None:
    """Webhooks and credential URLs went to job.json: the name heuristic alone missed them."""
    env = {name: value, "PLAIN": "1", "MLFLOW_TRACKING_URI_OK": "https://mlflow.example/"}
    plain, secret = secrets.split_env(env)
    assert secret == {name: value} and name not in plain and plain["PLAIN"] == "1"

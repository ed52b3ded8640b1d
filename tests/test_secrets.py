"""Secrets without a sandbox host: which names are secret, what a job gets, that submit's staging sends them
only on stdin into env.secret (job.json keeps the names), that the launcher deletes env.secret even when
the job never runs, that EVERY attempt of the supervisor gets them, and that resume sends them again.
(On a provisioned SIMULATED workstation, end to end: tests/test_security.py.)"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from radeonlab.jobs.apply import bundle as hostbundle
from radeonlab.jobs.apply import launch, secrets
from radeonlab.jobs.apply import submit as runner
from radeonlab.jobs.apply.sync import UploadReport
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.host.supervisor import config_yaml
from radeonlab.jobs.plan.render import render
from radeonlab.jobs.spec import load as spec_module
from radeonlab.jobs.ssh.connection import RunResult
from radeonlab.jobs.track import resume as resume_module

from radeonlab.contract.records import JobPaths, StateRecord
from radeonlab.contract.state import JobState

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


class RecordingRemote:
    """A Remote stand-in that records every command (argv + stdin) and every file written (no SSH)."""

    def __init__(self) -> None:
        self.target = HostTarget(name="ws9", hostname="127.0.0.1")
        self.runs: list[tuple[list[str], str | None]] = []
        self.writes: dict[str, str] = {}

    def run(
        self, argv: list[str], check: bool = True, stdin_text: str | None = None, **_kw: Any
    ) -> RunResult:
        self.runs.append((list(argv), stdin_text))
        return RunResult("", "", 0)

    def write_text_atomic(self, path: str, text: str) -> None:
        self.writes[path] = text


def test_staging_sends_secrets_only_on_stdin_into_env_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec_path = tmp_path / "s.yaml"
    spec_path.write_text(
        "stage: sft\ndataset_dir: ONLINE\nradeonlab:\n"
        f"  env: {{WANDB_API_KEY: {KEY}, HF_HUB_OFFLINE: '1'}}\n  forward_env: [ORG]\n"
    )
    spec = spec_module.load(spec_path)
    record = {
        "host": "ws9",
        "gpus": [],
        "torch": {"simulated_cpu_build": True},
        "jobs_dir": "/j",
        "venv": "/v",
    }
    paths = JobPaths.for_job("/j", "s-20250101-000000-abcd")
    rendered = render(spec, record, paths, job_id="s-20250101-000000-abcd")
    monkeypatch.setattr(runner, "upload_files", lambda *_a, **_k: UploadReport())
    remote = RecordingRemote()
    staged = runner.stage_job(
        remote, record, spec, spec_path, rendered, job_id="s-20250101-000000-abcd", created="t",
        say=lambda _m: None, progress_bar=runner.no_progress, environ={"HF_TOKEN": TOKEN, "ORG": "lab"},
    )  # fmt: skip
    for secret in (TOKEN, KEY):
        assert not [argv for argv, _ in remote.runs if secret in " ".join(argv)], "a secret on a command line"
        assert not [p for p, text in remote.writes.items() if secret in text], "a secret in a written file"
        assert secret not in json.dumps(staged.job)
    stdin = [s for argv, s in remote.runs if argv == launch.write_secret_argv(paths)]
    assert [json.loads(s or "") for s in stdin] == [{"HF_TOKEN": TOKEN, "ORG": "lab", "WANDB_API_KEY": KEY}]
    job = json.loads(remote.writes[str(paths.job)])
    assert job["secret_names"] == ["HF_TOKEN", "ORG", "WANDB_API_KEY"]
    assert job["env"] == {"HF_HUB_OFFLINE": "1"}
    assert str(paths.config_json) in remote.writes  # the supervisor's files are staged too


def test_no_secrets_no_env_secret() -> None:
    remote = RecordingRemote()
    runner.write_secrets(remote, JobPaths.for_job("/j", "x"), {})  # type: ignore[arg-type]
    assert remote.runs == []


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


def make_supervised_job(tmp_path: Path, lr: float) -> tuple[JobPaths, Path]:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin/llamafactory-cli").write_text(FAKE_CLI)
    (venv / "bin/llamafactory-cli").chmod(0o755)
    paths = JobPaths.for_job(str(tmp_path / "jobs"), "t-20250101-000000-abcd")
    root = Path(paths.root)
    root.mkdir(parents=True)
    config = {"learning_rate": lr, "flash_attn": "disabled", "output_dir": str(root / "output")}
    job = {"id": "t-20250101-000000-abcd", "name": "t", "spec_file": "t.yaml", "created_at": "x", "host": "h",
           "gpus": [0], "attempts": [{"n": 1, "created_at": "x"}], "secret_names": ["HF_TOKEN"],
           "remedies": {"nan": {"enabled": True, "steps": []}}}  # fmt: skip
    Path(paths.job).write_text(json.dumps(job))
    Path(paths.config_json).write_text(json.dumps(config))
    Path(paths.config).write_text(config_yaml(config, ["first"]))
    Path(paths.launcher).write_text(launch.launcher_source())
    hostbundle.install_local(Path(paths.host_code))
    return paths, venv


def write_env_secret(paths: JobPaths) -> None:
    fd = os.open(paths.env_secret, os.O_WRONLY | os.O_CREAT, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(launch.secret_text({"HF_TOKEN": TOKEN}))


def run_launcher(paths: JobPaths, venv: Path, *extra: str) -> int:
    argv = launch.launcher_argv(paths, str(venv))
    return subprocess.run([sys.executable, *argv[1:], *extra], timeout=120).returncode


def test_every_attempt_of_the_supervisor_gets_the_secrets(tmp_path: Path) -> None:
    paths, venv = make_supervised_job(tmp_path, 1e30)  # attempt 1: NaN, stopped; attempt 2: lower lr
    write_env_secret(paths)
    assert run_launcher(paths, venv) == 0
    assert json.loads(Path(paths.state).read_text())["attempt"] == 2
    assert (Path(paths.root) / "tokens.txt").read_text().splitlines() == [TOKEN, TOKEN]
    assert not Path(paths.env_secret).exists()
    on_disk = [p for p in Path(paths.root).rglob("*") if p.is_file() and p.name != "tokens.txt"]
    assert not [p for p in on_disk if TOKEN.encode() in p.read_bytes()], "a secret left in the job folder"


def test_a_job_that_never_runs_leaves_no_env_secret(tmp_path: Path) -> None:
    paths, venv = make_supervised_job(tmp_path, 5e-5)
    write_env_secret(paths)
    locks = Path(paths.locks_dir)
    locks.mkdir(parents=True)
    with open(locks / "gpu0.lock", "w") as held:  # another job holds GPU 0
        fcntl.flock(held, fcntl.LOCK_EX)
        assert run_launcher(paths, venv, "--no-queue") == 75
    state = json.loads(Path(paths.state).read_text())
    assert state["state"] == "failed" and "GPU 0 is in use" in state["reason"]
    assert not Path(paths.env_secret).exists()


def test_resume_sends_the_recorded_secrets_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """`radeonlab resume` starts a new launcher (no secrets in memory): env.secret is written again from the
    laptop's environment, before the launcher starts; a name not set there is named in a warning."""
    remote = RecordingRemote()
    paths = JobPaths.for_job("/j", "t-20250101-000000-abcd")
    job = {"id": "t-20250101-000000-abcd", "secret_names": ["HF_TOKEN", "WANDB_API_KEY"]}

    class Session:
        def __init__(self) -> None:
            self.remote, self.paths, self.record, self.target = remote, paths, {"venv": "/v"}, remote.target
            self.job = type("J", (), {})()
            self.job.alive = False
            self.job.state = StateRecord(JobState.FAILED, pid=1, reason="gone")
            self.job.host_job = type("H", (), {"job": job})()

        def refresh(self) -> None:
            pass

    @contextlib.contextmanager
    def fake_open(*_a: Any, **_k: Any):  # noqa: ANN202
        yield Session()

    monkeypatch.setattr(resume_module, "open_job", fake_open)
    monkeypatch.setattr(resume_module, "wait_new_launcher", lambda *_a: None)
    said: list[str] = []
    resume_module.resume(job["id"], "inv.py", environ={"HF_TOKEN": TOKEN}, say=said.append)
    commands = [argv for argv, _ in remote.runs]
    secret_at = commands.index(launch.write_secret_argv(paths))
    assert json.loads(remote.runs[secret_at][1] or "") == {"HF_TOKEN": TOKEN}
    assert secret_at < commands.index(launch.start_argv(launch.launcher_argv(paths, "/v", resume=True)))
    assert said == [f"{job['id']}: WANDB_API_KEY not set in this environment: the job resumes without it"]

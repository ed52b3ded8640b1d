"""The host-side launcher, run for real on this machine (no SSH) against a stand-in `llamafactory-cli`.

Each job folder holds the shipped host code (tests/support/hostjob.py), and the launcher runs as on a
workstation: `python3 -m radeonlab.jobs.host.launcher` from that folder, started by the command
jobs/host/stage.py builds (in the foreground, or detached through the stage tool itself). The stand-in is a
small python script in a temporary "venv": it writes a trainer_log.jsonl and an adapter file, can wait for a
file, sleep, ignore SIGTERM, spawn a grandchild, and exits with a chosen code. It is driven by the job's env
(job.json "env"), which also proves that env reaches the training process.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from radeonlab.contract.jobdir import JobDir, alive
from radeonlab.contract.messages import LaunchOptions
from radeonlab.contract.records import StateRecord
from radeonlab.contract.state import EndReason, JobState
from radeonlab.jobs.host import stage
from tests.support.hostjob import (
    fake_venv,
    kill_recorded,
    make_job,
    run_launcher,
    start,
    state_of,
    tool,
    wait_for,
)

FAKE_CLI = f"""#!{sys.executable}
# SIMULATED llamafactory-cli for the launcher tests: no training happens here.
import json, os, signal, subprocess, sys, time
env = os.environ
seen = {{k: env.get(k) for k in ("HF_HOME", "MPLCONFIGDIR", "HF_DATASETS_CACHE", "HIP_VISIBLE_DEVICES",
                                 "MY_TOKEN", "PLAIN", "PYTHONPATH", "PATH")}}
seen.update(argv=sys.argv, pid=os.getpid(), pgid=os.getpgid(0))
json.dump(seen, open("seen.json", "w"))
if env.get("FAKE_GRANDCHILD"):
    kid = subprocess.Popen(["sleep", "300"])
    open("grandchild.pid", "w").write(str(kid.pid))
if env.get("FAKE_IGNORE_TERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
os.makedirs("output", exist_ok=True)
with open("output/trainer_log.jsonl", "w") as f:
    f.write('{{"current_steps": 1, "total_steps": 2, "loss": 8.38, "lr": 0.005}}\\n')
print("training...", flush=True)
while env.get("FAKE_WAIT_FOR") and not os.path.exists(env["FAKE_WAIT_FOR"]):
    time.sleep(0.05)
time.sleep(float(env.get("FAKE_SLEEP", "0")))
code = int(env.get("FAKE_EXIT", "0"))
if code == -9:
    os.kill(os.getpid(), signal.SIGKILL)
if code:
    print("Traceback (most recent call last):")
    print("ValueError: Undefined dataset nope in dataset_info.json.", flush=True)
elif env.get("FAKE_ADAPTER", "1") == "1":
    open("output/adapter_model.safetensors", "wb").write(b"simulated adapter")
elif env.get("FAKE_ADAPTER") == "full":  # a full or freeze fine-tune writes the model's weights instead
    open("output/model.safetensors", "wb").write(b"simulated weights")
sys.exit(code)
"""


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    return fake_venv(tmp_path, FAKE_CLI)


@pytest.fixture
def started() -> list[JobDir]:
    """Jobs started detached by a test: at teardown, whatever still runs (launcher and training group,
    read from the job's own state.json) is killed by its recorded ids, so a failing test leaves no orphans."""
    jobs: list[JobDir] = []
    yield jobs
    for job in jobs:
        kill_recorded(job)


def jobs_dir(root: Path) -> Path:
    return root / "lab home" / "jobs"


def cancel(job: JobDir, grace: str = "0.5") -> dict:
    """`launcher cancel` (what the job handle runs): the final state.json it prints."""
    done = tool(job, "launcher", "cancel", job.root, "--grace", grace)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def status(job: JobDir) -> dict:
    done = tool(job, "launcher", "status", job.root)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_success_records_state_env_and_removes_secret(tmp_path: Path, venv: Path) -> None:
    job = make_job(jobs_dir(tmp_path), "ok-20250101-000000-abcd", gpus=[1], env={"PLAIN": "p"})
    secret = Path(job.env_secret)
    secret.write_text(json.dumps({"MY_TOKEN": "s3cr3t"}))  # what stage.py writes (0600)
    secret.chmod(0o600)
    assert run_launcher(job, venv) == 0
    st = state_of(job)
    assert st["state"] == JobState.SUCCEEDED.value and st["end"] == EndReason.SUCCEEDED.value
    assert st["exit_code"] == 0 and st["reason"] == EndReason.SUCCEEDED.message
    assert st["started_at"] and st["ended_at"] and st["child_pid"] == st["pgid"] and st["attempt"] == 1
    seen = json.loads((Path(job.root) / "seen.json").read_text())
    assert seen["pgid"] == seen["pid"] == st["child_pid"]  # its own process group
    assert seen["HF_HOME"].startswith(job.root) and seen["MPLCONFIGDIR"].startswith(job.root)
    assert seen["HF_DATASETS_CACHE"].startswith(job.root)
    assert seen["HIP_VISIBLE_DEVICES"] == "1" and seen["PLAIN"] == "p" and seen["MY_TOKEN"] == "s3cr3t"
    # the venv's bin first (LLaMA-Factory starts torchrun by name); radeonlab's code is not the venv's
    assert seen["PATH"].split(os.pathsep)[0] == str(venv / "bin") and seen["PYTHONPATH"] is None
    assert "s3cr3t" not in json.dumps(seen["argv"]) and not secret.exists()
    assert "s3cr3t" not in Path(job.job).read_text() + Path(job.state).read_text()
    assert "training..." in Path(job.train_log).read_text()


def test_failure_reason_names_the_error_line(tmp_path: Path, venv: Path) -> None:
    job = make_job(jobs_dir(tmp_path), "bad-20250101-000000-abcd", env={"FAKE_EXIT": "3"})
    assert run_launcher(job, venv) == 1
    st = state_of(job)
    assert st["state"] == "failed" and st["end"] == EndReason.TRAINING_FAILED.value and st["exit_code"] == 3
    assert "ValueError: Undefined dataset nope in dataset_info.json." in st["reason"]


def test_exit_zero_without_adapter_is_failed(tmp_path: Path, venv: Path) -> None:
    job = make_job(jobs_dir(tmp_path), "noad-20250101-000000-abcd", env={"FAKE_ADAPTER": "0"})
    assert run_launcher(job, venv) == 1
    st = state_of(job)
    assert st["state"] == "failed" and st["exit_code"] == 0 and "no adapter" in st["reason"]
    assert st["end"] == EndReason.NO_ADAPTER.value


def test_a_full_fine_tune_that_wrote_the_models_weights_succeeded(tmp_path: Path, venv: Path) -> None:
    job = make_job(jobs_dir(tmp_path), "full-20250101-000000-abcd", env={"FAKE_ADAPTER": "full"})
    assert run_launcher(job, venv) == 0
    assert state_of(job)["end"] == EndReason.SUCCEEDED.value


def test_sigkill_is_exit_137(tmp_path: Path, venv: Path) -> None:
    # the oom switch governs the killed ladder: off, so the first SIGKILL is the end
    job = make_job(
        jobs_dir(tmp_path),
        "oom-20250101-000000-abcd",
        env={"FAKE_EXIT": "-9"},
        remedies={"oom": {"enabled": False}},
    )
    assert run_launcher(job, venv) == 1
    st = state_of(job)
    assert st["state"] == "failed" and st["exit_code"] == 137 and "SIGKILL" in st["reason"]
    assert st["end"] == EndReason.GAVE_UP.value and "turns the oom remedy off" in st["reason"]


def test_world_readable_secret_refused_and_deleted(tmp_path: Path, venv: Path) -> None:
    job = make_job(jobs_dir(tmp_path), "leak-20250101-000000-abcd")
    Path(job.env_secret).write_text('{"MY_TOKEN": "x"}')
    Path(job.env_secret).chmod(0o644)
    assert run_launcher(job, venv) == 1
    st = state_of(job)
    assert st["state"] == "failed" and "readable by others" in st["reason"]
    assert st["end"] == EndReason.SECRETS_REFUSED.value
    assert not Path(job.env_secret).exists() and not (Path(job.root) / "seen.json").exists()


def test_changed_host_code_refuses_the_start(tmp_path: Path, venv: Path) -> None:
    job = make_job(jobs_dir(tmp_path), "code-20250101-000000-abcd")
    edited = Path(job.code) / "radeonlab/jobs/host/supervisor.py"
    edited.write_text(edited.read_text() + "\n# edited on the host\n")
    assert run_launcher(job, venv) == 1
    st = state_of(job)
    assert st["state"] == "failed" and st["end"] == EndReason.CODE_CHANGED.value
    assert "host/radeonlab/jobs/host/supervisor.py differs" in st["reason"]
    assert not (Path(job.root) / "seen.json").exists()  # the training never started


def test_a_changed_module_never_runs_not_even_its_top_level_code(tmp_path: Path, venv: Path) -> None:
    """The check comes before the launcher imports the supervisor: an edit there (or a half-copied file that
    would not even compile) is refused with its name, and its code never runs; the secrets are deleted."""
    job = make_job(jobs_dir(tmp_path), "code-20250101-000001-abcd")
    ran = tmp_path / "ran"
    Path(job.env_secret).write_text('{"MY_TOKEN": "x"}')
    Path(job.env_secret).chmod(0o600)
    edited = Path(job.code) / "radeonlab/jobs/host/supervisor.py"
    edited.write_text(f"open({str(ran)!r}, 'w').close()\n" + edited.read_text())
    assert run_launcher(job, venv) == 1
    st = state_of(job)
    assert st["end"] == EndReason.CODE_CHANGED.value and "supervisor.py differs" in st["reason"], st
    assert not ran.exists() and not Path(job.env_secret).exists()
    assert "refused to start: host/radeonlab/jobs/host/supervisor.py" in Path(job.launcher_log).read_text()

    # the module that writes state.json changed: nothing of it runs; the refusal is in launcher.log only
    job = make_job(jobs_dir(tmp_path), "code-20250101-000002-abcd")
    edited = Path(job.code) / "radeonlab/jobs/host/process.py"
    edited.write_text(f"open({str(ran)!r}, 'w').close()\n" + edited.read_text()[:200])  # cut short too
    assert run_launcher(job, venv) == 1
    assert not ran.exists() and state_of(job).get("state") != "running"
    assert "refused to start: host/radeonlab/jobs/host/process.py" in Path(job.launcher_log).read_text()


def test_detached_start_survives_parent_and_hostile_paths(tmp_path: Path, venv: Path, started) -> None:
    hostile = tmp_path / 'it\'s $(touch PWNED); `x` "q"'
    release = tmp_path / "release"
    job = make_job(jobs_dir(hostile), "ok-20250101-000000-abcd", env={"FAKE_WAIT_FOR": str(release)})
    started.append(job)
    # the stage tool returns once the launcher recorded its start; the job keeps going in its own session
    answer = start(job, venv)
    assert answer["state"]["state"] == "running" and answer["alive"] is True
    launcher_pid = answer["state"]["pid"]
    assert os.getsid(launcher_pid) != os.getsid(0)  # not in our session
    assert alive(launcher_pid, answer["state"]["pid_start"])  # the stage process is gone, the job is not
    release.touch()
    wait_for(lambda: state_of(job)["state"] == "succeeded")
    assert not list(tmp_path.rglob("PWNED")) and not Path("PWNED").exists()


def test_cancel_kills_whole_group_and_records_cancelled(tmp_path: Path, venv: Path, started) -> None:
    env = {"FAKE_SLEEP": "120", "FAKE_GRANDCHILD": "1", "FAKE_IGNORE_TERM": "1"}
    job = make_job(jobs_dir(tmp_path), "long-20250101-000000-abcd", env=env)
    started.append(job)
    start(job, venv)
    wait_for(lambda: (Path(job.root) / "grandchild.pid").exists())
    st = state_of(job)
    grandchild = int((Path(job.root) / "grandchild.pid").read_text())
    final = StateRecord.from_dict(cancel(job))
    assert final.state is JobState.CANCELLED and state_of(job)["state"] == "cancelled"
    assert final.end_reason is EndReason.CANCELLED
    # SIGTERM was ignored by the trainer, so this also proves the SIGKILL escalation
    assert final.exit_code == 137
    for pid, since in (
        (st["pid"], st["pid_start"]),
        (st["child_pid"], st["child_start"]),
        (grandchild, None),
    ):
        assert not alive(pid, since), f"pid {pid} survived the cancel"
    attempt = json.loads(Path(job.job).read_text())["attempts"][-1]
    assert attempt["state"] == "cancelled" and attempt["reason"] is None  # not a failure to diagnose


def test_cancel_of_queued_job_without_launcher(tmp_path: Path, venv: Path) -> None:
    job = make_job(jobs_dir(tmp_path), "q-20250101-000000-abcd")
    final = StateRecord.from_dict(cancel(job, "0.2"))
    assert final.state is JobState.CANCELLED and final.reason == EndReason.CANCELLED.message
    assert run_launcher(job, venv) == 1  # a late start sees the marker and does nothing
    assert state_of(job)["reason"] == "cancelled before it started"
    assert not (Path(job.root) / "seen.json").exists()


def test_second_job_on_same_gpu_refused(tmp_path: Path, venv: Path, started) -> None:
    jobs = jobs_dir(tmp_path)
    first = make_job(jobs, "a-20250101-000000-abcd", env={"FAKE_SLEEP": "120"})
    started.append(first)
    assert start(first, venv)["state"]["state"] == "running"
    second = make_job(jobs, "b-20250101-000000-abcd")
    assert run_launcher(second, venv, queue=False) == 75
    st = state_of(second)
    assert st["state"] == "failed" and "GPU 0 is in use by a-20250101-000000-abcd" in st["reason"]
    assert st["end"] == EndReason.GPU_BUSY.value
    # shared cannot join exclusive
    assert run_launcher(second, venv, allow_shared=True, queue=False) == 75
    other_gpu = make_job(jobs, "c-20250101-000000-abcd", gpus=[1])
    assert run_launcher(other_gpu, venv) == 0
    assert status(first)["alive"] is True
    cancel(first)
    assert status(first)["alive"] is False
    assert run_launcher(second, venv) == 0  # the lock is free again


def test_busy_gpu_queues_fifo_by_submission_and_cancel_leaves_the_line(
    tmp_path: Path, venv: Path, started
) -> None:
    jobs = jobs_dir(tmp_path)
    release = tmp_path / "release-early"
    first = make_job(
        jobs, "a-20250101-000000-abcd", env={"FAKE_SLEEP": "120"}, created_at="2025-01-01T00:00:00Z"
    )
    started.append(first)
    assert start(first, venv)["state"]["state"] == "running"
    # started in this order, but `early` was submitted first: it is first in line
    late = make_job(jobs, "late-20250101-000000-abcd", created_at="2025-01-01T00:00:09Z")
    early = make_job(
        jobs,
        "early-20250101-000000-abcd",
        env={"FAKE_WAIT_FOR": str(release)},
        created_at="2025-01-01T00:00:05Z",
    )
    gone = make_job(jobs, "gone-20250101-000000-abcd", created_at="2025-01-01T00:00:07Z")
    other_gpu = make_job(jobs, "g1-20250101-000000-abcd", gpus=[1], created_at="2025-01-01T00:00:08Z")
    for job in (late, early, gone):
        started.append(job)
        answer = start(job, venv)
        assert answer["state"]["state"] == "queued" and answer["alive"] is True
    assert "GPU 0 is in use by a-20250101-000000-abcd" in state_of(early)["reason"]
    assert run_launcher(other_gpu, venv) == 0  # another GPU has no line
    gone_state = cancel(gone)
    assert gone_state["state"] == "cancelled" and gone_state["reason"] == "cancelled while queued"
    assert not alive(gone_state["pid"], gone_state["pid_start"])
    cancel(first)
    wait_for(lambda: state_of(early)["state"] == "running")
    # `late` waits behind `early` (though its launcher started first), now for the GPU early holds
    wait_for(lambda: "in use by early-20250101-000000-abcd" in (state_of(late).get("reason") or ""))
    assert state_of(late)["state"] == "queued"
    release.touch()
    wait_for(lambda: state_of(late)["state"] == "succeeded")
    assert state_of(early)["state"] == "succeeded"


def test_launch_command_round_trips_hostile_words() -> None:
    job_dir, venv = "/home/l ab/it's; rm -rf ~/$(x)/n-20250101-000000-abcd", "/v env/'q'"
    command = stage.launch_command(job_dir, LaunchOptions(venv, resume=True, resume_max_step=10))
    assert command[:2] == ["bash", "-lc"] and len(command) == 3
    words = shlex.split(command[2])
    assert words[:5] == ["cd", job_dir, "&&", f"PYTHONPATH={job_dir}/host", "exec"]
    assert words[5:] == [
        *("python3", "-m", "radeonlab.jobs.host.launcher", "run", job_dir, "--venv", venv),
        *("--resume", "--resume-max-step", "10"),
    ]
    plain = stage.launch_command(job_dir, LaunchOptions(venv, allow_shared=True, queue=False))
    assert shlex.split(plain[2])[-2:] == ["--allow-shared", "--no-queue"]


def test_reconcile_running_without_process_is_failed() -> None:
    running = StateRecord(JobState.RUNNING, pid=42, started_at="t0")
    gone = running.reconciled(alive=False, ended_at="t1")
    assert gone.state is JobState.FAILED and gone.end_reason is EndReason.PROCESS_GONE
    assert gone.reason == EndReason.PROCESS_GONE.message and gone.ended_at == "t1"
    assert running.reconciled(alive=True) is running
    waiting = StateRecord(JobState.QUEUED, pid=42)  # waiting in line in a launcher that is gone
    assert waiting.reconciled(alive=False).state is JobState.FAILED
    never_started = StateRecord(JobState.QUEUED)  # no launcher yet: nothing to have died
    assert never_started.reconciled(alive=False) is never_started
    done = StateRecord(JobState.SUCCEEDED, exit_code=0)
    assert done.reconciled(alive=False) is done


def test_a_failure_of_the_launcher_itself_still_ends_the_job(tmp_path: Path, venv: Path) -> None:
    """A job.json whose limits cannot be applied (NaN reached the host before check refused it): the
    launcher's own exception ends the job as failed, launcher_error, with the exception's line; the traceback
    is in launcher.log. Before, the launcher died and the job stayed `running` with nobody behind it."""
    limits = {"address_space_gb": float("nan")}
    job = make_job(jobs_dir(tmp_path), "nanlimit-20250101-000000-abcd", limits=limits)
    assert run_launcher(job, venv) == 1
    st = state_of(job)
    assert st["state"] == JobState.FAILED.value and st["end"] == EndReason.LAUNCHER_ERROR.value
    assert st["reason"].startswith("the launcher failed: ValueError") and "NaN" in st["reason"]
    assert "Traceback" in (Path(job.root) / "launcher.log").read_text()

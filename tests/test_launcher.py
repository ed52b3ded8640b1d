"""The host-side launcher, run for real on this machine (no SSH) against a stand-in `llamafactory-cli`.

The stand-in is a small python script in a temporary "venv": it writes a trainer_log.jsonl and an adapter
file, can sleep, ignore SIGTERM, spawn a grandchild, and exits with a chosen code. It is driven by the
job's env (job.json "env"), which also proves that env reaches the training process.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from radeonlab.jobs.apply import launch

from radeonlab.contract.records import JobPaths
from radeonlab.contract.state import JobState

FAKE_CLI = f"""#!{sys.executable}
# SIMULATED llamafactory-cli for the launcher tests: no training happens here.
import json, os, signal, subprocess, sys, time
env = os.environ
seen = {{k: env.get(k) for k in ("HF_HOME", "MPLCONFIGDIR", "HF_DATASETS_CACHE", "HIP_VISIBLE_DEVICES",
                                 "MY_TOKEN", "PLAIN")}}
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
time.sleep(float(env.get("FAKE_SLEEP", "0")))
code = int(env.get("FAKE_EXIT", "0"))
if code == -9:
    os.kill(os.getpid(), signal.SIGKILL)
if code:
    print("Traceback (most recent call last):")
    print("ValueError: Undefined dataset nope in dataset_info.json.", flush=True)
elif env.get("FAKE_ADAPTER", "1") == "1":
    open("output/adapter_model.safetensors", "wb").write(b"simulated adapter")
sys.exit(code)
"""


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    """A temporary 'venv' whose bin/llamafactory-cli is the simulated CLI above."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    cli = bin_dir / "llamafactory-cli"
    cli.write_text(FAKE_CLI)
    cli.chmod(0o755)
    return tmp_path / "venv"


@pytest.fixture
def started() -> list[JobPaths]:
    """Jobs started detached by a test: at teardown, whatever still runs (launcher and training group,
    read from the job's own state.json) is killed by its recorded ids, so a failing test leaves no orphans."""
    jobs: list[JobPaths] = []
    yield jobs
    for paths in jobs:
        st = json.loads(Path(paths.state).read_text())
        for kill, target in ((os.killpg, st.get("pgid")), (os.kill, st.get("pid"))):
            if target:
                with contextlib.suppress(ProcessLookupError):
                    kill(target, signal.SIGKILL)


def make_job(
    root: Path, job_id: str, gpus: list[int], env: dict[str, str], created_at: str = "x"
) -> JobPaths:
    """A job folder as `submit` leaves it: job.json, state.json (queued), config.yaml, launcher.py."""
    paths = JobPaths.for_job(str(root / "lab home" / "jobs"), job_id)
    Path(paths.root).mkdir(parents=True)
    job = {
        "id": job_id,
        "name": "t",
        "spec_file": "s.yaml",
        "created_at": created_at,
        "host": "h",
        "gpus": gpus,
        "env": env,
        "attempts": [],
    }
    Path(paths.job).write_text(json.dumps(job))
    Path(paths.state).write_text(json.dumps({"state": "queued"}))
    Path(paths.config).write_text("stage: sft\n")
    Path(paths.launcher).write_text(launch.launcher_source())
    return paths


def run_launcher(paths: JobPaths, venv: Path, *extra: str) -> int:
    argv = launch.launcher_argv(paths, str(venv))
    return subprocess.run([sys.executable, *argv[1:], *extra], timeout=60).returncode


def state_of(paths: JobPaths) -> dict:
    return json.loads(Path(paths.state).read_text())


def wait_for(pred, timeout: float = 20.0) -> None:
    until = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < until, "timed out"
        time.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False


def test_success_records_state_env_and_removes_secret(tmp_path: Path, venv: Path) -> None:
    paths = make_job(tmp_path, "ok-20250101-000000-abcd", [1], {"PLAIN": "p"})
    secret = Path(paths.env_secret)
    secret.write_text(launch.secret_text({"MY_TOKEN": "s3cr3t"}))
    secret.chmod(0o600)
    assert run_launcher(paths, venv) == 0
    st = state_of(paths)
    assert st["state"] == JobState.SUCCEEDED.value and st["exit_code"] == 0 and st["reason"] is None
    assert st["started_at"] and st["ended_at"] and st["child_pid"] == st["pgid"]
    seen = json.loads((Path(paths.root) / "seen.json").read_text())
    assert seen["pgid"] == seen["pid"] == st["child_pid"]  # its own process group
    assert seen["HF_HOME"].startswith(str(paths.root)) and seen["MPLCONFIGDIR"].startswith(str(paths.root))
    assert seen["HF_DATASETS_CACHE"].startswith(str(paths.root))
    assert seen["HIP_VISIBLE_DEVICES"] == "1" and seen["PLAIN"] == "p" and seen["MY_TOKEN"] == "s3cr3t"
    assert "s3cr3t" not in json.dumps(seen["argv"]) and not secret.exists()
    assert "training..." in Path(paths.train_log).read_text()


def test_failure_reason_from_log_tail(tmp_path: Path, venv: Path) -> None:
    paths = make_job(tmp_path, "bad-20250101-000000-abcd", [0], {"FAKE_EXIT": "3"})
    assert run_launcher(paths, venv) == 1
    st = state_of(paths)
    assert st["state"] == "failed" and st["exit_code"] == 3
    assert st["reason"] == "exit 3: ValueError: Undefined dataset nope in dataset_info.json."


def test_exit_zero_without_adapter_is_failed(tmp_path: Path, venv: Path) -> None:
    paths = make_job(tmp_path, "noad-20250101-000000-abcd", [0], {"FAKE_ADAPTER": "0"})
    run_launcher(paths, venv)
    st = state_of(paths)
    assert st["state"] == "failed" and st["exit_code"] == 0 and "no adapter" in st["reason"]


def test_sigkill_is_exit_137(tmp_path: Path, venv: Path) -> None:
    paths = make_job(tmp_path, "oom-20250101-000000-abcd", [0], {"FAKE_EXIT": "-9"})
    run_launcher(paths, venv)
    st = state_of(paths)
    assert st["state"] == "failed" and st["exit_code"] == 137 and "SIGKILL" in st["reason"]


def test_world_readable_secret_refused_and_deleted(tmp_path: Path, venv: Path) -> None:
    paths = make_job(tmp_path, "leak-20250101-000000-abcd", [0], {})
    Path(paths.env_secret).write_text('{"MY_TOKEN": "x"}')
    Path(paths.env_secret).chmod(0o644)
    run_launcher(paths, venv)
    st = state_of(paths)
    assert st["state"] == "failed" and "readable by others" in st["reason"]
    assert not Path(paths.env_secret).exists() and not (Path(paths.root) / "seen.json").exists()


def test_detached_start_survives_parent_and_hostile_paths(tmp_path: Path, venv: Path, started) -> None:
    hostile = tmp_path / 'it\'s $(touch PWNED); `x` "q"'
    paths = make_job(hostile, "ok-20250101-000000-abcd", [0], {"FAKE_SLEEP": "1.5"})
    t0 = time.monotonic()
    # the parent (sh -c) returns at once; the job keeps going in its own session
    subprocess.run(
        launch.start_argv(launch.launcher_argv(paths, str(venv))), check=True, timeout=10, cwd=tmp_path
    )
    assert time.monotonic() - t0 < 1.5
    wait_for(lambda: state_of(paths)["state"] == "running")
    started.append(paths)
    launcher_pid = state_of(paths)["pid"]
    assert os.getsid(launcher_pid) != os.getsid(0)  # setsid: not in our session
    wait_for(lambda: state_of(paths)["state"] == "succeeded")
    assert not list(tmp_path.rglob("PWNED")) and not (tmp_path / "PWNED").exists()


def test_cancel_kills_whole_group_and_records_cancelled(tmp_path: Path, venv: Path, started) -> None:
    env = {"FAKE_SLEEP": "120", "FAKE_GRANDCHILD": "1", "FAKE_IGNORE_TERM": "1"}
    paths = make_job(tmp_path, "long-20250101-000000-abcd", [0], env)
    subprocess.run(launch.start_argv(launch.launcher_argv(paths, str(venv))), check=True, timeout=10)
    wait_for(lambda: (Path(paths.root) / "grandchild.pid").exists())
    started.append(paths)
    st = state_of(paths)
    grandchild = int((Path(paths.root) / "grandchild.pid").read_text())
    argv = launch.cancel_argv(paths, grace_s=0.5)
    out = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, timeout=30)
    state, _ = launch.parse_state_output(out.stdout)
    assert state.state is JobState.CANCELLED and state_of(paths)["state"] == "cancelled"
    # SIGTERM was ignored by the trainer, so this also proves the SIGKILL escalation
    assert state.exit_code == 137
    for pid in (st["pid"], st["child_pid"], grandchild):
        assert not alive(pid), f"pid {pid} survived the cancel"


def test_cancel_of_queued_job_without_launcher(tmp_path: Path, venv: Path) -> None:
    paths = make_job(tmp_path, "q-20250101-000000-abcd", [0], {})
    out = subprocess.run(
        [sys.executable, *launch.cancel_argv(paths, 0.2)[1:]], capture_output=True, text=True, timeout=30
    )
    assert launch.parse_state_output(out.stdout)[0].state is JobState.CANCELLED
    assert run_launcher(paths, venv) == 1  # a late start sees the marker and does nothing
    assert state_of(paths)["reason"] == "cancelled before it started"


def test_second_job_on_same_gpu_refused(tmp_path: Path, venv: Path, started) -> None:
    first = make_job(tmp_path, "a-20250101-000000-abcd", [0], {"FAKE_SLEEP": "120"})
    subprocess.run(launch.start_argv(launch.launcher_argv(first, str(venv))), check=True, timeout=10)
    wait_for(lambda: state_of(first)["state"] == "running")
    started.append(first)
    second = make_job(tmp_path, "b-20250101-000000-abcd", [0], {})
    assert run_launcher(second, venv, "--no-queue") == 75
    st = state_of(second)
    assert st["state"] == "failed" and "GPU 0 is in use by a-20250101-000000-abcd" in st["reason"]
    assert run_launcher(second, venv, "--allow-shared", "--no-queue") == 75  # shared cannot join exclusive
    other_gpu = make_job(tmp_path, "c-20250101-000000-abcd", [1], {})
    assert run_launcher(other_gpu, venv) == 0
    probe = subprocess.run([sys.executable, *launch.status_argv(first)[1:]], capture_output=True, text=True)
    assert launch.parse_state_output(probe.stdout)[1] is True
    subprocess.run([sys.executable, *launch.cancel_argv(first, 0.5)[1:]], capture_output=True, timeout=30)
    probe = subprocess.run([sys.executable, *launch.status_argv(first)[1:]], capture_output=True, text=True)
    assert launch.parse_state_output(probe.stdout)[1] is False
    assert run_launcher(second, venv) == 0  # the lock is free again


def test_busy_gpu_queues_fifo_by_submission_and_cancel_leaves_the_line(
    tmp_path: Path, venv: Path, started
) -> None:
    first = make_job(tmp_path, "a-20250101-000000-abcd", [0], {"FAKE_SLEEP": "120"}, "2025-01-01T00:00:00Z")
    subprocess.run(launch.start_argv(launch.launcher_argv(first, str(venv))), check=True, timeout=10)
    wait_for(lambda: state_of(first)["state"] == "running")
    started.append(first)
    # launched in this order, but `early` was submitted first: it is first in line
    late = make_job(tmp_path, "late-20250101-000000-abcd", [0], {"FAKE_SLEEP": "1"}, "2025-01-01T00:00:09Z")
    early = make_job(tmp_path, "early-20250101-000000-abcd", [0], {"FAKE_SLEEP": "3"}, "2025-01-01T00:00:05Z")
    gone = make_job(tmp_path, "gone-20250101-000000-abcd", [0], {}, "2025-01-01T00:00:07Z")
    other_gpu = make_job(tmp_path, "g1-20250101-000000-abcd", [1], {}, "2025-01-01T00:00:08Z")
    for paths in (late, early, gone):
        subprocess.run(launch.start_argv(launch.launcher_argv(paths, str(venv))), check=True, timeout=10)
        wait_for(lambda p=paths: state_of(p).get("pid") is not None)
        started.append(paths)
        assert state_of(paths)["state"] == "queued"
    assert "GPU 0 is in use by a-20250101-000000-abcd" in state_of(early)["reason"]
    assert run_launcher(other_gpu, venv) == 0  # another GPU has no line
    out = subprocess.run(
        [sys.executable, *launch.cancel_argv(gone, 0.5)[1:]], capture_output=True, timeout=30
    )
    assert launch.parse_state_output(out.stdout.decode())[0].state is JobState.CANCELLED
    assert state_of(gone)["reason"] == "cancelled while queued" and not alive(state_of(gone)["pid"])
    subprocess.run([sys.executable, *launch.cancel_argv(first, 0.5)[1:]], capture_output=True, timeout=30)
    wait_for(lambda: state_of(early)["state"] == "running")
    assert state_of(late)["state"] == "queued"  # behind `early`, though its launcher started first
    wait_for(lambda: state_of(late)["state"] == "succeeded", timeout=30)
    assert state_of(early)["state"] == "succeeded"


def test_start_shell_round_trips_hostile_words() -> None:
    paths = JobPaths.for_job("/home/l ab/it's; rm -rf ~/$(x)", "n-20250101-000000-abcd")
    import shlex

    words = shlex.split(launch.start_shell(launch.launcher_argv(paths, "/v env/'q'")))
    assert words[:4] == ["setsid", "nohup", "bash", "-lc"]
    assert shlex.split(words[4]) == launch.launcher_argv(paths, "/v env/'q'")
    assert words[5:] == [">/dev/null", "2>&1", "</dev/null", "&"]


def test_reconcile_running_without_process_is_failed() -> None:
    from radeonlab.contract.records import StateRecord

    running = StateRecord(JobState.RUNNING, pid=42, started_at="t0")
    gone = launch.reconcile(running, pid_alive=False, ended_at="t1")
    assert gone.state is JobState.FAILED and gone.reason == launch.GONE_REASON and gone.ended_at == "t1"
    assert launch.reconcile(running, pid_alive=True) is running
    done = StateRecord(JobState.SUCCEEDED, exit_code=0)
    assert launch.reconcile(done, pid_alive=False) is done

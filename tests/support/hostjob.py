"""Job folders as `submit` leaves them, built on this machine for the host-side tests (no SSH).

The host code in each folder is radeonlab's own (jobs/ssh/hostcode.py: the files a workstation receives),
unpacked from the same tar the laptop sends, and the tools run under the system `python3` with only that
folder on PYTHONPATH, as on a workstation. The launcher is started by the command jobs/host/stage.py builds.
The training is a SIMULATED llamafactory-cli in a temporary "venv": each test module writes its own script.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from radeonlab.contract.jobdir import JobDir, alive
from radeonlab.contract.messages import LaunchOptions, StageRequest
from radeonlab.contract.parts import CodeDigest
from radeonlab.contract.records import JobRecord
from radeonlab.jobs.host import stage
from radeonlab.jobs.host.remedies import STEP_KEYS
from radeonlab.jobs.host.supervisor import config_yaml
from radeonlab.jobs.spec import lf_args
from radeonlab.jobs.ssh import hostcode

HOST_PYTHON = "python3"  # what a workstation runs the host tools with (not this test run's venv)
# What the planner records in job.json for the remedies (jobs/plan/plan.py does the same).
LF_DEFAULTS = {key: lf_args.default(key) for key in STEP_KEYS}


def unpack_code(dest: Path) -> Path:
    """radeonlab's host code, from the tar the laptop ships, into `dest` (a PYTHONPATH folder)."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(hostcode.tar())) as archive:
        archive.extractall(dest, filter="data")
    return dest


def fake_venv(root: Path, script: str) -> Path:
    """A "venv" whose bin/llamafactory-cli is `script` (a SIMULATED trainer)."""
    cli = root / "venv" / "bin" / "llamafactory-cli"
    cli.parent.mkdir(parents=True, exist_ok=True)
    cli.write_text(script)
    cli.chmod(0o755)
    return root / "venv"


def make_job(
    jobs_dir: Path,
    job_id: str,
    *,
    gpus: list[int] | None = None,
    env: dict[str, str] | None = None,
    created_at: str = "x",
    config: dict[str, Any] | None = None,
    **job: Any,
) -> JobDir:
    """A job folder as stage.py leaves it: job.json (with the host code's digests and the remedies'
    LLaMA-Factory defaults), state.json queued, config.json + config.yaml, host/ (the shipped code)."""
    folder = JobDir.of(str(jobs_dir), job_id)
    root = Path(folder.root)
    root.mkdir(parents=True)
    config = {"stage": "sft", **(config or {})}
    record = JobRecord(
        id=job_id,
        name=job_id.split("-")[0],
        spec_file="s.yaml",
        created_at=created_at,
        host="h",
        gpus=[0] if gpus is None else gpus,
        env=env or {},
        lf_defaults=dict(LF_DEFAULTS),
        code=CodeDigest(hostcode.digest(), hostcode.file_digests()),
        **job,
    )
    Path(folder.job).write_text(json.dumps(record.to_dict()))
    Path(folder.state).write_text(json.dumps({"state": "queued"}))
    Path(folder.config_json).write_text(json.dumps(config))
    Path(folder.config).write_text(config_yaml(config, ["written by the test"]))
    unpack_code(Path(folder.code))
    return folder


def launch(venv: Path, **options: Any) -> LaunchOptions:
    """stage.py's `launch` request (allow_shared, queue, resume, resume_max_step)."""
    return LaunchOptions(str(venv), **options)


def run_launcher(job: JobDir, venv: Path, **options: Any) -> int:
    """Run the launcher in the foreground with the command stage.py starts detached; its exit code."""
    command = stage.launch_command(job.root, launch(venv, **options))
    return subprocess.run(command, timeout=120).returncode


def run_tool(
    code: str | Path,
    module: str,
    *args: str,
    stdin: str | None = None,
    cwd: str | Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """`python3 -m radeonlab.jobs.host.<module> ARGS` with only the host code `code` on PYTHONPATH.

    Run in `cwd` (default: `code`): `-m` puts the working directory first on sys.path, and this checkout's
    own radeonlab/ package must not stand in for the shipped one."""
    return subprocess.run(
        [HOST_PYTHON, "-m", f"radeonlab.jobs.host.{module}", *args],
        cwd=cwd or code,
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {}), "PYTHONPATH": str(code)},
        timeout=120,
    )


def tool(job: JobDir, module: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """A host tool from the job's own copy of the host code, run in the job folder."""
    return run_tool(job.code, module, *args, stdin=stdin, cwd=job.root)


def start(job: JobDir, venv: Path, **options: Any) -> dict[str, Any]:
    """Start the launcher detached through the stage tool; its answer {"state", "alive"}."""
    request = StageRequest(job.root, launch=launch(venv, **options))
    done = tool(job, "stage", stdin=request.to_json())
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def last_json(done: subprocess.CompletedProcess) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def state_of(job: JobDir) -> dict[str, Any]:
    return json.loads(Path(job.state).read_text())


def job_json(job: JobDir) -> dict[str, Any]:
    return json.loads(Path(job.job).read_text())


def wait_for(pred: Callable[[], object], timeout: float = 30.0) -> None:
    """Poll `pred` until it is true; fail after `timeout` s (a bound on a hang, not a speed assertion)."""
    until = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < until, "timed out"
        time.sleep(0.05)


def kill_recorded(job: JobDir) -> None:
    """SIGKILL whatever of the job still runs (training group, launcher), read from its state.json."""
    state = state_of(job)
    if state.get("pgid"):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(state["pgid"], signal.SIGKILL)
    if alive(state.get("pid"), state.get("pid_start")):  # the recorded launcher, not a reused pid
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(state["pid"], signal.SIGKILL)

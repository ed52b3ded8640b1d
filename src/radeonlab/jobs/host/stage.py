"""Make a job folder ready and start its launcher, in one round trip: what `submit` and `resume` run.

    python3 -m radeonlab.jobs.host.stage < request.json

The request is a contract StageRequest (radeonlab/contract/messages.py: the job folder, blob links, files,
the host code, job.json or an update of it, the secrets, the launch options) as JSON on stdin; it prints a
StageAnswer (state.json once the new launcher wrote it, or the wait ended, and whether it is alive).
Stdlib only.
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import shutil
import subprocess
import sys
import time

from radeonlab.contract.jobdir import FILES, job_alive, read_json, upload_dest_problem, write_json_atomic
from radeonlab.contract.messages import BlobLink, LaunchOptions, StageAnswer, StageRequest
from radeonlab.contract.records import StateRecord
from radeonlab.contract.state import JobState

PYTHON = "python3"  # the host's system python: the launcher must not depend on the training venv
POLL_S = 0.05


def write_text_atomic(path: str, text: str, mode: int = 0o640) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def link_blobs(job_dir: str, blobs: str, links: list[BlobLink]) -> None:
    """Hard links into the content store (a copy where the job folder is on another filesystem)."""
    for item in links:
        src = os.path.join(blobs, "sha256", item.sha256)
        why = upload_dest_problem(item.dest)
        if why:
            raise SystemExit(f"refusing link destination: {why}")
        dst = os.path.join(job_dir, item.dest)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if os.path.lexists(dst):
            os.unlink(dst)
        try:
            os.link(src, dst)
        except OSError as e:
            if e.errno != errno.EXDEV:
                raise
            shutil.copyfile(src, dst)


def copy_code(src: str, job_dir: str) -> None:
    dest = os.path.join(job_dir, FILES["code"])
    tmp = f"{dest}.tmp.{os.getpid()}"
    shutil.copytree(src, tmp, ignore=shutil.ignore_patterns("__pycache__"))
    if os.path.exists(dest):
        shutil.rmtree(dest)
    os.replace(tmp, dest)


def launch_command(job_dir: str, launch: LaunchOptions) -> list[str]:
    """The detached launcher: a login shell (profile.d sets ROCm paths and the card's overrides)."""
    argv = [PYTHON, "-m", "radeonlab.jobs.host.launcher", "run", job_dir, "--venv", launch.venv]
    argv += ["--allow-shared"] if launch.allow_shared else []
    argv += [] if launch.queue else ["--no-queue"]
    if launch.resume:
        argv.append("--resume")
        if launch.resume_max_step is not None:
            argv += ["--resume-max-step", str(launch.resume_max_step)]
    code = os.path.join(job_dir, FILES["code"])
    inner = f"cd {shlex.quote(job_dir)} && PYTHONPATH={shlex.quote(code)} exec {shlex.join(argv)}"
    return ["bash", "-lc", inner]


def start(job_dir: str, launch: LaunchOptions, wait_s: float) -> dict:
    old = read_json(os.path.join(job_dir, FILES["state"]))
    subprocess.Popen(
        launch_command(job_dir, launch),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own session: it outlives this SSH command
    )
    deadline = time.monotonic() + wait_s
    state = old
    while time.monotonic() < deadline:
        state = read_json(os.path.join(job_dir, FILES["state"]))
        if state.get("pid") and state.get("pid") != old.get("pid"):
            break
        time.sleep(POLL_S)
    return state


def stage(req: StageRequest) -> StageAnswer:
    job_dir = req.job_dir
    os.makedirs(job_dir, mode=0o750, exist_ok=True)
    for rel, text in req.files.items():
        write_text_atomic(os.path.join(job_dir, rel), text)
    if req.links:
        link_blobs(job_dir, req.blobs, req.links)
    if req.code:  # relative: under the SSH user's home (jobs/ssh/connection.py SETTINGS code_dir)
        copy_code(os.path.join(os.path.expanduser("~"), req.code), job_dir)
    if req.secret:
        write_text_atomic(os.path.join(job_dir, FILES["env_secret"]), json.dumps(req.secret), 0o600)
    job_path = os.path.join(job_dir, FILES["job"])
    if req.job is not None:
        write_json_atomic(os.path.join(job_dir, FILES["state"]), {"state": JobState.QUEUED.value})
        write_json_atomic(job_path, req.job)
    if req.job_update:
        write_json_atomic(job_path, {**read_json(job_path), **req.job_update})
    state = read_json(os.path.join(job_dir, FILES["state"]))
    if req.launch:
        state = start(job_dir, req.launch, req.wait_s)
    return StageAnswer(StateRecord.from_dict(state), job_alive(state))


def main() -> int:
    print(stage(StageRequest.from_dict(json.load(sys.stdin))).to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Make a job folder ready and start its launcher, in one round trip: what `submit` and `resume` run.

    python3 -m radeonlab.jobs.host.stage < request.json

The request (JSON on stdin; every part optional):
  job_dir            the job folder (created 0750 when missing)
  links              [{"sha256", "dest"}]: hard links from the content store (blobs) into the folder
  blobs              the content store (<jobs_dir>/../blobs)
  files              {relative path: text}: config.yaml, config.json, data/dataset_info.json, ...
  code               a folder holding radeonlab's host code: copied into <job>/host (replacing it)
  job                job.json's content (written last: the scanner ignores a folder without it)
  job_update         keys merged into the existing job.json (resume: the new code digests)
  secret             {NAME: value}: written to env.secret (0600); the launcher reads and deletes it
  launch             {"venv", "allow_shared", "queue", "resume", "resume_max_step"}: start the launcher
  wait_s             how long to wait for the launcher to record its start (default 15)
Prints {"state": state.json, "alive": bool} once the new launcher wrote its state (or the wait ended).
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


def link_blobs(job_dir: str, blobs: str, links: list[dict]) -> None:
    """Hard links into the content store (a copy where the job folder is on another filesystem)."""
    for item in links:
        src = os.path.join(blobs, "sha256", item["sha256"])
        why = upload_dest_problem(str(item["dest"]))
        if why:
            raise SystemExit(f"refusing link destination: {why}")
        dst = os.path.join(job_dir, item["dest"])
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


def launch_command(job_dir: str, launch: dict) -> list[str]:
    """The detached launcher: a login shell (profile.d sets ROCm paths and the card's overrides)."""
    argv = [PYTHON, "-m", "radeonlab.jobs.host.launcher", "run", job_dir, "--venv", launch["venv"]]
    argv += ["--allow-shared"] if launch.get("allow_shared") else []
    argv += [] if launch.get("queue", True) else ["--no-queue"]
    if launch.get("resume"):
        argv.append("--resume")
        if launch.get("resume_max_step") is not None:
            argv += ["--resume-max-step", str(launch["resume_max_step"])]
    code = os.path.join(job_dir, FILES["code"])
    inner = f"cd {shlex.quote(job_dir)} && PYTHONPATH={shlex.quote(code)} exec {shlex.join(argv)}"
    return ["bash", "-lc", inner]


def start(job_dir: str, launch: dict, wait_s: float) -> dict:
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


def stage(req: dict) -> dict:
    job_dir = req["job_dir"]
    os.makedirs(job_dir, mode=0o750, exist_ok=True)
    for rel, text in (req.get("files") or {}).items():
        write_text_atomic(os.path.join(job_dir, rel), text)
    if req.get("links"):
        link_blobs(job_dir, req["blobs"], req["links"])
    if req.get("code"):  # relative: under the SSH user's home (jobs/ssh/connection.py SETTINGS code_dir)
        copy_code(os.path.join(os.path.expanduser("~"), req["code"]), job_dir)
    if req.get("secret"):
        write_text_atomic(os.path.join(job_dir, FILES["env_secret"]), json.dumps(req["secret"]), 0o600)
    job_path = os.path.join(job_dir, FILES["job"])
    if req.get("job") is not None:
        write_json_atomic(os.path.join(job_dir, FILES["state"]), {"state": JobState.QUEUED.value})
        write_json_atomic(job_path, req["job"])
    if req.get("job_update"):
        write_json_atomic(job_path, {**read_json(job_path), **req["job_update"]})
    state = read_json(os.path.join(job_dir, FILES["state"]))
    if req.get("launch"):
        state = start(job_dir, req["launch"], float(req.get("wait_s", 15)))
    return {"state": state, "alive": job_alive(state)}


def main() -> int:
    print(json.dumps(stage(json.load(sys.stdin))))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""radeonlab's host-side launcher: runs one LLaMA-Factory job in its folder and records what happened.

Self-contained and stdlib-only on purpose: it runs on the workstation's system python3 (not the training
venv), uploaded into the job folder by `radeonlab submit`, started detached with
`setsid nohup bash -lc 'python3 <job>/launcher.py run <job> --venv <venv>' ...` so it outlives the SSH
session and sees the profile.d environment (ROCm paths, HSA overrides).

  launcher.py run JOB_DIR --venv VENV [--allow-shared] [--locks-dir DIR]
  launcher.py cancel JOB_DIR [--grace SECONDS]
  launcher.py status JOB_DIR        (prints state.json plus whether the job's processes are alive)

state.json is written atomically (tmp + rename) and only by this script: by `run` at start and end, and by
`cancel` only when no launcher is left to do it. Layout and fields: CONTRACTS.md "Jobs on the host".
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone

# File names in the job folder (jobs/record.py JOB_FILES holds the same names for the laptop side).
JOB_JSON, STATE_JSON, CONFIG, TRAIN_LOG = "job.json", "state.json", "config.yaml", "train.log"
ENV_SECRET, CANCEL_MARKER, LAUNCHER_LOG = "env.secret", "cancel.requested", "launcher.log"
ADAPTER_FILES = ("adapter_model.safetensors", "adapter_model.bin")
CACHE_ENV = {"HF_HOME": "cache/hf", "HF_DATASETS_CACHE": "cache/hf/datasets", "MPLCONFIGDIR": "cache/mpl"}
EXIT_LOCKED = 75  # EX_TEMPFAIL: the GPU is busy, try again later
LOG_TAIL_BYTES = 65536
CANCEL_SETTLE_S = 5.0  # after the group is gone, how long cancel waits for the launcher's final write
ERROR_LINE = re.compile(r"^\s*(?:[\w.]*(?:Error|Exception)\b|Traceback|error:|Killed\b)", re.IGNORECASE)


def now() -> str:
    # timezone.utc, not datetime.UTC: the host's python3 may be older than 3.11
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: UP017


def write_json_atomic(path: str, data: dict) -> None:
    """tmp + fsync + rename: a reader sees the old or the new file, never half of one."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def state_dict(state: str, **fields: object) -> dict:
    base = {
        "state": state,
        "pid": None,
        "child_pid": None,
        "pgid": None,
        "exit_code": None,
        "started_at": None,
        "ended_at": None,
        "reason": None,
    }
    base.update(fields)
    return base


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, pgid) of a live process, None if it does not exist."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return rest[0], int(rest[2])
    except (OSError, IndexError, ValueError):
        return None


def pid_alive(pid: int | None, needle: str = "") -> bool:
    """A running (non-zombie) process whose command line contains `needle` (guards against pid reuse)."""
    if not pid:
        return False
    stat = _proc_stat(pid)
    if stat is None or stat[0] in "ZX":
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return needle.encode() in f.read()
    except OSError:
        return False


def group_alive(pgid: int | None) -> bool:
    """True while any non-zombie process is in the process group (zombies hold no GPU memory)."""
    if not pgid:
        return False
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = _proc_stat(int(name))
            if stat and stat[1] == pgid and stat[0] not in "ZX":
                return True
    return False


def take_locks(locks_dir: str, gpus: list, job_id: str, shared: bool) -> tuple[list, str | None]:
    """flock one file per GPU index (or "cpu" for a job without GPUs); returns (fds, refusal reason)."""
    os.makedirs(locks_dir, exist_ok=True)
    fds = []
    for gpu in gpus or ["cpu"]:
        path = os.path.join(locks_dir, f"gpu{gpu}.lock" if gpu != "cpu" else "cpu.lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            holder = os.pread(fd, 256, 0).decode(errors="replace").strip() or "another job"
            os.close(fd)
            for other in fds:
                os.close(other)
            what = f"GPU {gpu}" if gpu != "cpu" else "the CPU slot"
            return [], f"{what} is in use by {holder} (lock {path}); submit with --allow-shared to share it"
        if not shared:
            os.ftruncate(fd, 0)
            os.pwrite(fd, job_id.encode(), 0)
        fds.append(fd)
    return fds, None


def read_secrets(job_dir: str) -> tuple[dict, str | None]:
    """Read env.secret (a JSON object, mode 0600) and delete it at once; secrets never go through argv."""
    path = os.path.join(job_dir, ENV_SECRET)
    if not os.path.exists(path):
        return {}, None
    try:
        mode = os.stat(path).st_mode
        with open(path) as f:
            data = json.load(f)
    finally:
        os.unlink(path)
    if mode & 0o077:
        return {}, f"env.secret was readable by others (mode {mode & 0o777:o}); refusing to use it"
    if not isinstance(data, dict):
        return {}, "env.secret is not a JSON object"
    return {str(k): str(v) for k, v in data.items()}, None


def child_env(job_dir: str, job: dict, secrets: dict) -> dict:
    env = dict(os.environ)
    for key, rel in CACHE_ENV.items():
        env[key] = os.path.join(job_dir, rel)
        os.makedirs(env[key], exist_ok=True)
    gpus = job.get("gpus") or []
    if gpus:
        env["HIP_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
    env.update({str(k): str(v) for k, v in (job.get("env") or {}).items()})
    env.update(secrets)
    return env


def log_reason(job_dir: str, exit_code: int) -> str:
    """One line explaining a failure: the last error-looking line of train.log, else the last line."""
    if exit_code > 128:
        try:
            name = signal.Signals(exit_code - 128).name
        except ValueError:
            name = ""
        if name == "SIGKILL":
            return f"killed by SIGKILL (exit {exit_code}): out of memory (see dmesg) or killed by hand"
        if name:
            return f"killed by {name} (exit {exit_code})"
    try:
        with open(os.path.join(job_dir, TRAIN_LOG), "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - LOG_TAIL_BYTES))
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        lines = []
    for line in reversed(lines):
        if ERROR_LINE.search(line) and not line.startswith("Traceback"):
            return f"exit {exit_code}: {line[:300]}"
    return f"exit {exit_code}: {lines[-1][:300] if lines else 'train.log is empty'}"


def run(job_dir: str, venv: str, allow_shared: bool, locks_dir: str | None) -> int:
    job_dir = os.path.abspath(job_dir)
    state_path = os.path.join(job_dir, STATE_JSON)
    # our own output (tracebacks of this script) goes to launcher.log: the start command discards stdio
    log_fd = os.open(os.path.join(job_dir, LAUNCHER_LOG), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    job = read_json(os.path.join(job_dir, JOB_JSON))
    job_id = job.get("id") or os.path.basename(job_dir)
    gpus = job.get("gpus")
    if gpus is None and isinstance(job.get("gpu"), int):
        gpus = [job["gpu"]]
        job["gpus"] = gpus
    started = now()

    def finish(state: str, exit_code: int | None, reason: str | None, **extra: object) -> int:
        write_json_atomic(
            state_path,
            state_dict(
                state,
                pid=os.getpid(),
                exit_code=exit_code,
                started_at=started,
                ended_at=now(),
                reason=reason,
                **extra,
            ),
        )
        return 0 if state == "succeeded" else (EXIT_LOCKED if exit_code == EXIT_LOCKED else 1)

    if os.path.exists(os.path.join(job_dir, CANCEL_MARKER)):
        return finish("cancelled", None, "cancelled before it started")
    locks_dir = locks_dir or os.path.join(os.path.dirname(os.path.dirname(job_dir)), "locks")
    lock_fds, refusal = take_locks(locks_dir, gpus or [], job_id, allow_shared)
    if refusal:
        return finish("failed", EXIT_LOCKED, refusal)
    secrets, problem = read_secrets(job_dir)
    if problem:
        return finish("failed", None, problem)
    argv = [os.path.join(venv, "bin", "llamafactory-cli"), "train", os.path.join(job_dir, CONFIG)]
    with open(os.path.join(job_dir, TRAIN_LOG), "ab") as log:
        try:
            # own session = own process group: cancel kills trainer + dataloader workers together.
            # The lock fds are inherited so the GPU stays locked while any of them lives.
            child = subprocess.Popen(
                argv,
                cwd=job_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=child_env(job_dir, job, secrets),
                start_new_session=True,
                pass_fds=lock_fds,
            )
        except OSError as e:
            return finish("failed", None, f"cannot start {argv[0]}: {e}")
    secrets.clear()
    ids = {"child_pid": child.pid, "pgid": child.pid}
    write_json_atomic(state_path, state_dict("running", pid=os.getpid(), started_at=started, **ids))

    def forward(signum: int, _frame: object) -> None:
        # someone stopped the launcher itself: take the training down with it, then record the end
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    if os.path.exists(os.path.join(job_dir, CANCEL_MARKER)):
        forward(signal.SIGTERM, None)  # cancel arrived while we were starting and had no pgid to kill
    code = child.wait()
    exit_code = 128 - code if code < 0 else code
    if os.path.exists(os.path.join(job_dir, CANCEL_MARKER)):
        return finish("cancelled", exit_code, "cancelled by user", **ids)
    if code != 0:
        return finish("failed", exit_code, log_reason(job_dir, exit_code), **ids)
    output = os.path.join(job_dir, "output")
    if not any(os.path.exists(os.path.join(output, name)) for name in ADAPTER_FILES):
        return finish(
            "failed", 0, "exit 0 but no adapter ({}) in output/".format(" or ".join(ADAPTER_FILES)), **ids
        )
    return finish("succeeded", 0, None, **ids)


def cancel(job_dir: str, grace: float) -> int:
    """Kill the job's process group (SIGTERM, then SIGKILL after `grace` s) and make sure it is recorded."""
    job_dir = os.path.abspath(job_dir)
    state_path = os.path.join(job_dir, STATE_JSON)
    with open(os.path.join(job_dir, CANCEL_MARKER), "w") as f:
        f.write(now() + "\n")
    state = read_json(state_path)
    if state.get("state") in ("succeeded", "failed", "cancelled"):
        print(json.dumps(state))
        return 0
    launcher = state.get("pid")
    deadline = time.monotonic() + grace
    # a launcher still starting up has no pgid yet; it reads the marker itself after writing "running"
    while not state.get("pgid") and pid_alive(launcher, "launcher.py") and time.monotonic() < deadline:
        time.sleep(0.1)
        state = read_json(state_path)
    pgid = state.get("pgid")
    for sig, wait_s in ((signal.SIGTERM, grace), (signal.SIGKILL, CANCEL_SETTLE_S)):
        if not group_alive(pgid):
            break
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        until = time.monotonic() + wait_s
        while group_alive(pgid) and time.monotonic() < until:
            time.sleep(0.1)
    until = time.monotonic() + CANCEL_SETTLE_S
    while pid_alive(launcher, "launcher.py") and time.monotonic() < until:
        time.sleep(0.1)
    state = read_json(state_path)
    if state.get("state") not in ("succeeded", "failed", "cancelled"):
        # no launcher left to record the end (never started, killed, host rebooted): record it here
        state = state_dict("cancelled", **{k: v for k, v in state.items() if k != "state"})
        state.update(ended_at=now(), reason="cancelled by user")
        write_json_atomic(state_path, state)
    print(json.dumps(state))
    return 0


def status(job_dir: str) -> int:
    """Print state.json with "alive": whether the launcher or the training group still runs."""
    state = read_json(os.path.join(os.path.abspath(job_dir), STATE_JSON))
    state["alive"] = pid_alive(state.get("pid"), "launcher.py") or group_alive(state.get("pgid"))
    print(json.dumps(state))
    return 0


def main(argv: list | None = None) -> int:
    parser = argparse.ArgumentParser(prog="launcher.py", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    p_run = sub.add_parser("run")
    p_run.add_argument("job_dir")
    p_run.add_argument("--venv", required=True)
    p_run.add_argument("--allow-shared", action="store_true")
    p_run.add_argument("--locks-dir")
    p_cancel = sub.add_parser("cancel")
    p_cancel.add_argument("job_dir")
    p_cancel.add_argument("--grace", type=float, default=10.0)
    p_status = sub.add_parser("status")
    p_status.add_argument("job_dir")
    args = parser.parse_args(argv)
    if args.verb == "run":
        return run(args.job_dir, args.venv, args.allow_shared, args.locks_dir)
    if args.verb == "cancel":
        return cancel(args.job_dir, args.grace)
    return status(args.job_dir)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""radeonlab's host-side launcher: runs one LLaMA-Factory job in its folder and records what happened.

Self-contained and stdlib-only on purpose: it runs on the workstation's system python3 (not the training
venv), uploaded into the job folder by `radeonlab submit`, started detached with
`setsid nohup bash -lc 'python3 <job>/launcher.py run <job> --venv <venv>' ...` so it outlives the SSH
session and sees the profile.d environment (ROCm paths, HSA overrides).

  launcher.py run JOB_DIR --venv VENV [--allow-shared] [--locks-dir DIR] [--no-queue]
                          [--resume [--resume-max-step N]]
  launcher.py cancel JOB_DIR [--grace SECONDS]
  launcher.py status JOB_DIR        (prints state.json plus whether the job's processes are alive)

state.json is written atomically (tmp + rename) and only by this script: by `run` at start and end, and by
`cancel` only when no launcher is left to do it. Layout and fields: CONTRACTS.md "Jobs on the host".

A job whose GPU is busy waits in line here (state `queued`, FIFO per GPU by submission time): the waiting
process is this detached launcher, so the queue needs no laptop. Once it holds the GPU, the supervisor shipped
in <job>/host (jobs/host/supervisor.py: health checks, remedies, attempts) runs the training; this file's
top level stays stdlib-only because the laptop's probes load it to ask whether a job's processes live.

Secrets (HF_TOKEN, API keys: jobs/apply/secrets.py) are never in argv, job.json or any log. The laptop
writes them
on stdin into <job>/env.secret (a JSON object, mode 0600); `run` reads that file and deletes it FIRST, before
it waits in line or checks anything else, so no secret stays on the host's disk while the job waits or runs.
From then on they live in this process's memory only: the environment built from them is kept by the
supervisor and copied into every attempt it starts (remedy retries, fresh or from a checkpoint). A
`radeonlab resume` starts a NEW launcher, which has no memory of them: the laptop writes env.secret again
before starting it (the names come from job.json `secret_names`, the values from the laptop's environment).
A world- or group-readable env.secret is deleted and the job fails without using it.
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

# File names in the job folder (radeonlab/contract/records.py JOB_FILES holds the same names for the laptop).
JOB_JSON, STATE_JSON, CONFIG, TRAIN_LOG = "job.json", "state.json", "config.yaml", "train.log"
ENV_SECRET, CANCEL_MARKER, LAUNCHER_LOG = "env.secret", "cancel.requested", "launcher.log"
ADAPTER_FILES = ("adapter_model.safetensors", "adapter_model.bin")
CACHE_ENV = {"HF_HOME": "cache/hf", "HF_DATASETS_CACHE": "cache/hf/datasets", "MPLCONFIGDIR": "cache/mpl"}
EXIT_LOCKED = 75  # EX_TEMPFAIL: the GPU is busy, try again later (only with --no-queue)
QUEUE_POLL_S = 1.0  # how often a queued job looks whether it is first in line and its GPU is free
HOST_CODE = "host"  # <job>/host: the supervisor and the pure modules it imports (jobs/apply/bundle.py)
CANCELLED_WAITING = "cancelled while queued"
NO_ADAPTER = "exit 0 but no adapter ({}) in output/".format(" or ".join(ADAPTER_FILES))
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
            return [], f"{what} is in use by {holder} (lock {path})"
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


def queue_ahead(job_dir: str, job: dict, gpus: list, queued_since: float) -> list:
    """Ids of live queued jobs that want one of our GPUs and were submitted before us (FIFO per GPU).

    Order: job.json created_at, then when each launcher started waiting, then the id. Only live launchers
    count: a queued job whose launcher died (host rebooted) holds no place in the line.
    """
    mine = set(gpus or ["cpu"])
    me = (job.get("created_at") or "", queued_since, os.path.basename(job_dir))
    jobs_dir = os.path.dirname(job_dir)
    ahead = []
    for name in os.listdir(jobs_dir):
        other_dir = os.path.join(jobs_dir, name)
        if other_dir == job_dir:
            continue
        state = read_json(os.path.join(other_dir, STATE_JSON))
        if state.get("state") != "queued" or not pid_alive(state.get("pid"), "launcher.py"):
            continue
        other = read_json(os.path.join(other_dir, JOB_JSON))
        if not mine & set(other.get("gpus") or ["cpu"]):
            continue
        key = (other.get("created_at") or "", float(state.get("queued_since") or 0), name)
        if key < me:
            ahead.append(name)
    return ahead


def wait_for_gpus(
    job_dir: str, job: dict, locks_dir: str, shared: bool, queue: bool, started: str
) -> tuple[list, str | None]:
    """Take the job's GPU locks, waiting in line (state `queued`) while another job holds them.

    The waiting process is this detached launcher itself: the line lives on the host and needs no laptop.
    Returns (lock fds, None), or ([], reason) when refused (queue off) or cancelled while waiting.
    """
    gpus = job.get("gpus") or []
    job_id = job.get("id") or os.path.basename(job_dir)
    since = time.time()
    fds, refusal = take_locks(locks_dir, gpus, job_id, shared)
    if not refusal or not queue:
        return fds, refusal
    state_path = os.path.join(job_dir, STATE_JSON)
    said = None
    while True:
        if os.path.exists(os.path.join(job_dir, CANCEL_MARKER)):
            return [], CANCELLED_WAITING
        ahead = queue_ahead(job_dir, job, gpus, since)
        if not ahead:
            fds, refusal = take_locks(locks_dir, gpus, job_id, shared)
            if not refusal:
                return fds, None
        what = refusal.split(" (lock ")[0] if refusal else "the GPU is busy"
        reason = f"waiting: {what}" + (f"; {len(ahead)} job(s) ahead in line" if ahead else "")
        if reason != said:  # written when it changes, so readers see who holds the GPU
            state = state_dict("queued", pid=os.getpid(), started_at=started, reason=reason)
            state["queued_since"] = since
            write_json_atomic(state_path, state)
            said = reason
        time.sleep(QUEUE_POLL_S)


def start_child(job_dir: str, argv: list, env: dict, lock_fds: list, limits: dict) -> subprocess.Popen:
    """Start llamafactory-cli in its own session (cancel kills its whole group), output appended to train.log.

    The lock fds are inherited so the GPU stays locked while any of its processes lives. limits:
    address_space_gb -> RLIMIT_AS (what `ulimit -v` sets) of the training process only.
    """
    address_space = limits.get("address_space_gb")

    def limit() -> None:
        if address_space:
            import resource

            n = int(float(address_space) * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (n, n))

    with open(os.path.join(job_dir, TRAIN_LOG), "ab") as log:
        return subprocess.Popen(
            argv,
            cwd=job_dir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            pass_fds=lock_fds,
            preexec_fn=limit if address_space else None,
        )


def load_supervisor(job_dir: str):  # -> module | None
    """The supervisor (attempts, health, remedies) shipped in <job>/host; None when the job has none."""
    code = os.path.join(job_dir, HOST_CODE)
    if not os.path.isfile(os.path.join(code, "radeonlab", "jobs", "host", "supervisor.py")):
        return None
    sys.path.insert(0, code)
    from radeonlab.jobs.host import supervisor  # noqa: PLC0415 - shipped beside the job, found only at run time

    return supervisor


def run(
    job_dir: str,
    venv: str,
    allow_shared: bool,
    locks_dir: str | None,
    queue: bool = True,
    resume: bool = False,
    resume_max_step: int | None = None,
) -> int:
    job_dir = os.path.abspath(job_dir)
    state_path = os.path.join(job_dir, STATE_JSON)
    # our own output (tracebacks of this script) goes to launcher.log: the start command discards stdio
    log_fd = os.open(os.path.join(job_dir, LAUNCHER_LOG), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    job = read_json(os.path.join(job_dir, JOB_JSON))
    job_id = job.get("id") or os.path.basename(job_dir)
    job["id"] = job_id
    if job.get("gpus") is None and isinstance(job.get("gpu"), int):
        job["gpus"] = [job["gpu"]]
    started = now()
    # read and deleted before anything else: a queued or refused job must not leave secrets on disk
    secrets, secret_problem = read_secrets(job_dir)

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

    if resume:  # `radeonlab resume` of a cancelled job: the old request is done with
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(job_dir, CANCEL_MARKER))
    if secret_problem:
        return finish("failed", None, secret_problem)
    if os.path.exists(os.path.join(job_dir, CANCEL_MARKER)):
        return finish("cancelled", None, "cancelled before it started")
    locks_dir = locks_dir or os.path.join(os.path.dirname(os.path.dirname(job_dir)), "locks")
    lock_fds, refusal = wait_for_gpus(job_dir, job, locks_dir, allow_shared, queue, started)
    if refusal == CANCELLED_WAITING:
        return finish("cancelled", None, refusal)
    if refusal:
        return finish("failed", EXIT_LOCKED, refusal + "; submit with --allow-shared to share it")
    argv = [os.path.join(venv, "bin", "llamafactory-cli"), "train", os.path.join(job_dir, CONFIG)]
    env = child_env(job_dir, job, secrets)  # held by the supervisor for every attempt (module docstring)
    secrets.clear()
    supervisor = load_supervisor(job_dir)
    if supervisor is not None:
        return supervisor.supervise(
            sys.modules[__name__], job_dir, argv, env, lock_fds, started, resume, resume_max_step
        )
    return run_once(job_dir, argv, env, lock_fds, job.get("limits") or {}, finish, started)


def run_once(job_dir: str, argv: list, env: dict, lock_fds: list, limits: dict, finish, started: str) -> int:
    """One attempt without supervision (a job folder without the shipped supervisor)."""
    state_path = os.path.join(job_dir, STATE_JSON)
    try:
        child = start_child(job_dir, argv, env, lock_fds, limits)
    except OSError as e:
        return finish("failed", None, f"cannot start {argv[0]}: {e}")
    env.clear()
    ids = {"child_pid": child.pid, "pgid": child.pid}
    write_json_atomic(state_path, state_dict("running", pid=os.getpid(), started_at=started, **ids))
    forward_signals_to(child)
    if os.path.exists(os.path.join(job_dir, CANCEL_MARKER)):
        stop_group(child.pid, signal.SIGTERM)  # cancel arrived while we were starting and had no pgid
    code = child.wait()
    exit_code = 128 - code if code < 0 else code
    if os.path.exists(os.path.join(job_dir, CANCEL_MARKER)):
        return finish("cancelled", exit_code, "cancelled by user", **ids)
    if code != 0:
        return finish("failed", exit_code, log_reason(job_dir, exit_code), **ids)
    if not has_adapter(job_dir):
        return finish("failed", 0, NO_ADAPTER, **ids)
    return finish("succeeded", 0, None, **ids)


def has_adapter(job_dir: str) -> bool:
    output = os.path.join(job_dir, "output")
    return any(os.path.exists(os.path.join(output, name)) for name in ADAPTER_FILES)


def stop_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)


def forward_signals_to(child: subprocess.Popen) -> None:
    """Someone stopped the launcher itself: take the training down with it, then record the end."""

    def forward(signum: int, _frame: object) -> None:
        stop_group(child.pid, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)


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
    p_run.add_argument("--no-queue", action="store_true", help="refuse (exit 75), do not wait")
    p_run.add_argument("--resume", action="store_true", help="a new attempt from the newest checkpoint")
    p_run.add_argument(
        "--resume-max-step", type=int, help="resume from no later checkpoint than this step (multi-node)"
    )
    p_cancel = sub.add_parser("cancel")
    p_cancel.add_argument("job_dir")
    p_cancel.add_argument("--grace", type=float, default=10.0)
    p_status = sub.add_parser("status")
    p_status.add_argument("job_dir")
    args = parser.parse_args(argv)
    if args.verb == "run":
        return run(
            args.job_dir,
            args.venv,
            args.allow_shared,
            args.locks_dir,
            not args.no_queue,
            args.resume,
            args.resume_max_step,
        )
    if args.verb == "cancel":
        return cancel(args.job_dir, args.grace)
    return status(args.job_dir)


if __name__ == "__main__":
    sys.exit(main())

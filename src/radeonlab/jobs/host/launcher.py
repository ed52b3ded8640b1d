"""radeonlab's host-side launcher: runs one LLaMA-Factory job in its folder and records what happened.

Standard library only: it runs on the workstation's system python3 (not the training venv), from the job's
own copy of radeonlab's host code (<job>/host, on PYTHONPATH), started detached by jobs/host/stage.py with
`setsid bash -lc '... python3 -m radeonlab.jobs.host.launcher run <job> --venv <venv>'`, so it outlives the
SSH session and sees the profile.d environment (ROCm paths, HSA overrides).

    python3 -m radeonlab.jobs.host.launcher run JOB_DIR --venv VENV [--allow-shared] [--no-queue]
                                                [--resume [--resume-max-step N]]
    python3 -m radeonlab.jobs.host.launcher cancel JOB_DIR [--grace SECONDS]
    python3 -m radeonlab.jobs.host.launcher status JOB_DIR

`run`, in order: check <job>/host against the digests the laptop recorded in job.json `code` before importing
any other shipped module (jobs/host/codecheck.py: a changed file refuses the start, naming it); read
env.secret and delete it at once, before waiting in line, so no secret stays on disk while the job waits or
runs (the secrets then live in this process's memory only and every attempt the supervisor starts gets them;
a `radeonlab resume` starts a new launcher, and the laptop writes env.secret again); wait in line for the GPU
(jobs/host/gpu_queue.py); hand over to the supervisor (jobs/host/supervisor.py), which runs the attempts.
state.json is written only through process.StateFile.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Mapping
from typing import Any

if __name__ == "__main__":  # first: a shipped module that changed must not run, not even on import
    from radeonlab.jobs.host.codecheck import refuse_changed_code

    refuse_changed_code(sys.argv[1:])

from radeonlab.contract.jobdir import (
    FILES,
    FINISHED_STATES,
    alive,
    group_alive,
    job_alive,
    read_json,
    write_json_atomic,
)
from radeonlab.contract.records import JobRecord
from radeonlab.contract.state import EndReason, JobState
from radeonlab.jobs.host import gpu_queue, runtime, supervisor
from radeonlab.jobs.host.process import EXIT_LOCKED, StateFile, now, stop_group

# A multi-node job started by Slurm's batch script (srun, one launcher per node): these come from the
# allocation, not from job.json, because Slurm, not the laptop, chose the nodes and rank 0's address.
# Reading them here is the host side of Slurm's rank mapping, not a choice of scheduler (that is made once,
# on the laptop, in jobs/scheduler/choose.py): the environment says whether an allocation started us.
SLURM_TORCHRUN_KEYS = (
    "FORCE_TORCHRUN", "NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "NPROC_PER_NODE"
)  # fmt: skip
# ... and the allocation's node names in SLURM_NODEID order (comma-separated), set by the batch script.
SLURM_NODES_ENV = "RADEONLAB_SLURM_NODES"
CANCEL_SETTLE_S = 5.0  # after the group is gone, how long cancel waits for the launcher's final write


def read_secrets(job_dir: str) -> tuple[dict[str, str], str | None]:
    """Read env.secret (a JSON object, mode 0600) and delete it at once; secrets never go through argv."""
    path = os.path.join(job_dir, FILES["env_secret"])
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


def slurm_ranks(job: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, Any] | None:
    """job.json's `nodes` of a multi-node job Slurm started (srun, one launcher per node): this node's rank
    and every peer, from the allocation. The laptop staged the same folder on every candidate node without
    a rank (Slurm picks the nodes when they free), so each rank writes it here, at start: `status`, `watch`
    and `fetch` then find rank 0's folder (the adapter) and its peers. Peers are named by the inventory
    host the laptop mapped each Slurm node to (job.json slurm.nodes). None outside such a job."""
    names = [n for n in environ.get(SLURM_NODES_ENV, "").split(",") if n]
    if not environ.get("SLURM_JOB_ID") or not names or not environ.get("NODE_RANK", "").isdigit():
        return None
    where = (job.get("slurm") or {}).get("nodes") or {}
    peers = [
        {"rank": i, "host": str((where.get(n) or {}).get("host") or n),
         "address": str((where.get(n) or {}).get("address") or "")}
        for i, n in enumerate(names)
    ]  # fmt: skip
    rank = int(environ["NODE_RANK"])
    return {
        "rank": rank,
        "world_size": int(environ.get("NNODES") or len(names)),
        "master": peers[0]["host"],
        "master_addr": environ.get("MASTER_ADDR") or peers[0]["address"],
        "master_port": int(environ.get("MASTER_PORT") or 0),
        "peers": peers,
        "slurm_job_id": environ["SLURM_JOB_ID"],
        "slurm_node": names[rank] if rank < len(names) else "",
    }


def record_slurm_rank(job_dir: str, raw: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """job.json with this rank's `nodes` and torchrun variables written in, under a multi-node Slurm job;
    `raw` unchanged otherwise."""
    ranks = slurm_ranks(raw, environ)
    if ranks is None:
        return raw
    torchrun = {k: environ[k] for k in SLURM_TORCHRUN_KEYS if environ.get(k)}
    raw = {**raw, "nodes": ranks, "env": {**(raw.get("env") or {}), **torchrun}}
    write_json_atomic(os.path.join(job_dir, FILES["job"]), raw)
    return raw


def run(
    job_dir: str,
    venv: str,
    allow_shared: bool,
    queue_: bool = True,
    resume: bool = False,
    resume_max_step: int | None = None,
) -> int:
    job_dir = os.path.abspath(job_dir)
    # our own output (tracebacks of this module) goes to launcher.log: the start command discards stdio
    log_fd = os.open(
        os.path.join(job_dir, FILES["launcher_log"]), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
    )
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    # first, so even a rank that ends at once (cancelled while pending) says which rank it was
    raw = record_slurm_rank(job_dir, read_json(os.path.join(job_dir, FILES["job"])), os.environ)
    job = JobRecord.from_dict(
        {"id": os.path.basename(job_dir), "name": "", "spec_file": "", "created_at": "", "host": "", **raw}
    )
    states = StateFile(job_dir)
    # read and deleted before anything else: a queued or refused job must not leave secrets on disk
    secrets, secret_problem = read_secrets(job_dir)
    if resume:  # `radeonlab resume` of a cancelled job: the old request is done with
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(job_dir, FILES["cancel_marker"]))
    if secret_problem:
        return states.finish(EndReason.SECRETS_REFUSED, secret_problem)
    if os.path.exists(os.path.join(job_dir, FILES["cancel_marker"])):
        return states.finish(EndReason.CANCELLED, "cancelled before it started")
    locks_dir = os.path.join(os.path.dirname(os.path.dirname(job_dir)), "locks")
    fds, refusal, cancelled = gpu_queue.wait_for_gpus(
        job_dir, job.to_dict(), locks_dir, allow_shared, queue_, states
    )
    if cancelled:
        return states.finish(EndReason.CANCELLED, refusal)
    if refusal:
        return states.finish(
            EndReason.GPU_BUSY, refusal + "; submit with --allow-shared to share it", exit_code=EXIT_LOCKED
        )
    where = runtime.Runtime.of(runtime.read_record(), venv)  # the venv, or the host's image (issue 29)
    record_runtime(job_dir, where)
    argv = [where.program("llamafactory-cli"), "train", os.path.join(job_dir, FILES["config"])]
    env = child_env(job_dir, job, secrets, venv, where)  # held by the supervisor for every attempt
    secrets.clear()
    return supervisor.Supervisor(job_dir, argv, env, fds, states, where).run(resume, resume_max_step)


def record_runtime(job_dir: str, where: runtime.Runtime) -> None:
    """job.json names where the job runs: the runtime, and in a container the image and its digest."""
    path = os.path.join(job_dir, FILES["job"])
    write_json_atomic(path, {**read_json(path), **where.job_fields()})


def child_env(
    job_dir: str, job: JobRecord, secrets: dict[str, str], venv: str, where: runtime.Runtime | None = None
) -> dict[str, str]:
    """The training process's environment: the login environment (profile.d: ROCm, the card's overrides),
    the venv's bin first on PATH (LLaMA-Factory starts `torchrun` by name; in a container the image's PATH
    has it), the job's caches, its GPUs, its env and secrets."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # radeonlab's host code is for the launcher, not for the training venv
    if where is None or not where.container:
        env["PATH"] = os.path.join(venv, "bin") + os.pathsep + env.get("PATH", os.defpath)
    for key, rel in supervisor.CACHE_ENV.items():
        env[key] = os.path.join(job_dir, rel)
        os.makedirs(env[key], exist_ok=True)
    env.update({str(k): str(v) for k, v in job.env.items()})
    if job.gpus:  # after the job's env: the GPUs the queue locked are the ones it sees
        env["HIP_VISIBLE_DEVICES"] = ",".join(str(g) for g in job.gpus)
    if os.environ.get("SLURM_JOB_ID"):  # under Slurm the allocation says who is who (jobs/plan/slurm.py)
        env.update({k: os.environ[k] for k in SLURM_TORCHRUN_KEYS if os.environ.get(k)})
    env.update(secrets)
    return env


def cancel(job_dir: str, grace: float) -> int:
    """Kill the job's process group (SIGTERM, then SIGKILL after `grace` s) and make sure it is recorded."""
    job_dir = os.path.abspath(job_dir)
    state_path = os.path.join(job_dir, FILES["state"])
    with open(os.path.join(job_dir, FILES["cancel_marker"]), "w") as f:
        f.write(now() + "\n")
    state = read_json(state_path)
    if state.get("state") in FINISHED_STATES:
        print(json.dumps(state))
        return 0
    launcher, launcher_start = state.get("pid"), state.get("pid_start")
    deadline = time.monotonic() + grace
    # a launcher still starting up has no pgid yet; it reads the marker itself after writing "running"
    while not state.get("pgid") and alive(launcher, launcher_start) and time.monotonic() < deadline:
        time.sleep(0.1)
        state = read_json(state_path)
    pgid = int(state.get("pgid") or 0)
    for sig, wait_s in ((signal.SIGTERM, grace), (signal.SIGKILL, CANCEL_SETTLE_S)):
        if not group_alive(pgid):
            break
        stop_group(pgid, sig)
        until = time.monotonic() + wait_s
        while group_alive(pgid) and time.monotonic() < until:
            time.sleep(0.1)
    until = time.monotonic() + CANCEL_SETTLE_S
    while alive(launcher, launcher_start) and time.monotonic() < until:
        time.sleep(0.1)
    stop_container(job_dir, state)
    state = read_json(state_path)
    if state.get("state") not in FINISHED_STATES:
        # no launcher left to record the end (never started, killed, host rebooted): record it here
        state.update(
            state=JobState.CANCELLED.value,
            end=EndReason.CANCELLED.value,
            reason=EndReason.CANCELLED.message,
            ended_at=now(),
        )
        write_json_atomic(state_path, state)
    print(json.dumps(state))
    return 0


def stop_container(job_dir: str, state: Mapping[str, Any]) -> None:
    """A container job's attempt: its container goes too (podman run passes SIGTERM on to it, but a
    SIGKILLed `podman run` leaves the container running, holding the GPU)."""
    job = read_json(os.path.join(job_dir, FILES["job"]))
    if job.get("runtime") != "container" or not state.get("attempt"):
        return
    record = runtime.read_record()
    where = runtime.Runtime.of(record, record.venv if record else "")
    runtime.stop(where, runtime.container_name(os.path.basename(job_dir), str(state["attempt"])))


def status(job_dir: str) -> int:
    """Print state.json with "alive": whether the launcher or the training group still runs."""
    state = read_json(os.path.join(os.path.abspath(job_dir), FILES["state"]))
    print(json.dumps({**state, "alive": job_alive(state)}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="radeonlab.jobs.host.launcher", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    p_run = sub.add_parser("run")
    p_run.add_argument("job_dir")
    p_run.add_argument("--venv", required=True)
    p_run.add_argument("--allow-shared", action="store_true")
    p_run.add_argument("--no-queue", action="store_true", help="refuse (exit 75), do not wait")
    p_run.add_argument("--resume", action="store_true", help="a new attempt from the newest checkpoint")
    p_run.add_argument("--resume-max-step", type=int, help="no later checkpoint than this step (multi-node)")
    p_cancel = sub.add_parser("cancel")
    p_cancel.add_argument("job_dir")
    p_cancel.add_argument("--grace", type=float, default=10.0)
    p_status = sub.add_parser("status")
    p_status.add_argument("job_dir")
    args = parser.parse_args(argv)
    if args.verb == "run":
        queue_, resume = not args.no_queue, args.resume
        try:
            return run(args.job_dir, args.venv, args.allow_shared, queue_, resume, args.resume_max_step)
        except Exception as exc:  # any failure of the launcher itself: the job must still end with a record
            traceback.print_exc()  # into launcher.log (run() pointed stderr there)
            detail = f"the launcher failed: {type(exc).__name__}: {exc}".splitlines()[0][:300]
            return StateFile(os.path.abspath(args.job_dir)).finish(EndReason.LAUNCHER_ERROR, detail)
    if args.verb == "cancel":
        return cancel(args.job_dir, args.grace)
    return status(args.job_dir)


if __name__ == "__main__":
    sys.exit(main())

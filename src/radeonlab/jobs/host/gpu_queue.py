"""The host's job queue: one flock per GPU, and a FIFO line per GPU among the jobs waiting for it.

The waiting process is the job's detached launcher itself: the line lives on the host and needs no laptop.
Order: job.json created_at, then when each launcher started waiting, then the id. Only live launchers count:
a queued job whose launcher died (host rebooted) holds no place in the line. Standard library only.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time

from radeonlab.contract.jobdir import FILES, alive, scan
from radeonlab.contract.state import JobState
from radeonlab.jobs.host.process import StateFile

POLL_S = 1.0  # how often a queued job looks whether it is first in line and its GPU is free
CPU_SLOT = "cpu"  # the lock of a job without a GPU


def take_locks(locks_dir: str, gpus: list, job_id: str, shared: bool) -> tuple[list[int], str | None]:
    """flock one file per GPU index (or the CPU slot); returns (fds, None) or ([], why it is refused)."""
    os.makedirs(locks_dir, exist_ok=True)
    fds: list[int] = []
    for gpu in gpus or [CPU_SLOT]:
        path = os.path.join(locks_dir, f"gpu{gpu}.lock" if gpu != CPU_SLOT else "cpu.lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            holder = os.pread(fd, 256, 0).decode(errors="replace").strip() or "another job"
            for other in [fd, *fds]:
                os.close(other)
            what = f"GPU {gpu}" if gpu != CPU_SLOT else "the CPU slot"
            return [], f"{what} is in use by {holder}"
        if not shared:
            os.ftruncate(fd, 0)
            os.pwrite(fd, job_id.encode(), 0)
        fds.append(fd)
    return fds, None


def ahead_of(job_dir: str, job: dict, since: float) -> list[str]:
    """Ids of live queued jobs that want one of this job's GPUs and were submitted before it."""
    mine = set(job.get("gpus") or [CPU_SLOT])
    me = (str(job.get("created_at") or ""), since, os.path.basename(job_dir))
    ahead = []
    for other in scan(os.path.dirname(job_dir)):
        state = other["state"]
        if other["id"] == os.path.basename(job_dir) or state.get("state") != JobState.QUEUED.value:
            continue
        if not alive(state.get("pid"), state.get("pid_start")):
            continue
        if not mine & set(other["job"].get("gpus") or [CPU_SLOT]):
            continue
        key = (str(other["job"].get("created_at") or ""), float(state.get("queued_since") or 0), other["id"])
        if key < me:
            ahead.append(other["id"])
    return ahead


def wait_for_gpus(
    job_dir: str, job: dict, locks_dir: str, shared: bool, queue: bool, states: StateFile
) -> tuple[list[int], str | None, bool]:
    """Take the job's GPU locks, waiting in line (state `queued`) while another job holds them.

    Returns (lock fds, None, False); ([], why, False) when refused (queue off); ([], why, True) when the job
    was cancelled while it waited."""
    gpus = job.get("gpus") or []
    job_id = str(job.get("id") or os.path.basename(job_dir))
    since = time.time()
    fds, refusal = take_locks(locks_dir, gpus, job_id, shared)
    if not refusal or not queue:
        return fds, refusal, False
    said = None
    while True:
        if os.path.exists(os.path.join(job_dir, FILES["cancel_marker"])):
            return [], "cancelled while queued", True
        ahead = ahead_of(job_dir, job, since)
        if not ahead:
            fds, refusal = take_locks(locks_dir, gpus, job_id, shared)
            if not refusal:
                return fds, None, False
        what = refusal or "the GPU is busy"
        reason = f"waiting: {what}" + (f"; {len(ahead)} job(s) ahead in line" if ahead else "")
        if reason != said:  # written when it changes, so readers see who holds the GPU
            states.write(JobState.QUEUED, reason=reason, queued_since=since)
            said = reason
        time.sleep(POLL_S)

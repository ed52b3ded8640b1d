"""The training process on the host: start it, stop it, say why it ended, and write state.json.

Standard library only (it runs on the workstation's system python3, 3.10 on Ubuntu 22.04).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from datetime import datetime, timezone

from radeonlab.contract.jobdir import ADAPTER_FILES, FILES, MODEL_FILES, start_time, write_json_atomic
from radeonlab.contract.records import StateRecord
from radeonlab.contract.state import EndReason, JobState

EXIT_LOCKED = 75  # EX_TEMPFAIL: the GPU is busy and the job may not wait (multi-node ranks)


def now() -> str:
    # timezone.utc, not datetime.UTC: the host's python3 may be older than 3.11
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: UP017


class StateFile:
    """state.json of one job, written by the process that runs it (the launcher and its supervisor)."""

    def __init__(self, job_dir: str, started: str | None = None) -> None:
        self.path = os.path.join(job_dir, FILES["state"])
        self.pid = os.getpid()
        self.pid_start = start_time(self.pid)
        self.started = started or now()

    def write(self, state: JobState, **fields: object) -> None:
        record = StateRecord(state, pid=self.pid, pid_start=self.pid_start, started_at=self.started)
        for key, value in fields.items():
            setattr(record, key, value)
        write_json_atomic(self.path, record.to_dict())

    def finish(
        self, end: EndReason, reason: str | None = None, exit_code: int | None = None, **ids: object
    ) -> int:
        """Record the end; returns the launcher's own exit code (0 succeeded, 75 GPU busy, 1 otherwise)."""
        self.write(
            end.state, end=end.value, reason=reason or end.message, exit_code=exit_code, ended_at=now(), **ids
        )
        if end is EndReason.SUCCEEDED:
            return 0
        return EXIT_LOCKED if end is EndReason.GPU_BUSY else 1


def start_training(
    job_dir: str, argv: list[str], env: dict[str, str], lock_fds: list[int], limits: dict
) -> subprocess.Popen:
    """Start llamafactory-cli in its own session (cancel kills its whole group), output appended to train.log.

    The lock fds are inherited so the GPU stays locked while any of its processes lives. limits:
    address_space_gb -> RLIMIT_AS of the training process only (for CPU hosts: HIP reserves large address
    ranges at start-up, so on cards this limit breaks ROCm and submit refuses it); memory_gb -> a cgroup
    memory limit through `systemd-run --user --scope -p MemoryMax=` (submit refuses it on a host without
    systemd; the SIMULATED sandbox hosts have none, so it is not exercised there).
    """
    address_space = limits.get("address_space_gb")
    address_space_bytes = int(float(address_space) * 2**30) if address_space else 0
    if limits.get("memory_gb"):
        cap = f"MemoryMax={int(float(limits['memory_gb']) * 2**30)}"
        argv = [
            "systemd-run",
            "--user",
            "--scope",
            "--quiet",
            "--collect",
            "-p",
            cap,
            "-p",
            "MemorySwapMax=0",
            "--",
            *argv,
        ]

    def limit() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (address_space_bytes, address_space_bytes))

    with open(os.path.join(job_dir, FILES["train_log"]), "ab") as log:
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


def read_from(path: str, offset: int, limit: int | None = None) -> tuple[bytes, int]:
    """Bytes appended to `path` since `offset` (at most the last `limit`), and the new offset."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < offset:
                offset = 0
            if limit is not None:
                offset = max(offset, size - limit)
            f.seek(offset)
            data = f.read(size - offset)
    except OSError:
        return b"", offset
    return data, offset + len(data)


def file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def stop_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)


def has_result(job_dir: str) -> bool:
    """Training wrote what it trains: an adapter (LoRA, OFT, ...) or the model's weights (full, freeze)."""
    output = os.path.join(job_dir, FILES["output"])
    return any(os.path.exists(os.path.join(output, name)) for name in (*ADAPTER_FILES, *MODEL_FILES))


NO_ADAPTER = "exit 0 but no adapter ({}) and no model weights ({}) in output/".format(
    " or ".join(ADAPTER_FILES), " or ".join(MODEL_FILES)
)

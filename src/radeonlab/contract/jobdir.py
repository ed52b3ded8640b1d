"""The job folder on a workstation: its layout and file names, atomic JSON, "is it alive?", and the scanner.

One definition for both sides. The laptop builds host paths with `JobDir` (POSIX strings); the host-side
tools (jobs/host) read and write the same files with the functions below, which use only the standard
library and /proc. Layout of <jobs_dir>/<job id>/:

    job.json        what was submitted, plus the attempts (JobRecord)
    state.json      queued | running | succeeded | failed | cancelled, pids, end reason (StateRecord)
    config.yaml     the rendered config of the current attempt; config.json the first attempt's (no YAML
                    parser on the host)
    data/ model/    hard links into the content store <jobs_dir>/../blobs/sha256/
    output/         LLaMA-Factory's output_dir (earlier fresh-start attempts move to output.attempt-K/)
    train.log       the training's stdout+stderr; launcher.log the launcher's own
    host/           radeonlab's host code the job runs (checked against job.json `code` before it starts)
    env.secret      secrets (0600), read and deleted by the launcher at once
"""

from __future__ import annotations

import json
import os
import posixpath
from dataclasses import dataclass
from typing import Any

FILES: dict[str, str] = {
    "job": "job.json",
    "state": "state.json",
    "config": "config.yaml",
    "config_json": "config.json",
    "dataset_info": "data/dataset_info.json",
    "train_log": "train.log",
    "launcher_log": "launcher.log",
    "env_secret": "env.secret",
    "cancel_marker": "cancel.requested",
    "code": "host",
    "data": "data",
    "model": "model",
    "output": "output",
    "cache": "cache",
    "trainer_log": "output/trainer_log.jsonl",
}
ADAPTER_FILES: tuple[str, ...] = ("adapter_model.safetensors", "adapter_model.bin")
# What a full or freeze fine-tune writes instead (transformers' save_pretrained: one file or a sharded index).
MODEL_FILES: tuple[str, ...] = (
    "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json"
)  # fmt: skip
FINISHED_STATES = ("succeeded", "failed", "cancelled")
# Where uploaded files may land in a job folder: data/ (datasets), model/ (a local model), inputs/ (what the
# config's path keys and the radeonlab block's `files` name). Never on a name of the folder's own files
# (job.json, config.yaml, launcher.log, ... or the rendered data/dataset_info.json): one of those replaced by
# an upload broke the job or left it queued forever.
UPLOAD_ROOTS: tuple[str, ...] = ("data/", "model/", "inputs/")


def upload_dest_problem(dest: str) -> str | None:
    """Why an upload may not land at `dest` (relative to the job folder); None: it may."""
    parts = dest.split("/")
    if dest.startswith("/") or any(p in ("", ".", "..") for p in parts):
        return f"{dest!r} is not a plain relative path inside the job folder"
    if not dest.startswith(UPLOAD_ROOTS) or dest in FILES.values():
        return f"{dest!r} is one of the job folder's own names (uploads go under {', '.join(UPLOAD_ROOTS)})"
    return None


@dataclass(frozen=True)
class JobDir:
    """Absolute POSIX paths of one job's folder on its host: `JobDir(root).state`, `.output`, ..."""

    root: str

    @classmethod
    def of(cls, jobs_dir: str, job_id: str) -> JobDir:
        return cls(posixpath.join(jobs_dir, job_id))

    @property
    def id(self) -> str:
        return posixpath.basename(self.root.rstrip("/"))

    def __getattr__(self, key: str) -> str:
        if key in FILES:
            return posixpath.join(self.root, FILES[key])
        raise AttributeError(key)

    def path(self, *names: str) -> str:
        return posixpath.join(self.root, *names)

    @property
    def jobs_dir(self) -> str:
        return posixpath.dirname(self.root.rstrip("/"))

    @property
    def locks_dir(self) -> str:
        """<jobs_dir>/../locks: one flock file per GPU index, shared by every job on the host."""
        return posixpath.join(posixpath.dirname(self.jobs_dir), "locks")


def blobs_dir(jobs_dir: str) -> str:
    """<jobs_dir>/../blobs: the host's content store (every uploaded file once, by sha256)."""
    return posixpath.join(posixpath.dirname(jobs_dir.rstrip("/")), "blobs")


# ------------------------------------------------------------------------------- on the host: files, /proc


def read_json(path: str) -> dict[str, Any]:
    """A JSON object from `path`; {} when absent or unreadable (files are written atomically: see below)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_json_atomic(path: str, data: dict[str, Any]) -> None:
    """tmp + fsync + rename: a reader sees the old or the new file, never half of one."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name, None if the process does not exist."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> int | None:
    """When the process started, in clock ticks since boot (/proc/<pid>/stat field 22): with the pid, an
    identity that a reused pid cannot fake."""
    fields = _stat(pid)
    return int(fields[19]) if fields else None


def alive(pid: int | None, started: int | None = None) -> bool:
    """Is this process running? Zombies are dead (they hold no GPU memory); with `started`, a process that
    reuses the pid is not the one recorded."""
    if not pid:
        return False
    fields = _stat(int(pid))
    if fields is None or fields[0] in "ZX":
        return False
    return started is None or int(fields[19]) == int(started)


def live_groups() -> set[int]:
    """The process groups that have a non-zombie member (one pass over /proc)."""
    groups = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat(int(name))
            if fields and fields[0] not in "ZX":
                groups.add(int(fields[2]))
    return groups


def group_alive(pgid: int | None) -> bool:
    """True while any non-zombie process is in the process group."""
    return pgid is not None and pgid > 0 and pgid in live_groups()


def job_alive(state: dict[str, Any], groups: set[int] | None = None) -> bool:
    """Is anything of the job still running: its launcher (pid + start time) or its training group."""
    if alive(state.get("pid"), state.get("pid_start")):
        return True
    pgid = int(state.get("pgid") or 0)
    return pgid > 0 and pgid in (live_groups() if groups is None else groups)


def scan(jobs_dir: str, ids: list[str] | None = None) -> list[dict[str, Any]]:
    """Every job folder under `jobs_dir` (or just `ids`): {"id", "job", "state", "alive"}, oldest first.

    The one scanner: fleet, placement, `list` and the queue all read job folders through it."""
    if ids is None:
        try:
            ids = sorted(os.listdir(jobs_dir))
        except FileNotFoundError:
            return []
    groups = live_groups()
    out: list[dict[str, Any]] = []
    for job_id in ids:
        root = os.path.join(jobs_dir, job_id)
        job = read_json(os.path.join(root, FILES["job"]))
        if not job:
            continue
        state = read_json(os.path.join(root, FILES["state"])) or {"state": "queued"}
        out.append({"id": job_id, "job": job, "state": state, "alive": job_alive(state, groups)})
    out.sort(key=lambda j: (str(j["job"].get("created_at") or ""), j["id"]))
    return out

"""What a workstation says about itself, in one round trip: its host record, GPU readings, and its jobs.

    python3 -m radeonlab.jobs.host.probe [--record PATH] [--jobs none|summary|full] [--ids ID,ID] [--path P]
                                         [--blob SHA256] [--model REPO@REVISION]

Prints one JSON object: {"record": <host.json object> | null, "record_error": "...", "gpus": [readings],
"jobs": [...], "paths": {P: {"kind": "folder"|"file"|"missing"|"other", "names": [...], "error": "..."}},
"blobs": [SHA256 held], "models": {"REPO@REVISION": {"complete": bool, "reason": "..."}}}.
`--path` (repeatable) asks about folders a spec names on this host (a model folder at /data/...): what is
there, and the names of a folder's files (not its subfolders; the laptop decides whether it is a model).
`summary` jobs carry what fleet and placement need (id, state, alive, gpus, created_at, name,
rank); `full` adds the whole job.json, the last logged step and loss of its trainer log and how long it has
run (for `radeonlab list` and the job handle). `--blob` (repeatable) asks which of a job's uploads the host's
content store holds (receive.py's own check); `--model` (repeatable) whether the host's Hub model cache
holds that revision whole (modelcache.py), so a submit's plan needs nothing else from the host. Used by
`radeonlab fleet`, placement, `list` and the job handle; the one place the laptop's view of a host comes
from. Stdlib only.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from radeonlab.contract.jobdir import FILES, blobs_dir, scan
from radeonlab.contract.records import HOST_RECORD_PATH
from radeonlab.contract.state import JobState
from radeonlab.jobs.host import metrics, modelcache
from radeonlab.jobs.host.readings import read_local_gpus
from radeonlab.jobs.host.receive import Store

# The end of trainer_log.jsonl read for the latest step: a line is a few hundred bytes, so this holds the
# last several (the first line read may be cut; it is skipped).
LOG_TAIL_BYTES = 16384
MAX_NAMES = 2000  # file names listed per asked folder (a model folder has tens)
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # state.json's started_at / ended_at (jobs/host/process.py now())


def read_record(path: str) -> tuple[dict | None, str]:
    """The host record as written, or (None, why not)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return None, "no host record"
    except (OSError, ValueError) as e:
        return None, f"host record unreadable ({type(e).__name__})"
    if not isinstance(data, dict):
        return None, "host record unreadable (not an object)"
    return data, ""


def last_step(job_root: str) -> dict:
    """{"step", "total_steps", "loss"} of the trainer log's latest lines ({} before the first logged step);
    a NaN/Inf loss is null (JSON has no NaN)."""
    try:
        with open(os.path.join(job_root, FILES["trainer_log"]), "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - LOG_TAIL_BYTES))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return {}
    done = metrics.progress([p for p in map(metrics.parse_line, lines) if p is not None])
    if done is None:
        return {}
    loss = done.loss if done.loss is not None and math.isfinite(done.loss) else None
    return {"step": done.step, "total_steps": done.total_steps, "loss": loss}


def run_seconds(state: dict, now: datetime | None = None) -> float | None:
    """How long the job has run by this host's clock: started_at to ended_at (or now while it runs); None
    while it waits in line or when state.json has no start."""
    if state.get("state") == JobState.QUEUED:
        return None
    try:
        start = datetime.strptime(str(state.get("started_at")), TIME_FORMAT)
        end = datetime.strptime(str(state["ended_at"]), TIME_FORMAT) if state.get("ended_at") else None
    except ValueError:
        return None
    end = end or (now or datetime.now(timezone.utc)).replace(tzinfo=None)  # noqa: UP017 (old host pythons)
    return max(0.0, (end - start).total_seconds())


def job_summary(item: dict, full: bool, jobs_dir: str = "") -> dict:
    job = item["job"]
    out = {
        "id": item["id"],
        "state": item["state"],
        "alive": item["alive"],
        "gpus": job.get("gpus") or [],
        "created_at": job.get("created_at"),
        "name": job.get("name"),
        "rank": int((job.get("nodes") or {}).get("rank") or 0),
    }
    if full:
        out["job"] = job
        out["progress"] = last_step(os.path.join(jobs_dir, item["id"]))
        out["duration_s"] = run_seconds(item["state"])
    return out


def path_answer(path: str) -> dict:
    """What `path` is on this host, as the user the probe runs as sees it (stat, then one listdir)."""
    try:
        if not os.path.exists(path):
            return {"kind": "missing"}
        if not os.path.isdir(path):
            return {"kind": "file" if os.path.isfile(path) else "other"}
        with os.scandir(path) as entries:
            names = sorted(e.name for e in entries if e.is_file())
    except OSError as e:
        return {"kind": "other", "error": e.strerror or type(e).__name__}
    return {"kind": "folder", "names": names[:MAX_NAMES]}


def blobs_held(record: dict, digests: list) -> list:
    """Which of these contents the host's store holds (as the upload's first exchange answers)."""
    if not digests or not record.get("jobs_dir"):
        return []
    store = Store(blobs_dir(record["jobs_dir"]))
    held = [d for d in digests if store.has(d)]
    store.save()
    return held


def model_answer(record: dict, repo: str, revision: str) -> dict:
    """Whether the host's shared model cache holds this revision whole, and why not."""
    cache = record.get("model_cache")
    found = modelcache.completeness(Path(cache) if cache else modelcache.default_cache(), repo, revision)
    complete = bool(found["complete"])
    return {"complete": complete, "reason": found.get("reason") or ("" if complete else "incomplete")}


def probe(
    record_path: str,
    jobs: str,
    ids: list[str] | None,
    sysfs_root: str = "/sys",
    paths: list | None = None,
    blobs: list | None = None,
    models: list | None = None,
) -> dict:
    record, problem = read_record(record_path)
    gpus = read_local_gpus(sysfs_root, (record or {}).get("gpus") or [])  # amd-smi when installed
    out: dict = {"record": record, "record_error": problem, "gpus": [asdict(g) for g in gpus], "jobs": []}
    jobs_dir = (record or {}).get("jobs_dir")
    if jobs != "none" and jobs_dir:
        try:
            out["jobs"] = [job_summary(j, jobs == "full", jobs_dir) for j in scan(jobs_dir, ids)]
        except OSError as e:
            out["jobs_error"] = f"{type(e).__name__}: {e}"
    if paths:
        out["paths"] = {p: path_answer(p) for p in paths}
    try:
        if blobs is not None:
            out["blobs"] = blobs_held(record or {}, blobs)
        if models:
            out["models"] = {m: model_answer(record or {}, *m.rsplit("@", 1)) for m in models}
    except (OSError, ValueError) as e:  # unreadable store or cache: the laptop asks again when it uploads
        out["cache_error"] = f"{type(e).__name__}: {e}"
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="radeonlab.jobs.host.probe", description=__doc__.split("\n")[0])
    parser.add_argument("--record", default=HOST_RECORD_PATH)
    parser.add_argument("--jobs", choices=("none", "summary", "full"), default="summary")
    parser.add_argument("--ids", help="comma-separated job ids (default: every job)")
    parser.add_argument("--path", action="append", default=[], help="a folder to look at (repeatable)")
    parser.add_argument("--blob", action="append", default=None, help="a content's sha256 (repeatable)")
    parser.add_argument(
        "--model", action="append", default=[], help="REPO@REVISION: in the model cache, whole?"
    )
    args = parser.parse_args(argv)
    ids = [i for i in (args.ids or "").split(",") if i] or None
    print(json.dumps(probe(args.record, args.jobs, ids, paths=args.path, blobs=args.blob, models=args.model)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

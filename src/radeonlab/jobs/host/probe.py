"""What a workstation says about itself, in one round trip: its host record, GPU readings, and its jobs.

    python3 -m radeonlab.jobs.host.probe [--record PATH] [--jobs none|summary|full] [--ids ID,ID]

Prints one JSON object: {"record": <host.json object> | null, "record_error": "...", "gpus": [readings],
"jobs": [...]}. `summary` jobs carry what fleet and placement need (id, state, alive, gpus, created_at, name,
rank); `full` adds the whole job.json (for `radeonlab list` and the job handle). Used by `radeonlab fleet`,
placement, `list` and the job handle; the one place the laptop's view of a host comes from. Stdlib only.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from radeonlab.contract.jobdir import scan
from radeonlab.contract.records import HOST_RECORD_PATH
from radeonlab.jobs.host.readings import read_local_gpus


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


def job_summary(item: dict, full: bool) -> dict:
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
    return out


def probe(record_path: str, jobs: str, ids: list[str] | None, sysfs_root: str = "/sys") -> dict:
    record, problem = read_record(record_path)
    gpus = read_local_gpus(sysfs_root, (record or {}).get("gpus") or [])  # amd-smi when installed
    out: dict = {"record": record, "record_error": problem, "gpus": [asdict(g) for g in gpus], "jobs": []}
    jobs_dir = (record or {}).get("jobs_dir")
    if jobs != "none" and jobs_dir:
        try:
            out["jobs"] = [job_summary(j, jobs == "full") for j in scan(jobs_dir, ids)]
        except OSError as e:
            out["jobs_error"] = f"{type(e).__name__}: {e}"
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="radeonlab.jobs.host.probe", description=__doc__.split("\n")[0])
    parser.add_argument("--record", default=HOST_RECORD_PATH)
    parser.add_argument("--jobs", choices=("none", "summary", "full"), default="summary")
    parser.add_argument("--ids", help="comma-separated job ids (default: every job)")
    args = parser.parse_args(argv)
    ids = [i for i in (args.ids or "").split(",") if i] or None
    print(json.dumps(probe(args.record, args.jobs, ids)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

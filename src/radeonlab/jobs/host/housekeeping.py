"""Job folders and the content store on a workstation: checkpoints, removal, pruning.

    python3 -m radeonlab.jobs.host.housekeeping checkpoints JOB_DIR     # output/ listing, two levels deep
    python3 -m radeonlab.jobs.host.housekeeping rm JOB_DIR [--dry-run]
    python3 -m radeonlab.jobs.host.housekeeping prune JOBS_DIR --older-than SECONDS [--dry-run]

Each prints one JSON object. `rm` refuses a job whose processes are alive; `prune` removes finished job
folders that ended more than SECONDS ago, then the content store's blobs no job folder links to any more
(a blob's hard-link count is 1 when only the store holds it) and partial uploads older than SECONDS.
Stdlib only.
"""

from __future__ import annotations

import argparse
import calendar
import json
import os
import shutil
import sys
import time

from radeonlab.contract.jobdir import FILES, FINISHED_STATES, blobs_dir, job_alive, read_json, scan
from radeonlab.jobs.host import remedies


def checkpoints(job_dir: str) -> dict:
    """Paths relative to output/, two levels deep (what remedies.checkpoints reads)."""
    return {"listing": remedies.output_listing(os.path.join(job_dir, FILES["output"]))}


def _size(path: str) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            total += st.st_size if st.st_nlink == 1 else 0  # shared blobs are freed by the prune of the store
    return total


def rm(job_dir: str, dry_run: bool) -> dict:
    if not os.path.isdir(job_dir):
        return {"error": f"no job folder {job_dir}"}
    state = read_json(os.path.join(job_dir, FILES["state"]))
    if job_alive(state):
        return {"error": f"{os.path.basename(job_dir)} is {state.get('state')}: cancel it first"}
    freed = _size(job_dir)
    if not dry_run:
        shutil.rmtree(job_dir)
    return {"removed": [os.path.basename(job_dir)], "bytes": freed, "dry_run": dry_run}


def _ended(state: dict, job_dir: str) -> float:
    try:
        return float(calendar.timegm(time.strptime(str(state.get("ended_at")), "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return os.path.getmtime(os.path.join(job_dir, FILES["state"]))


def _links_in(folders: list[str]) -> dict[tuple[int, int], int]:
    """(device, inode) -> how many of the folders' files are hard links to it."""
    links: dict[tuple[int, int], int] = {}
    for top in folders:
        for folder, _, files in os.walk(top):
            for name in files:
                st = os.lstat(os.path.join(folder, name))
                if st.st_nlink > 1:
                    links[(st.st_dev, st.st_ino)] = links.get((st.st_dev, st.st_ino), 0) + 1
    return links


def prune(jobs_dir: str, older_than: float, dry_run: bool) -> dict:
    """Finished job folders that ended more than `older_than` seconds ago, then the blobs only they used."""
    now = time.time()
    ended = {
        item["id"]: _ended(item["state"], os.path.join(jobs_dir, item["id"]))
        for item in scan(jobs_dir)
        if not item["alive"] and item["state"].get("state") in FINISHED_STATES
    }
    old = [job_id for job_id, at in ended.items() if now - at >= older_than]
    folders = [os.path.join(jobs_dir, i) for i in old]
    # each job with its age and the bytes its folder alone holds: a dry run is for deciding which go
    jobs = [{"id": i, "age_s": round(now - ended[i]), "bytes": _size(os.path.join(jobs_dir, i))} for i in old]
    freed = sum(j["bytes"] for j in jobs)
    going = _links_in(folders)
    store = os.path.join(blobs_dir(jobs_dir), "sha256")
    blobs = []
    for name in sorted(os.listdir(store)) if os.path.isdir(store) else []:
        st = os.lstat(os.path.join(store, name))
        if name.endswith(".part"):
            unused = now - st.st_mtime >= older_than  # an upload abandoned that long ago
        else:
            unused = st.st_nlink - 1 == going.get((st.st_dev, st.st_ino), 0)  # no job left links to it
        if unused:
            blobs.append(name)
            freed += st.st_size
    if not dry_run:
        for folder in folders:
            shutil.rmtree(folder)
        for name in blobs:
            os.unlink(os.path.join(store, name))
    return {"removed": old, "jobs": jobs, "blobs": len(blobs), "bytes": freed, "dry_run": dry_run}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="radeonlab.jobs.host.housekeeping", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="verb", required=True)
    sub.add_parser("checkpoints").add_argument("job_dir")
    p_rm = sub.add_parser("rm")
    p_rm.add_argument("job_dir")
    p_rm.add_argument("--dry-run", action="store_true")
    p_prune = sub.add_parser("prune")
    p_prune.add_argument("jobs_dir")
    p_prune.add_argument("--older-than", type=float, required=True)
    p_prune.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    if args.verb == "checkpoints":
        result = checkpoints(args.job_dir)
    elif args.verb == "rm":
        result = rm(os.path.abspath(args.job_dir), args.dry_run)
    else:
        result = prune(os.path.abspath(args.jobs_dir), args.older_than, args.dry_run)
    print(json.dumps(result))
    return 1 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main())

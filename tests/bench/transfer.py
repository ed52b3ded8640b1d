"""The data rows alone, on one fresh SIMULATED workstation (a measurement, not a test):

    .venv/bin/python -m tests.bench.transfer [--size-mb 200] [--rounds 3]

Creates one sandbox host in a temporary state dir, runs tests/bench/data.py's rows (scp, upload_blobs,
fetch, raw exec streams) for one size, prints the medians in MB/s and as ratios to scp, and destroys the host.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from radeonlab.jobs.fleet.inventory import load_inventory
from radeonlab.sandbox import reap
from radeonlab.sandbox.hosts import Sandbox
from tests.bench.data import bench_size

INVENTORY = Path(__file__).resolve().parents[2] / "inventories" / "sandbox.py"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rl-bench-") as tmp:
        work = Path(tmp)
        sbx = Sandbox(work / "sandbox")
        reap.claim(sbx.state_dir)
        sbx.ensure_base()
        try:
            host = sbx.create_host("bench")
            os.environ["RADEONLAB_SANDBOX_DIR"] = str(sbx.state_dir)
            target = load_inventory(str(INVENTORY))[host.name]
            result = bench_size(sbx, host, target, work / "data", args.size_mb, args.rounds)
        finally:
            sbx.destroy_all()
    print(json.dumps(result["mb_per_s"], indent=1))
    for key in ("upload_over_scp", "raw_up_over_scp", "fetch_over_scp", "raw_down_over_scp"):
        print(f"  {key:20} {result[key]:.2f}")


if __name__ == "__main__":
    main()

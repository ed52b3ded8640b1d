"""radeonlab's benchmarks in one run, as ratios (a measurement script, not a test):

    .venv/bin/python -m tests.bench.run --out bench.json [--hosts 3] [--sizes-mb 100,1000] [--watch-s 30]
    .venv/bin/python -m tests.bench.run --markdown bench.json   # docs/benchmarks.md's table from that JSON
    .venv/bin/python -m tests.bench.report > docs/benchmarks.md # the whole page, from last-run-full.json
    .venv/bin/python -m tests.bench.run --out b.json --reduced  # smoke: 2 hosts per engine, 1 round, 8 MB,
                                                                # 5 s, the Hub rows on the tiny model

On SIMULATED workstations (radeonlab/sandbox, a temporary state dir, destroyed at the end):
1. provisioning (tests/bench/provisioning.py): the first `pyinfra -y inventories/sandbox.py deploy/setup.py`
   on N fresh hosts, the no-op re-run, and the same deploy with `--debug-facts` WITHOUT `-y` (the bare
   fact-gathering cost: without -y pyinfra 3.10 runs every operation's generator during change detection,
   so the facts operations read inside themselves are gathered too, then `--debug-facts` exits before
   executing anything); and the same for the Ansible anchor (tests/bench/ansible/site.yml) on N other
   fresh hosts. Medians.
2. data (tests/bench/data.py): jobs/ssh/transfer.py's upload_blobs and fetch vs plain `scp`, per size, with
   a raw exec-channel stream beside them; the re-upload of unchanged data.
3. jobs (tests/bench/jobs.py): `submit --json` phases and submit -> first logged step minus LLaMA-Factory's
   own start-up; the same job twice on a model of the SIMULATED Hub over a SIMULATED link (issue 11: the
   second finds it in the host's cache; the larger bench model, or the tiny one with --reduced);
   `watch`'s CPU cost on the host.
4. models_pull (tests/bench/modelpull.py): `models pull` of the Hub row's model to N provisioned hosts, the
   bytes the SIMULATED Hub served over the model's bytes, and the LAN fan-out against the raw host-to-host
   stream of the same bytes.
5. checker (tests/bench/checker.py): `radeonlab check` on inputs made to hang or exhaust it, each against
   issue 26's goal (a spec under 1 MB: at most 2 s and 200 MB); on the laptop, before the sandbox is built.
Training runs on the hosts' CPU (torch there is a CPU build standing in for ROCm torch): the submit and
watch numbers include that CPU contention, as on a busy workstation.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from radeonlab.jobs.fleet.inventory import load_inventory
from radeonlab.roles.python_stack.defaults import DEFAULTS as STACK_DEFAULTS
from radeonlab.sandbox import reap
from radeonlab.sandbox.hosts import Sandbox
from tests.bench import checker, data, jobs, modelpull, provisioning
from tests.bench.report import GOALS, markdown, table, write_docs

REDUCED = {"hosts": 2, "rounds": 1, "submit_rounds": 1, "sizes_mb": [8], "watch_s": 5.0, "hub_model": "tiny"}


def machine() -> dict[str, Any]:
    """What the numbers were measured on: the machine is shared, so its load is part of the result."""
    cpu = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        "unknown CPU",
    )  # fmt: skip
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "python": sys.version.split()[0],
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the results here as JSON")
    parser.add_argument(
        "--markdown",
        type=Path,
        metavar="JSON",
        help="print docs/benchmarks.md's table from a run's JSON; runs nothing",
    )
    parser.add_argument(
        "--write-docs",
        action="store_true",
        help="with --markdown: write docs/benchmarks.md from it (as python -m tests.bench.report JSON)",
    )
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument(
        "--sizes-mb", type=lambda s: [int(x) for x in s.split(",")], default=[100, 1000], help="e.g. 100,1000"
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--submit-rounds", type=int, default=3,
        help="jobs the submit row times (its median; the host's first job starts on cold caches)",
    )  # fmt: skip
    parser.add_argument("--watch-s", type=float, default=30.0)
    parser.add_argument(
        "--hub-model", choices=sorted(jobs.HUB_MODELS), default="bench",
        help="the Hub row's SIMULATED model: bench (~233 MB, built once per machine) or tiny (0.9 MB)",
    )  # fmt: skip
    parser.add_argument(
        "--hub-link-mbit", type=float, default=jobs.HUB_LINK_MBIT_S,
        help="the SIMULATED Hub's link rate in Mbit/s for the Hub row",
    )  # fmt: skip
    parser.add_argument(
        "--only", default="provisioning,data,submit,hub,watch,models_pull,checker", help="sections to run"
    )
    parser.add_argument("--reduced", action="store_true", help="CI's smoke run: " + json.dumps(REDUCED))
    args = parser.parse_args(argv)
    if not args.markdown and args.out is None:
        parser.error("--out is required")
    if args.reduced:
        for key, value in REDUCED.items():
            setattr(args, key, value)
    return args


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    wanted = set(args.only.split(","))
    result: dict[str, Any] = {"reduced": args.reduced, "machine": machine()}

    def step(section: str, measure: Callable[[], dict[str, Any]]) -> None:
        """Each section is written as soon as it is measured: a later failure keeps the earlier numbers."""
        if section not in wanted:
            return
        try:
            result[section] = measure()
            # the goals the row was measured against, as data beside it (report.GOALS: issue 15, 11, 28)
            own = {k: v for k, v in GOALS.items() if k.split(".")[0] == section}
            result[section].setdefault("goals", {}).update(own)  # beside a section's own (checker's)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - one section's failure must not lose the rest
            result.setdefault("errors", {})[section] = f"{type(exc).__name__}: {str(exc)[-3000:]}"
            print(f"{section} FAILED: {str(exc)[-3000:]}", flush=True)
        result["total_s"] = time.perf_counter() - started
        result["machine"]["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"{section} done ({result['total_s']:.0f}s)", flush=True)

    step("checker", lambda: checker.bench_checker(1 if args.reduced else 3))  # the laptop alone: no sandbox
    if not wanted - {"checker"}:
        return result
    with tempfile.TemporaryDirectory(prefix="rl-bench-") as tmp:
        work = Path(tmp)
        sbx = Sandbox(work / "sandbox")
        reap.claim(sbx.state_dir)
        sbx.ensure_base()
        env = {
            **os.environ,
            "RADEONLAB_SANDBOX_DIR": str(sbx.state_dir),
            "RADEONLAB_HOME": str(work / "laptop"),
        }
        os.environ["RADEONLAB_SANDBOX_DIR"] = str(sbx.state_dir)  # for load_inventory in this process
        try:
            step("provisioning", lambda: provisioning.bench_provisioning(
                sbx, args.hosts, args.rounds, env, work / "ansible"))  # fmt: skip
            if "provisioning" in result.get("errors", {}):
                sbx.destroy_all()  # start the other rows from one freshly provisioned host
            if not sbx.hosts:  # --only without provisioning: provisioned hosts for the other rows
                want = args.hosts if "models_pull" in wanted else 1
                with provisioning.served(sbx):
                    provisioning.run_pyinfra(
                        [sbx.create_host(f"ws{i + 1}", card=provisioning.CARD).name for i in range(want)], env
                    )
            ours = [h for name, h in sbx.hosts.items() if not name.startswith("an")]  # not Ansible's
            host = ours[0]
            target = load_inventory(jobs.INVENTORY)[host.name]
            venv = str(STACK_DEFAULTS["python_stack_venv"]).replace("~", f"/home/{host.user}", 1)
            step(
                "data", lambda: data.bench_data(sbx, host, target, work / "data", args.sizes_mb, args.rounds)
            )
            step("submit", lambda: jobs.bench_submit(host, work / "job", env, args.submit_rounds, venv))
            step("hub", lambda: jobs.bench_hub(host, work / "hub", env, args.hub_model, args.hub_link_mbit))
            step("watch", lambda: jobs.bench_watch(host, work / "job", env, args.watch_s))
            step("models_pull", lambda: modelpull.bench_models_pull(
                ours[: args.hosts], work / "pull", env, args.hub_model, args.hub_link_mbit))  # fmt: skip
        finally:
            sbx.destroy_all()
    return result


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.markdown:
        result = json.loads(args.markdown.read_text())
        if args.write_docs:
            write_docs(result)
        print(markdown(result))
        return
    result = run(args)
    print(table(result))
    print(f"total {result['total_s']:.0f}s; JSON in {args.out}")
    if result.get("errors"):
        raise SystemExit(f"bench: failed sections: {', '.join(result['errors'])}")


if __name__ == "__main__":
    main()

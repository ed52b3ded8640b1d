"""radeonlab's benchmarks in one run, as ratios (a measurement script, not a test):

    .venv/bin/python -m tests.bench.run --out bench.json [--hosts 3] [--size-mb 100] [--watch-s 30]
    .venv/bin/python -m tests.bench.run --out bench.json --reduced   # CI: 1 host per engine, 1 round, 8 MB

On SIMULATED workstations (radeonlab/sandbox, a temporary state dir, destroyed at the end):
1. provisioning (tests/bench/provisioning.py): the first `pyinfra -y inventories/sandbox.py deploy/setup.py`
   on N fresh hosts, the no-op re-run, and the same deploy with `--debug-facts` WITHOUT `-y` (the bare
   fact-gathering cost: without -y pyinfra 3.10 runs every operation's generator during change detection,
   so the facts operations read inside themselves are gathered too, then `--debug-facts` exits before
   executing anything; with `-y` it skips change detection and gathers only the deploy code's own facts);
   and the same for the Ansible anchor (tests/bench/ansible/site.yml) on N other fresh hosts. Medians.
2. data: radeonlab.jobs.apply.sync.upload_files (content-addressed, sha256 checked on the host) vs plain
`scp` of the same
   file; the re-upload of unchanged data (bytes sent); jobs.apply.sync.fetch_files vs `scp` down; plus
   tests/bench/transfer.py's raw put/get rows.
3. submit overhead: `radeonlab submit` start to the first line of trainer_log.jsonl, minus LLaMA-Factory's
   own start-up as train.log timestamps it (first log line to "***** Running training *****").
4. watch polling cost on the host: CPU seconds per minute of the host's processes outside the job (sshd,
   the polls it runs), from /proc/<pid>/stat (utime+stime+cutime+cstime), with and without `watch`.
Training runs on the hosts' CPU (torch there is a CPU build standing in for ROCm torch): the submit and
watch numbers include that CPU contention, as on a busy workstation.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from radeonlab.jobs.apply.sync import fetch_files, upload_files
from radeonlab.jobs.fleet.inventory import load_inventory
from radeonlab.jobs.ssh.connection import connect

from radeonlab.sandbox import demodata, reap, tinymodel
from radeonlab.sandbox.demo import write_spec
from radeonlab.sandbox.hosts import Sandbox, SandboxHost
from tests.bench import provisioning, transfer

REPO = Path(__file__).resolve().parents[2]
INVENTORY = str(REPO / "inventories/sandbox.py")
LAB_HOME = "/home/lab/radeonlab"
BLOBS = f"{LAB_HOME}/blobs"
CLK_TCK = 100  # USER_HZ: /proc/<pid>/stat counts CPU time in these ticks on Linux
SUBMIT_STEPS = 20
LONG_STEPS = 100_000  # the job `watch` follows (cancelled at the end)
LF_TS = re.compile(r"^\[\w+\|(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\]|\] (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+ >>")


# --- 1. provisioning: tests/bench/provisioning.py (radeonlab and its Ansible anchor) ---------------------


# --- 2. data --------------------------------------------------------------------------------------------
def bench_data(sbx: Sandbox, host: SandboxHost, work: Path, size_mb: int, rounds: int) -> dict[str, Any]:
    target = load_inventory(INVENTORY)[host.name]
    src = work / "dataset.jsonl"
    transfer.random_file(src, size_mb)
    size = src.stat().st_size
    at = f"{target.user}@{target.hostname}:"
    scp = ["scp", "-q", *transfer.scp_options(sbx, target.port)]
    up, up_scp, down, down_scp = [], [], [], []
    for r in range(rounds):
        with open(src, "r+b") as f:  # new content each round: the content store would skip a known blob
            f.write(os.urandom(16))
        t0 = time.perf_counter()
        subprocess.run([*scp, str(src), f"{at}scp-{r}.jsonl"], check=True)
        up_scp.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        with connect(target) as remote:
            sent = upload_files(remote, [src], BLOBS, f"{LAB_HOME}/bench/up-{r}").bytes_sent
        up.append(time.perf_counter() - t0)
        assert sent == size
        t0 = time.perf_counter()
        subprocess.run([*scp, f"{at}scp-{r}.jsonl", str(work / f"down-scp-{r}")], check=True)
        down_scp.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        with connect(target) as remote:
            fetch_files(remote, f"{LAB_HOME}/bench/up-{r}", None, work / f"down-{r}")
        down.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    with connect(target) as remote:
        again = upload_files(remote, [src], BLOBS, f"{LAB_HOME}/bench/again")
    again_s = time.perf_counter() - t0
    times = {"upload_files": up, "scp_up": up_scp, "fetch_files": down, "scp_down": down_scp}
    mbps = {k: size / statistics.median(v) / 1e6 for k, v in times.items()}
    (work / "raw").mkdir()
    raw = transfer.measure(sbx, target, work / "raw", size_mb, rounds)
    return {
        "size_mb": size_mb,
        "rounds": rounds,
        "mb_per_s": mbps,
        "upload_over_scp": mbps["upload_files"] / mbps["scp_up"],
        "fetch_over_scp": mbps["fetch_files"] / mbps["scp_down"],
        "reupload_bytes_sent": again.bytes_sent,
        "reupload_s": again_s,
        "reupload_over_scp_s": again_s / statistics.median(up_scp),
        "raw_transfer": raw,
    }


# --- 3. submit overhead ---------------------------------------------------------------------------------
def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    exe = str(Path(sys.executable).with_name("radeonlab"))
    return subprocess.run([exe, *args], cwd=REPO, env=env, capture_output=True, text=True, check=False)


def _wait(host: SandboxHost, path: str, timeout: float = 300, every: float = 0.05) -> float:
    """Poll (from the machine, not over SSH) until `path` on the host is non-empty; returns the time."""
    deadline = time.monotonic() + timeout
    file = host.root / path.lstrip("/")
    while time.monotonic() < deadline:
        if file.is_file() and file.stat().st_size > 0:
            return time.perf_counter()
        time.sleep(every)
    raise SystemExit(f"bench: {path} never appeared")


def lf_startup_s(train_log: str) -> float:
    """Seconds from LLaMA-Factory's first timestamped log line to "***** Running training *****"."""
    first = start = None
    for line in train_log.splitlines():
        m = LF_TS.search(line)
        if m:
            when = datetime.strptime(m.group(1) or m.group(2), "%Y-%m-%d %H:%M:%S")
            first = first or when
            if "***** Running training *****" in line:
                start = when
                break
    if first is None or start is None:
        raise SystemExit("bench: train.log has no LLaMA-Factory start-up lines")
    return (start - first).total_seconds()


def bench_submit(host: SandboxHost, work: Path, env: dict[str, str], rounds: int) -> dict[str, Any]:
    data = demodata.write_dataset(work / "data")
    tinymodel.build_model(work / "tiny-llama", data)
    spec = write_spec(work, {"max_steps": SUBMIT_STEPS}, name="bench.yaml")
    rows = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        done = _cli(env, "submit", str(spec), "-i", INVENTORY, "--host", host.name)
        t_submit = time.perf_counter() - t0
        job_id = re.search(r"submitted (\S+) to", done.stdout).group(1)  # type: ignore[union-attr]
        job = f"{LAB_HOME}/jobs/{job_id}"
        t_first = _wait(host, f"{job}/output/trainer_log.jsonl") - t0
        log = (host.root / f"{job}/train.log".lstrip("/")).read_text(errors="replace")
        lf = lf_startup_s(log)
        rows.append(
            {"submit_s": t_submit, "first_step_s": t_first, "lf_startup_s": lf, "overhead_s": t_first - lf}
        )
        _cli(env, "watch", job_id, "-i", INVENTORY)  # let it end before the next round
    return {
        "rounds": rows,
        "median_overhead_s": statistics.median(r["overhead_s"] for r in rows),
        "median_first_step_s": statistics.median(r["first_step_s"] for r in rows),
        "overhead_share": statistics.median(r["overhead_s"] / r["first_step_s"] for r in rows),
    }


# --- 4. watch polling cost ------------------------------------------------------------------------------
def _cpu_outside(host: SandboxHost, sessions: set[str]) -> float:
    """CPU seconds (own + reaped children) of the host's processes not in the job's sessions."""
    out = host.exec("cat /proc/[0-9]*/stat 2>/dev/null", check=False).stdout
    total = 0
    for line in out.splitlines():
        fields = line[line.rfind(")") + 2 :].split()  # after "pid (comm) "
        if fields[3] in sessions:  # field 6 of stat: session id
            continue
        total += sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime
    return total / CLK_TCK


def bench_watch(host: SandboxHost, work: Path, env: dict[str, str], window_s: float) -> dict[str, Any]:
    spec = write_spec(work, {"max_steps": LONG_STEPS, "save_steps": LONG_STEPS}, name="long.yaml")
    done = _cli(env, "submit", str(spec), "-i", INVENTORY, "--host", host.name)
    job_id = re.search(r"submitted (\S+) to", done.stdout).group(1)  # type: ignore[union-attr]
    job = f"{LAB_HOME}/jobs/{job_id}"
    _wait(host, f"{job}/output/trainer_log.jsonl")
    state = json.loads((host.root / f"{job}/state.json".lstrip("/")).read_text())
    sessions = {
        host.exec(["ps", "-o", "sid=", "-p", str(pid)]).stdout.strip()
        for pid in (state["pid"], state["pgid"])
    }

    def window() -> float:
        before = _cpu_outside(host, sessions)
        time.sleep(window_s)
        return (_cpu_outside(host, sessions) - before) * 60 / window_s

    idle = window()
    exe = str(Path(sys.executable).with_name("radeonlab"))
    watcher = subprocess.Popen([exe, "watch", job_id, "-i", INVENTORY], cwd=REPO, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    time.sleep(3)  # connected, first view drawn
    watching = window()
    watcher.send_signal(signal.SIGINT)
    try:
        watcher.wait(timeout=30)
        stopped = f"exit {watcher.returncode} on SIGINT"
    except subprocess.TimeoutExpired:  # the window is measured: record it, do not lose the run over it
        watcher.kill()
        watcher.wait()
        stopped = "no exit within 30 s of SIGINT: killed"
    _cli(env, "cancel", job_id, "-i", INVENTORY)
    return {
        "watcher_stopped": stopped,
        "window_s": window_s,
        "idle_cpu_s_per_min": idle,
        "watching_cpu_s_per_min": watching,
        "watch_cost_cpu_s_per_min": watching - idle,
        "watch_cost_share_of_one_core": (watching - idle) / 60,
    }


# --- report ---------------------------------------------------------------------------------------------
def rows(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(what, measured, ratio) per row: the printed table and README's (--markdown) are made from these."""
    p, d, s, w = result["provisioning"], result["data"], result["submit"], result["watch"]
    up, down = d["mb_per_s"], d["mb_per_s"]
    return [
        *provisioning.table_rows(p),
        ("upload", f"{d['size_mb']} MB: upload_files {up['upload_files']:.0f} MB/s, "
         f"scp {up['scp_up']:.0f} MB/s",
         f"{d['upload_over_scp']:.2f}x scp"),
        ("re-upload unchanged", f"{d['reupload_bytes_sent']} bytes sent in {d['reupload_s']:.2f}s",
         f"{d['reupload_over_scp_s']:.3f}x the scp time"),
        ("fetch", f"fetch_files {down['fetch_files']:.0f} MB/s, scp {down['scp_down']:.0f} MB/s",
         f"{d['fetch_over_scp']:.2f}x scp"),
        ("submit overhead", f"first step {s['median_first_step_s']:.1f}s after submit; without "
         f"LLaMA-Factory's start-up {s['median_overhead_s']:.1f}s",
         f"{s['overhead_share']:.2f} of submit-to-first-step"),
        ("watch polling", f"host CPU {w['watching_cpu_s_per_min']:.2f} s/min watching, "
         f"{w['idle_cpu_s_per_min']:.2f} idle", f"{w['watch_cost_share_of_one_core']:.4f} of one core"),
    ]  # fmt: skip


def table(result: dict[str, Any]) -> str:
    found = rows(result)
    width = max(len(r[1]) for r in found)
    lines = [f"{'what':20} {'measured':{width}}  ratio", "-" * (width + 40)]
    lines += [f"{a:20} {b:{width}}  {c}" for a, b, c in found]
    return "\n".join(lines)


def markdown(result: dict[str, Any]) -> str:
    """README's benchmark table, from a run's JSON, with the machine it ran on."""
    m = result.get("machine", {})
    head = (
        f"Run of {m.get('date', '?')} on {m.get('cpu', '?')}, {m.get('cpus', '?')} cores; load average "
        f"{m.get('load_start', '?')} at the start, {m.get('load_end', '?')} at the end"
        f"{' (--reduced)' if result.get('reduced') else ''}; total {result.get('total_s', 0):.0f} s.\n\n"
    )
    lines = ["| what | measured | ratio |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows(result)]
    return head + "\n".join(lines)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the results here as JSON")
    parser.add_argument(
        "--markdown", type=Path, metavar="JSON", help="print README's table from a run's JSON; runs nothing"
    )
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--size-mb", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--watch-s", type=float, default=30.0)
    parser.add_argument(
        "--reduced", action="store_true", help="CI's smoke run: 1 host per engine, 1 round, 8 MB, 5 s watch"
    )
    args = parser.parse_args()
    if args.markdown:
        print(markdown(json.loads(args.markdown.read_text())))
        return
    if args.out is None:
        parser.error("--out is required")
    if args.reduced:
        args.hosts, args.rounds, args.size_mb, args.watch_s = 1, 1, 8, 5.0
    started = time.perf_counter()
    result: dict[str, Any] = {"reduced": args.reduced, "machine": machine()}

    def save(section: str, value: dict[str, Any]) -> None:
        """Each section is written as soon as it is measured: a later failure keeps the earlier numbers."""
        result[section] = value
        result["total_s"] = time.perf_counter() - started
        result["machine"]["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"{section} done ({result['total_s']:.0f}s)", flush=True)

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
            save(
                "provisioning",
                provisioning.bench_provisioning(sbx, args.hosts, args.rounds, env, work / "ansible"),
            )
            host = next(iter(sbx.hosts.values()))
            save("data", bench_data(sbx, host, work, args.size_mb, args.rounds))
            save("submit", bench_submit(host, work / "job", env, args.rounds))
            save("watch", bench_watch(host, work / "job", env, args.watch_s))
        finally:
            sbx.destroy_all()
    print(table(result))
    print(f"total {result['total_s']:.0f}s; JSON in {args.out}")


if __name__ == "__main__":
    main()

"""The job rows of the bench: submit phases, the Hub model's first vs second job, and `watch`'s host cost.

Everything goes through the `radeonlab` CLI as a user types it (`submit --json` reports its own phases: the
plan's checks, inventory, model, placement, hashing, connect, host record, render; then upload, stage and
launch in one round trip). The host side is read from the machine (the sandbox host's files), never over SSH,
so the observer costs the host nothing:
- first log line: train.log non-empty; first step: output/trainer_log.jsonl non-empty (polled every 50 ms);
- LLaMA-Factory's process start: state.json's `child_start` (the kernel's start time of `llamafactory-cli`,
  clock ticks since boot; the sandbox hosts share this machine's kernel and clock), so a round splits into
  radeonlab's part (submit typed -> LLaMA-Factory's process exists) and LLaMA-Factory's own (its exec -> its
  first logged step: its import, model and data loading, the first step), which radeonlab cannot shorten;
- LLaMA-Factory's start-up as its log says: train.log's timestamps from its first line to "***** Running
  training *****" (1 s resolution); its import time measured apart on the host (`import
  llamafactory.train.tuner` in the training venv, the import `llamafactory-cli train` does before it logs).
Training runs on the host's CPU (torch there is a CPU build standing in for ROCm torch).
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from radeonlab.sandbox import demodata, tinymodel
from radeonlab.sandbox.demo import write_spec
from radeonlab.sandbox.hosts import SandboxHost
from radeonlab.sandbox.hub import spawn
from radeonlab.sandbox.hubcatalog import BENCH_PUBLIC, TINY_PUBLIC, sandbox_catalog

REPO = Path(__file__).resolve().parents[2]
INVENTORY = str(REPO / "inventories/sandbox.py")
CLK_TCK = 100  # USER_HZ: /proc/<pid>/stat counts CPU time in these ticks on Linux
SUBMIT_STEPS = 20
LONG_STEPS = 100_000  # the job `watch` follows (cancelled at the end)
LF_TS = re.compile(r"^\[\w+\|(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\]|\] (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+ >>")
RUNNING = "***** Running training *****"
# The Hub row's SIMULATED link from the Hub to the workstation: 100 Mbit/s, a common home broadband rate (a
# real first job on such a link waits ~21 min for an 8B model's ~16 GB). The sandbox Hub paces each file
# transfer to it (hub.set_rate); the model's weights are one file, nearly all of its bytes.
HUB_LINK_MBIT_S = 100.0
# The Hub row's model: the larger SIMULATED one (tinymodel.BENCH_MODEL_CONFIG, ~233 MB) in the full run, so
# the download is a real part of the first job; the tiny one (0.9 MB) in --reduced (CI's time stays as it is).
HUB_MODELS = {"bench": BENCH_PUBLIC, "tiny": TINY_PUBLIC}
LF_IMPORT = (
    "import time; t = time.perf_counter(); import llamafactory.train.tuner; print(time.perf_counter() - t)"
)


def cli(env: Mapping[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess:
    exe = str(Path(sys.executable).with_name("radeonlab"))
    done = subprocess.run([exe, *args], cwd=REPO, env=dict(env), capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"radeonlab {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")
    return done


def wait_file(host: SandboxHost, path: str, timeout: float = 600, every: float = 0.05) -> float:
    """Poll (from the machine, not over SSH) until `path` on the host is non-empty; returns the time."""
    deadline = time.monotonic() + timeout
    file = host.root / path.lstrip("/")
    while time.monotonic() < deadline:
        if file.is_file() and file.stat().st_size > 0:
            return time.perf_counter()
        time.sleep(every)
    raise RuntimeError(f"bench: {path} never appeared on {host.name}")


def lf_startup_s(train_log: str) -> float:
    """Seconds from LLaMA-Factory's first timestamped log line to "***** Running training *****"."""
    first = start = None
    for line in train_log.splitlines():
        m = LF_TS.search(line)
        if m:
            when = datetime.strptime(m.group(1) or m.group(2), "%Y-%m-%d %H:%M:%S")
            first = first or when
            if RUNNING in line:
                start = when
                break
    if first is None or start is None:
        raise RuntimeError("bench: train.log has no LLaMA-Factory start-up lines")
    return (start - first).total_seconds()


def since_boot_s() -> float:
    """Now on the clock the kernel stamps process start times with (CLOCK_BOOTTIME)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def started_s(job_dir: Path) -> float | None:
    """When the job's training process started, on since_boot_s()'s clock (state.json's child_start)."""
    state = json.loads((job_dir / "state.json").read_text())
    ticks = state.get("child_start")
    return ticks / os.sysconf("SC_CLK_TCK") if ticks else None


def submit_once(host: SandboxHost, spec: Path, env: Mapping[str, str]) -> dict[str, Any]:
    """One `radeonlab submit --json`, timed to the job's first log line and first step, then followed to
    its end (`watch`), so the next round starts on an idle host."""
    boot0 = since_boot_s()
    t0 = time.perf_counter()
    done = cli(env, "submit", str(spec), "-i", INVENTORY, "--host", host.name, "--json")
    t_submit = time.perf_counter() - t0
    answer = json.loads(done.stdout)
    job = answer["remote_dir"]
    t_log = wait_file(host, f"{job}/train.log") - t0
    t_step = wait_file(host, f"{job}/output/trainer_log.jsonl") - t0
    folder = host.root / job.lstrip("/")
    log = (folder / "train.log").read_text(errors="replace")
    started = started_s(folder)
    cli(env, "watch", answer["id"], "-i", INVENTORY, check=False)  # let it end before the next round
    lf = lf_startup_s(log)
    if started is None:
        raise RuntimeError(f"bench: {job}/state.json has no child_start")
    exec_s = started - boot0
    return {
        "job": answer["id"],
        "phases_s": answer.get("seconds", {}),
        "submit_s": t_submit,
        "lf_exec_s": exec_s,  # radeonlab's part: submit typed -> llamafactory-cli's process exists
        "first_log_line_s": t_log,
        "first_step_s": t_step,
        "lf_own_s": t_step - exec_s,  # LLaMA-Factory's own: its exec -> its first logged step
        "lf_startup_s": lf,
        "overhead_s": t_step - lf,
    }


def lf_import_s(host: SandboxHost, venv: str, rounds: int) -> list[float]:
    """Wall seconds of LLaMA-Factory's training import in the host's venv, measured on the host."""
    out = []
    for _ in range(rounds):
        done = host.exec([f"{venv}/bin/python", "-c", LF_IMPORT], user=host.user, timeout=300)
        out.append(float(done.stdout.strip().splitlines()[-1]))
    return out


def _median(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def bench_submit(host: SandboxHost, work: Path, env: Mapping[str, str], rounds: int, venv: str) -> dict:
    """The demo job (tiny local model, 20 steps) submitted `rounds` times: phases and first step. Medians
    over the rounds; the first round is the host's first job (cold caches), so 3 rounds keep it from being
    half of the median."""
    data = demodata.write_dataset(work / "data")
    tinymodel.build_model(work / "tiny-llama", data)
    spec = write_spec(work, {"max_steps": SUBMIT_STEPS}, name="bench.yaml")
    rows = [submit_once(host, spec, env) for _ in range(rounds)]
    imports = lf_import_s(host, venv, rounds)
    phases = {k: statistics.median(r["phases_s"].get(k, 0.0) for r in rows) for k in rows[0]["phases_s"]}
    lf_import = statistics.median(imports)
    first_step = _median(rows, "first_step_s")
    lf = _median(rows, "lf_startup_s")
    return {
        "rounds": rows,
        "phases_s": phases,
        "median_submit_s": _median(rows, "submit_s"),
        "median_lf_exec_s": _median(rows, "lf_exec_s"),
        "median_lf_own_s": _median(rows, "lf_own_s"),
        "median_first_log_line_s": _median(rows, "first_log_line_s"),
        "median_first_step_s": first_step,
        "median_lf_startup_s": lf,
        "median_overhead_s": _median(rows, "overhead_s"),
        "lf_import_s": imports,
        # what is left once LLaMA-Factory's own start-up and its import are taken out (an estimate: the
        # import is measured apart, on an idle host)
        "overhead_minus_import_s": first_step - lf - lf_import,
    }


def hub_model(work: Path, model: str) -> tuple[Any, str, Any]:
    """The SIMULATED Hub's catalog (the tiny model, and the bench model when asked: built once per machine),
    the chosen model's repo id and its main revision."""
    data = demodata.write_dataset(work / "data")
    tiny = tinymodel.build_model(work / "tiny-llama", data)
    larger = tinymodel.cached_model(data) if model == "bench" else None
    catalog = sandbox_catalog(tiny, data.parent, bench_model=larger)
    repo_id = HUB_MODELS[model]
    repo = catalog.get("model", repo_id)
    main = repo.resolve("main") if repo else None
    if main is None:
        raise RuntimeError(f"bench: the sandbox Hub has no {repo_id}")
    return catalog, repo_id, main


def bench_hub(
    host: SandboxHost,
    work: Path,
    env: Mapping[str, str],
    model: str = "bench",
    link_mbit_s: float = HUB_LINK_MBIT_S,
) -> dict[str, Any]:
    """Issue 11's row: the same job twice on a public model of the SIMULATED Hub, over a SIMULATED link of
    `link_mbit_s`; the second finds the model in the host's shared cache. Submit-to-first-step of each, the
    bytes the Hub served for each, the model's size and the link rate."""
    catalog, repo_id, main = hub_model(work, model)
    rate = round(link_mbit_s * 1_000_000 / 8)  # bytes per second
    spec = write_spec(work, {"model_name_or_path": repo_id, "max_steps": SUBMIT_STEPS}, name="hub.yaml")
    with spawn(catalog) as hub:
        hub.set_rate(rate)
        hub_env = {**env, "HF_ENDPOINT": hub.url}
        first = submit_once(host, spec, hub_env)
        served_first = hub.bytes_served(repo_id)
        second = submit_once(host, spec, hub_env)
        served_second = hub.bytes_served(repo_id) - served_first
    model_bytes = sum(f.size for f in main.files)
    return {
        "model": repo_id,
        "model_bytes": model_bytes,
        "link_mbit_s": link_mbit_s,
        "link_bytes_per_s": rate,
        "download_at_link_s": model_bytes / rate,  # what the link alone costs the first job
        "first": first,
        "second": second,
        "first_step_s": [first["first_step_s"], second["first_step_s"]],
        "hub_bytes_first": served_first,
        "hub_bytes_second": served_second,
        "second_over_first": second["first_step_s"] / first["first_step_s"],
    }


# --- watch ------------------------------------------------------------------------------------------------
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


def _interruptible() -> None:
    """SIGINT as at a terminal: a bench started in the background (`... &` in a script, nohup) ignores SIGINT
    and its children inherit that, so a Python child would never turn the SIGINT below into Ctrl-C (runs
    before 21:30 UTC on 2026-12-03 recorded "no exit within 30 s of SIGINT" for this reason alone)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def bench_watch(host: SandboxHost, work: Path, env: Mapping[str, str], window_s: float) -> dict[str, Any]:
    """Host CPU of everything outside the job, over `window_s` without and then with `radeonlab watch`."""
    spec = write_spec(work, {"max_steps": LONG_STEPS, "save_steps": LONG_STEPS}, name="long.yaml")
    answer = json.loads(cli(env, "submit", str(spec), "-i", INVENTORY, "--host", host.name, "--json").stdout)
    job_id, job = answer["id"], answer["remote_dir"]
    wait_file(host, f"{job}/output/trainer_log.jsonl")
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
    watcher = subprocess.Popen([exe, "watch", job_id, "-i", INVENTORY], cwd=REPO, env=dict(env),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               preexec_fn=_interruptible)  # fmt: skip
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
    cli(env, "cancel", job_id, "-i", INVENTORY, check=False)
    return {
        "watcher_stopped": stopped,
        "window_s": window_s,
        "idle_cpu_s_per_min": idle,
        "watching_cpu_s_per_min": watching,
        "watch_cost_cpu_s_per_min": watching - idle,
        "watch_cost_share_of_one_core": (watching - idle) / 60,
    }

"""The README's main-job demo on a SIMULATED workstation: provision, submit, watch, fetch, try the adapter.

    radeonlab sandbox demo [--keep]          (scripts/demo.sh runs it after scripts/bootstrap.sh)

1. serve the simulated AMD apt repo and the local wheel index, create one sandbox host `ws1` with a simulated
   RX 7900 XTX, provision it with `pyinfra -y inventories/sandbox.py deploy/setup.py` (real SSH);
2. make the tiny base model (random weights: a stand-in, it knows nothing) and the "uppercase the word" data
   beside a copy of jobs/examples/demo.yaml;
3. `radeonlab submit`, `radeonlab watch`, `radeonlab fetch --try`, exactly as a user types them;
4. print the loss curve from the fetched trainer_log.jsonl and the adapter's answer;
5. destroy the sandbox (unless --keep). Its state lives in its own dir, apart from the tests' sandboxes.

Training runs on the host's CPU (torch there is a CPU build standing in for ROCm torch).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path
from typing import TypedDict

from radeonlab.cli.views import sparkline
from radeonlab.jobs.host import metrics
from radeonlab.sandbox import demodata, reap, tinymodel
from radeonlab.sandbox.hosts import Sandbox
from radeonlab.sandbox.provision import INVENTORY, provision_host, sandbox_env


class DemoSettings(TypedDict):
    """What one `radeonlab sandbox demo` run uses (DEMO below)."""

    state_dir: Path
    host: str
    card: str
    spec: Path
    overrides: dict[str, object]
    word: str
    sparkline_width: int


DEMO: DemoSettings = {
    "state_dir": Path(os.environ.get("RADEONLAB_DEMO_DIR", "/var/tmp/radeonlab-demo")),
    "host": "ws1",
    "card": "rx7900xtx",
    "spec": Path(str(resources.files("radeonlab.jobs.examples").joinpath("demo.yaml"))),
    # demo.yaml's 40 steps show the loss falling (8 -> ~2.5) but the tiny random model answers nothing yet;
    # ~300 steps at this size teach it the task (docs/notes/llamafactory-cpu.md: loss 0.53, apple -> APPLE).
    "overrides": {"max_steps": 300},
    # alpaca: instruction, newline, input (`\n` typed as in a shell; fetch --try turns it into a newline).
    # A word of the demo data: the tokenizer was trained on those words only (so "apple" is not one).
    "word": "garden",
    "sparkline_width": 60,
}


def write_spec(work: Path, overrides: dict[str, object], name: str = "demo.yaml") -> Path:
    """A copy of demo.yaml in `work` with some top-level values replaced."""
    text = Path(DEMO["spec"]).read_text()
    for key, value in overrides.items():
        text, n = re.subn(rf"(?m)^{key}:.*$", f"{key}: {value}", text)
        if n != 1:
            raise SystemExit(f"demo: {DEMO['spec']} has no single `{key}:` line to override")
    work.mkdir(parents=True, exist_ok=True)
    (work / name).write_text(text)
    return work / name


def write_job_folder(work: Path, overrides: dict[str, object] | None = None) -> Path:
    """The demo spec (demo.yaml with the overrides), its data and the tiny model, in `work`."""
    spec = write_spec(work, DEMO["overrides"] if overrides is None else overrides)
    data = demodata.write_dataset(work / "data")
    if not (work / "tiny-llama" / "model.safetensors").exists():
        tinymodel.build_model(work / "tiny-llama", data)
    return spec


def loss_report(trainer_log: Path) -> tuple[str, list[metrics.LogPoint]]:
    points = [
        p for p in map(metrics.parse_line, trainer_log.read_text().splitlines()) if p and p.loss is not None
    ]
    losses = [p.loss for p in points if p.loss is not None]  # all of them (points have a loss): typed float
    lines = [f"loss per step ({len(points)} steps): {sparkline(losses, DEMO['sparkline_width'])}"]
    every = max(1, len(points) // 10)
    lines += [f"  step {p.step:4d}  loss {p.loss:.4f}" for p in points[::every]]
    if points and points[-1] is not points[::every][-1]:
        lines.append(f"  step {points[-1].step:4d}  loss {points[-1].loss:.4f}")
    return "\n".join(lines), points


def radeonlab(args: list[str], env: dict[str, str], echo: bool = True) -> str:
    """Run the `radeonlab` command as a user would; its output goes to the console and is returned."""
    exe = str(Path(sys.executable).with_name("radeonlab"))
    print(f"\n$ radeonlab {' '.join(args)}", flush=True)
    proc = subprocess.Popen([exe, *args], env=env, stdout=subprocess.PIPE, text=True)
    out = []
    assert proc.stdout is not None
    for line in proc.stdout:
        out.append(line)
        if echo:
            print(line, end="", flush=True)
    if proc.wait() != 0:
        raise SystemExit(f"demo: `radeonlab {args[0]}` failed (exit {proc.returncode})")
    return "".join(out)


def run(keep: bool = False) -> int:
    t0 = time.monotonic()
    state = Path(DEMO["state_dir"])
    reap.reap_stale()
    sbx = Sandbox(state)
    reap.claim(state)  # a demo killed half-way leaves hosts the next run removes
    timings: dict[str, float] = {}
    try:
        sbx.ensure_base()
        print(
            f"demo: provisioning sandbox host {DEMO['host']} (simulated {DEMO['card']}) over SSH ...",
            flush=True,
        )
        done = provision_host(sbx, str(DEMO["host"]), str(DEMO["card"]), quiet=False)
        timings["provisioning"] = done.seconds
        spec = write_job_folder(state / "job")
        env = {**sandbox_env(sbx), "RADEONLAB_HOME": str(state / "laptop")}
        inv = ["-i", INVENTORY]
        t_submit = time.monotonic()
        out = radeonlab(["submit", str(spec), *inv, "--host", str(DEMO["host"])], env)
        job_id = re.search(r"submitted (\S+) to", out).group(1)  # type: ignore[union-attr]
        watched = radeonlab(["watch", job_id, *inv], env)
        timings["submit_to_end_of_training"] = time.monotonic() - t_submit
        first = re.search(r"first logged step (\d+)s after submit", watched)
        results = state / "results" / job_id  # fetch --to DIR puts a job's files in DIR/JOB
        prompt = f"{demodata.INSTRUCTION}\\n{DEMO['word']}"
        fetched = radeonlab(["fetch", job_id, *inv, "--to", str(results.parent), "--try", prompt], env)
        report, points = loss_report(results / "output/trainer_log.jsonl")
        answer = re.search(r"adapter's answer: (.*)", fetched)
        print("\n" + report)
        got = answer.group(1) if answer else "?"
        want = str(DEMO["word"]).upper()
        print(f"\nthe adapter, asked {prompt!r} on the host, answers {got!r} (the data says {want!r})")
        timings["demo_wall"] = time.monotonic() - t0
        print(
            f"\ndemo wall time {timings['demo_wall']:.0f}s: provisioning {timings['provisioning']:.0f}s, "
            f"submit to first logged step {first.group(1) if first else '?'}s, "
            f"submit to end of training {timings['submit_to_end_of_training']:.0f}s; "
            f"loss {points[0].loss:.2f} -> {points[-1].loss:.2f}"
        )
    finally:
        if keep:
            reap.keep(state)
            print(
                f"demo: kept the sandbox in {state} (RADEONLAB_SANDBOX_DIR={state}; "
                f"`radeonlab sandbox --state-dir {state} down` removes it)"
            )
        else:
            sbx.destroy_all()
    return 0

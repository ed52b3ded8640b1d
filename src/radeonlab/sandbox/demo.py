"""The README's main-job demo on a SIMULATED workstation: provision, submit, watch, fetch, try the adapter.

    radeonlab sandbox demo [--keep]          (scripts/demo.sh runs it after scripts/bootstrap.sh)

1. serve the simulated AMD apt repo and the local wheel index, create one sandbox host `ws1` with a simulated
   RX 7900 XTX, provision it with `pyinfra -y inventories/sandbox.py deploy/setup.py` (real SSH);
2. make the tiny base model (random weights: a stand-in, it knows nothing) and the "uppercase the word" data
   beside a copy of jobs/examples/demo.yaml;
3. `radeonlab submit`, `radeonlab watch`, `radeonlab fetch --try`, exactly as a user types them;
4. one closing block: what was trained (model, LoRA settings, rows, steps, precision), the loss curve, where
   the adapter is, what it answered, and how long each phase took (they add up to the wall time);
5. destroy the sandbox host (unless --keep) and say what is left and how to remove it.

What it prints stays short (under 60 lines): one line per phase (a live status line on a terminal), pyinfra's
and the commands' output in log files under STATE/logs (named, with their last lines, on a failure), and
`radeonlab watch`'s live panel on a terminal (one line per 10 % of the steps otherwise). STATE is the
sandbox's state dir (`radeonlab sandbox --state-dir`, $RADEONLAB_SANDBOX_DIR); the demo refuses one that
holds other hosts.

Training runs on the host's CPU (torch there is a CPU build standing in for ROCm torch).
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import TypedDict

import yaml
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from radeonlab.cli.views import sparkline
from radeonlab.jobs.host import metrics
from radeonlab.sandbox import config, demodata, reap, tinymodel
from radeonlab.sandbox.hosts import Sandbox, SandboxError
from radeonlab.sandbox.provision import INVENTORY, provision_host, sandbox_env


class DemoSettings(TypedDict):
    """What one `radeonlab sandbox demo` run uses (DEMO below)."""

    host: str
    card: str
    spec: Path
    overrides: dict[str, object]
    word: str
    sparkline_width: int


DEMO: DemoSettings = {
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


class Phases:
    """The demo's phases, one after the other from the start: each prints one line when it ends (its time and
    a detail), and on a terminal a live status line while it runs. Their times add up to the wall time."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.t0 = self.mark = time.monotonic()
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(self, name: str, live: bool = True) -> Iterator[dict[str, str]]:
        detail = {"text": ""}
        status: contextlib.AbstractContextManager[object]
        if self.console.is_terminal and live:  # a spinner and the time so far, gone when the phase ends
            status = Progress(
                SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=self.console,
                transient=True,
            )  # fmt: skip
            status.add_task(f"{name} ...", total=None)
        else:
            self.console.print(f"demo: {name} ...", highlight=False, soft_wrap=True)
            status = contextlib.nullcontext()
        with status:
            yield detail
        now = time.monotonic()
        self.seconds[name] = now - self.mark
        self.mark = now
        more = f" ({detail['text']})" if detail["text"] else ""
        self.console.print(
            f"demo: {name}: done in {self.seconds[name]:.0f}s{more}", highlight=False, soft_wrap=True
        )

    def summary(self) -> str:
        wall = time.monotonic() - self.t0
        parts = ", ".join(f"{k} {v:.0f}s" for k, v in self.seconds.items())
        return f"wall time {wall:.0f}s = {parts}"


def radeonlab(
    args: list[str], env: dict[str, str], log: Path, *, attached: bool = False, echo: bool = False
) -> str:
    """Run the `radeonlab` command as a user would. Its output goes to `log` and is returned; `attached`:
    stdout stays the demo's own (the terminal: `watch` draws its live panel there); `echo`: its stdout lines
    are also printed as they come. On failure: the log's path and its last 20 lines."""
    exe = str(Path(sys.executable).with_name("radeonlab"))
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as sink:
        sink.write(f"$ radeonlab {' '.join(args)}\n")
        sink.flush()
        stdout = None if attached else subprocess.PIPE if echo else sink
        proc = subprocess.Popen([exe, *args], env=env, stdout=stdout, stderr=sink, text=True)
        for line in proc.stdout or ():
            sink.write(line)
            print(line, end="", flush=True)
        proc.wait()
    out = log.read_text()
    if proc.returncode != 0:
        tail = "\n".join(out.splitlines()[-20:])
        raise SystemExit(f"demo: `radeonlab {args[0]}` failed (exit {proc.returncode}); {log}:\n{tail}")
    return out


def trained(spec: Path, rows: int) -> str:
    """What was trained, from the spec the job ran."""
    s = yaml.safe_load(spec.read_text())
    precision = "bf16" if s.get("bf16") else "fp16" if s.get("fp16") else "fp32"
    return (
        f"{s['model_name_or_path']} (SIMULATED stand-in, random weights), {s['finetuning_type']} rank "
        f"{s['lora_rank']} alpha {s['lora_alpha']} on {s['lora_target']} modules, {rows} rows of "
        f"{s['dataset']}, {s['max_steps']} steps, {precision}"
    )


def check_state(sbx: Sandbox) -> None:
    others = sorted(set(sbx.hosts) - {str(DEMO["host"])})
    if others:
        raise SystemExit(
            f"demo: {sbx.state_dir} holds other sandbox hosts ({', '.join(others)}); give the demo "
            f"a state dir of its own: RADEONLAB_SANDBOX_DIR=/var/tmp/radeonlab-demo"
        )


def run(state: Path, keep: bool = False) -> int:
    console = Console(highlight=False)
    phases = Phases(console)
    logs = state / "logs"
    reap.reap_stale()
    sbx = Sandbox(state)
    check_state(sbx)
    reap.claim(state)  # a demo killed half-way leaves hosts the next run removes
    logs.mkdir(parents=True, exist_ok=True)
    host = DEMO["host"]
    closing: list[str] = []
    try:
        with phases.phase("sandbox base system") as d:
            sbx.ensure_base()
            d["text"] = f"STATE is {state}"
        with phases.phase(f"provision {host} (simulated {DEMO['card']}) with pyinfra over SSH") as d:
            d["text"] = "pyinfra's output: STATE/logs/provision.log"
            try:
                provision_host(sbx, host, DEMO["card"], log=logs / "provision.log")
            except SandboxError as exc:
                raise SystemExit(f"demo: {exc}") from None
        with phases.phase("tiny model and data") as d:
            spec = write_job_folder(state / "job")
            rows = len((state / "job" / "data" / "demo.jsonl").read_text().splitlines())
            d["text"] = "in STATE/job"
        env = {**sandbox_env(sbx), "RADEONLAB_HOME": str(state / "laptop")}
        inv = ["-i", INVENTORY]
        with phases.phase("radeonlab submit") as d:
            out = radeonlab(["submit", str(spec), *inv, "--host", host], env, logs / "submit.log")
            job_id = re.search(r"submitted (\S+) to", out).group(1)  # type: ignore[union-attr]
            d["text"] = f"job {job_id}"
        # On a terminal watch draws its panel in place (no status line over it); else a line per 10 %.
        tty = console.is_terminal
        with phases.phase(f"radeonlab watch {job_id}", live=False):
            watch_args = ["watch", job_id, *inv] + ([] if tty else ["--every", "10"])
            radeonlab(watch_args, env, logs / "watch.log", attached=tty, echo=not tty)
        results = state / "results" / job_id  # fetch --to DIR puts a job's files in DIR/JOB
        prompt = f"{demodata.INSTRUCTION}\\n{DEMO['word']}"
        with phases.phase("radeonlab fetch --try") as d:
            fetched = radeonlab(
                ["fetch", job_id, *inv, "--to", str(results.parent), "--try", prompt], env, logs / "fetch.log"
            )
            d["text"] = "output: STATE/logs/fetch.log"
        _, points = loss_report(results / "output/trainer_log.jsonl")
        answer = re.search(r"adapter's answer: (.*)", fetched)
        adapters = sorted(results.rglob("adapter_config.json"))
        closing = [
            f"trained:  {trained(spec, rows)}",
            f"loss:     {points[0].loss:.2f} -> {points[-1].loss:.2f}  "
            f"{sparkline([p.loss or 0.0 for p in points], DEMO['sparkline_width'])}",  # each point has a loss
            f"adapter:  {adapters[0].parent if adapters else results}",
            f"asked:    {prompt!r} on the host",
            f"answered: {answer.group(1) if answer else '?'!r} (the data says {DEMO['word'].upper()!r})",
        ]
    finally:
        if keep:
            reap.keep(state)
            left = f"kept host {host}: `radeonlab sandbox --state-dir {state} down` removes it"
        else:
            with phases.phase(f"remove sandbox host {host}"):
                sbx.destroy_all()
            left = "no host left"
        closing += [
            f"state:    {state} ({left})",
            f"          `rm -rf {state}` removes it (job, results, logs, served files); "
            f"the shared cache {config.CACHE_DIR} stays",
        ]
        print("\n" + "\n".join(["demo: " + phases.summary(), *closing]), flush=True)
    return 0

"""The checker's worst cases (issue 26 item 6): inputs made to hang or exhaust `radeonlab check`, each run in
a subprocess, its wall time and peak resident memory recorded against the goal: any spec under 1 MB checks in
at most 2 s and 200 MB. Reported, never asserted (timings are not tests; tests/unit/test_bench_checker.py only
runs the section):

    .venv/bin/python -m tests.bench.checker --out checker.json     # this section alone, its table printed
    .venv/bin/python -m tests.bench.run --out b.json --only checker
    .venv/bin/python -m tests.bench.checker --markdown tests/bench/last-run-checker.json --write-docs

No sandbox host: `check --no-hub` reads the spec and its data on the laptop only. Each case is measured by a
small wrapper process (MEASURE) that starts `radeonlab check` and reads RUSAGE_CHILDREN after it: the peak
is the command's own, not the bench's (see tests/support/peak_rss.py for why), and the wall time is from the
wrapper's start of the command to its end, Python's start-up included, as a user waits for it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from radeonlab.sandbox import demodata
from radeonlab.sandbox.demo import write_spec
from tests.unit.test_bad_inputs import ALIAS_BOMB, HUB_ENV, LOOP_BOMB, _dev_zero, _fifo

GOALS = {"wall_s": 2.0, "max_rss_mb": 200.0}  # at most, for any spec under 1 MB (issue 26 item 6)
SPEC_LIMIT = 1 << 20  # the goal's "under 1 MB"
SAID_CHARS = 160  # of the first line check printed, in the table
GUARD_S = 60.0  # a case still running then is killed and recorded as such: a hang is a result, not a stall
MEASURE = (
    "import json, resource, subprocess, sys, time\n"
    "start = time.perf_counter()\n"
    "with open(sys.argv[1] + '.out', 'wb') as out:\n"
    "    code = subprocess.call(sys.argv[2:], stdout=out, stderr=subprocess.STDOUT)\n"
    "wall = time.perf_counter() - start\n"
    "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024\n"  # KiB -> MB
    "open(sys.argv[1], 'w').write(json.dumps({'exit': code, 'wall_s': wall, 'max_rss_mb': peak}))\n"
)


def _spec_text(folder: Path) -> str:
    """The demo spec (a dataset beside it): what every case starts from or adds to."""
    spec = write_spec(folder, {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "max_steps": 5})
    demodata.write_dataset(folder / "data")
    return spec.read_text()


def _text(make: Callable[[str], str]) -> Callable[[Path], Path]:
    """A case written as text from the demo spec's text."""

    def case(folder: Path) -> Path:
        (folder / "spec.yaml").write_text(make(_spec_text(folder)))
        return folder / "spec.yaml"

    return case


def _many_keys(size: int) -> Callable[[str], str]:
    """The demo spec padded with unknown keys (each an error with did-you-mean) to `size` bytes."""

    def make(base: str) -> str:
        lines, n = [base], len(base.encode())
        i = 0
        while n < size - 40:
            line = f"lora_rank_{i:06d}: {i}\n"
            lines.append(line)
            n += len(line)
            i += 1
        return "".join(lines)

    return make


def _huge_row(folder: Path) -> Path:
    """A spec of a few hundred bytes whose dataset is one 50 MB JSON row (tests/unit/test_bad_inputs'
    case)."""
    (folder / "spec.yaml").write_text(_spec_text(folder))
    big = json.dumps({"instruction": "a" * (50 << 20), "input": "", "output": "A"})
    (folder / "data" / demodata.FILE_NAME).write_text(big + "\n")
    return folder / "spec.yaml"


def _deep_dataset_info(folder: Path) -> Path:
    (folder / "spec.yaml").write_text(_spec_text(folder))
    (folder / "data" / "dataset_info.json").write_text("[" * 200_000 + "]" * 200_000)
    return folder / "spec.yaml"


LOOPS = "{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}"
# name -> (what it is, how it is made); every spec here is under 1 MB (SPEC_LIMIT), a FIFO or a device
CASES: dict[str, tuple[str, Callable[[Path], Path]]] = {
    "fifo": ("the spec is a FIFO nobody writes to", _fifo),
    "dev-zero": ("the spec is a link to /dev/zero", _dev_zero),
    "alias-bomb": ("YAML aliases, 9**10 values from 11 lines", _text(lambda _: ALIAS_BOMB)),
    "jinja-loop-bomb": ("nested Jinja loops, 10**8 steps", _text(lambda _: LOOP_BOMB)),
    "jinja-loop-in-spec": ("the same loops in a comment of a valid spec",
                           _text(lambda b: b + f"# {LOOPS}\n")),
    "jinja-string-product": ("a Jinja string 'x' * 10**10",
                             _text(lambda b: b + "k: {{ 'x' * 10000000000 }}\n")),
    "many-keys-255k": ("255 KiB of unknown keys (under the 256 KiB spec limit)",
                       _text(_many_keys(255 << 10))),
    "many-keys-1m": ("1 MB - 1 byte of keys (over the spec limit)", _text(_many_keys(SPEC_LIMIT - 1))),
    "deep-flow-nesting": ("YAML [[[...]]] 100000 deep",
                          _text(lambda b: b + "k: " + "[" * 100_000 + "]" * 100_000)),
    "deep-block-nesting": ("YAML block mappings 200 deep",
                           _text(lambda b: b + "".join(" " * i + f"k{i}:\n" for i in range(200)))),
    "deep-dataset-info": ("dataset_info.json [[[...]]] 200000 deep", _deep_dataset_info),
    "many-dataset-names": ("dataset: 20000 names, none defined",
                           _text(lambda b: b.replace("dataset: demo", "dataset: " + ",".join(
                               f"d{i}" for i in range(20_000))))),
    "huge-dataset-row": ("a small spec whose dataset is one 50 MB row", _huge_row),
}  # fmt: skip


def measure(spec: Path, guard_s: float = GUARD_S) -> dict[str, Any]:
    """`radeonlab check SPEC --no-hub` in the MEASURE wrapper: exit code, wall time, peak RSS, last line."""
    exe = str(Path(sys.executable).with_name("radeonlab"))
    with tempfile.TemporaryDirectory(prefix="rl-bench-check-") as tmp:
        out = Path(tmp) / "m.json"
        argv = [sys.executable, "-c", MEASURE, str(out), exe, "check", str(spec), "--no-hub"]
        # its own session: at the guard the wrapper and the check it started are killed together
        proc = subprocess.Popen(argv, env={**os.environ, **HUB_ENV}, start_new_session=True)
        try:
            proc.wait(timeout=guard_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return {
                "exit": None,
                "wall_s": guard_s,
                "max_rss_mb": None,
                "said": f"killed after {guard_s:g} s",
            }
        result: dict[str, Any] = json.loads(out.read_text())
        with open(f"{out}.out", errors="replace") as said:
            first = said.readline().strip()  # the first finding (the last line is the summary)
    result["said"] = first.replace(str(spec.parent) + "/", "")[:SAID_CHARS]
    return result


def bench_checker(rounds: int = 3, cases: list[str] | None = None) -> dict[str, Any]:
    """Each case `rounds` times (median wall time, largest peak), with its size and the goal beside it."""
    out: dict[str, Any] = {"goals": GOALS, "rounds": rounds, "cases": {}}
    for name in cases or list(CASES):
        what, make = CASES[name]
        runs = []
        for _ in range(rounds):
            with tempfile.TemporaryDirectory(prefix="rl-bench-check-") as tmp:
                spec = make(Path(tmp))
                size = spec.stat().st_size if spec.is_file() else 0
                runs.append(measure(spec))
        walls = [r["wall_s"] for r in runs]
        peaks = [r["max_rss_mb"] for r in runs if r["max_rss_mb"] is not None]
        out["cases"][name] = {
            "what": what,
            "spec_bytes": size,
            "exit": runs[-1]["exit"],
            "said": runs[-1]["said"],
            "wall_s": walls,
            "median_wall_s": statistics.median(walls),
            "max_rss_mb": max(peaks) if peaks else None,
        }
        print(
            f"checker {name}: {out['cases'][name]['median_wall_s']:.2f} s, {max(peaks or [0]):.0f} MB",
            flush=True,
        )
    return out


def table_rows(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(what, measured, goal) per case, for the bench's table (tests/bench/report.py)."""
    goals, rows = result["goals"], []
    for name, c in result["cases"].items():
        wall, rss = c["median_wall_s"], c["max_rss_mb"]
        met = (
            c["exit"] is not None
            and wall <= goals["wall_s"]
            and rss is not None
            and rss <= goals["max_rss_mb"]
        )
        size = f", {c['spec_bytes'] / 1024:.0f} KiB" if c["spec_bytes"] else ""
        rows.append((
            f"check: {name}",
            f"{c['what']}{size}: exit {c['exit']}, `{c['said']}`",
            f"**{wall:.2f} s, {rss or 0:.0f} MB** (median of {len(c['wall_s'])}, peak); goal <= "
            f"{goals['wall_s']:g} s and <= {goals['max_rss_mb']:g} MB: {'met' if met else 'missed'}",
        ))  # fmt: skip
    return rows


# docs/benchmarks.md holds markdown() of LAST_RUN between these markers (`--markdown JSON --write-docs` makes
# JSON the last run and generates the page again; tests/unit/test_bench_checker.py fails when they disagree)
LAST_RUN = Path(__file__).resolve().parent / "last-run-checker.json"
BEGIN, END = "<!-- bench-checker:begin -->", "<!-- bench-checker:end -->"


def markdown(result: dict[str, Any]) -> str:
    """The checker's table for docs/benchmarks.md, from a run's JSON, with the machine and its load."""
    m = result.get("machine", {})
    head = (
        f"Run of {m.get('date', '?')} on {m.get('cpu', '?')}, {m.get('cpus', '?')} cores; load average "
        f"{m.get('load_start', '?')} at the start, {m.get('load_end', '?')} at the end.\n\n"
    )
    lines = ["| what | measured | time and peak |", "|---|---|---|"]
    pipe = "\\|"  # a `|` in a message would end the cell
    lines += [f"| {a} | {b.replace('|', pipe)} | {c} |" for a, b, c in table_rows(result["checker"])]
    return head + "\n".join(lines)


def docs_table(text: str) -> str:
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the results here as JSON")
    parser.add_argument("--markdown", type=Path, metavar="JSON", help="print the docs table of a run's JSON")
    parser.add_argument("--write-docs", action="store_true", help="with --markdown: into docs/benchmarks.md")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default=",".join(CASES), help="cases to run, comma-separated")
    args = parser.parse_args(argv)
    if args.markdown:
        table = markdown(json.loads(args.markdown.read_text()))
        if args.write_docs:
            from tests.bench import report  # report imports this module: imported here, not at the top

            if args.markdown.resolve() != LAST_RUN:
                LAST_RUN.write_text(args.markdown.read_text())
            report.write_docs(json.loads(report.LAST_RUN.read_text()))
        print(table)
        return
    if args.out is None:
        parser.error("--out is required")
    from tests.bench.run import machine  # run.py registers this section: imported here, not at the top

    result: dict[str, Any] = {"machine": machine()}
    result["checker"] = bench_checker(args.rounds, args.only.split(","))
    result["machine"]["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for what, measured, goal in table_rows(result["checker"]):
        print(f"{what:28} {measured}  {goal.replace('**', '')}")


if __name__ == "__main__":
    main()

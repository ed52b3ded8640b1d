"""The bench's report, made only from its JSON: the table printed after a run, and the whole of
docs/benchmarks.md (`python -m tests.bench.report > docs/benchmarks.md`, from tests/bench/last-run-full.json;
tests/unit/test_bench_report.py fails when the committed page differs from that). Each row says its
measurement, its ratio within the run (or why it is an absolute value) and, where an issue sets one, the goal
and by how much it is met or missed.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from tests.bench import checker, provisioning

# The goals, keyed by the JSON value they judge ("section.key"; data's per size): "<=" or ">=", the goal and
# the issue that set it. Reported against, never asserted (timings are not tests); the bench writes each
# section's goals into its JSON beside the values.
GOALS: dict[str, dict[str, Any]] = {
    "provisioning.over_ansible_first": {"op": "<=", "goal": provisioning.GOALS["first"], "issue": 28},
    "provisioning.over_ansible_noop": {"op": "<=", "goal": provisioning.GOALS["noop"], "issue": 28},
    "data.upload_over_scp": {"op": ">=", "goal": 1.2, "issue": 28},
    "data.fetch_over_scp": {"op": ">=", "goal": 1.2, "issue": 28},
    "data.reupload_over_scp_s": {"op": "<=", "goal": 0.2, "issue": 15},  # with 0 bytes sent
    # submit -> first step, minus LLaMA-Factory's own part (its exec -> its first step); runs before
    # 2026-12-03 21:00 subtracted its logged start-up instead, and reported its import apart
    "submit.median_lf_exec_s": {"op": "<=", "goal": 3.0, "issue": 15},
    # a second job on a Hub model the host has cached reaches its first step in at most 0.7x the first's time
    "hub.second_over_first": {"op": "<=", "goal": 0.7, "issue": 11},
    "watch.watch_cost_share_of_one_core": {"op": "<=", "goal": 0.01, "issue": 15},
    "models_pull.hub_bytes_over_model_bytes": {"op": "<=", "goal": 1.05, "issue": 28},
    "models_pull.fanout_over_raw_stream": {"op": ">=", "goal": 0.9, "issue": 28},
    # each worst-case input of `check` (a spec under 1 MB), per case: tests/bench/checker.py judges them
    "checker.wall_s": {"op": "<=", "goal": checker.GOALS["wall_s"], "issue": 26},
    "checker.max_rss_mb": {"op": "<=", "goal": checker.GOALS["max_rss_mb"], "issue": 26},
}
# Rows whose key a run may lack (runs before issue 28): the page says "not measured yet" for them.
NEW_ROWS = {
    "models_pull.hub_bytes_over_model_bytes": "models pull to 3 hosts: Hub bytes",
    "models_pull.fanout_over_raw_stream": "LAN fan-out vs raw stream",
}


def judged(key: str, value: float, unit: str = "") -> str:
    """verdict() against GOALS[key]."""
    g = GOALS[key]
    return verdict(value, g["goal"], g["op"] == ">=", unit)


def verdict(value: float, goal: float, at_least: bool, unit: str = "") -> str:
    """ "goal >= 1.2: met" or "goal >= 1.2: missed by 0.31x"."""
    sign = ">=" if at_least else "<="
    met = value >= goal if at_least else value <= goal
    gap = f"{abs(goal - value):.2f}{unit}" if unit != "share" else f"{abs(goal - value):.3f}"
    return f"goal {sign} {goal}{'' if unit == 'share' else unit}: " + ("met" if met else f"missed by {gap}")


def _data_rows(d: dict[str, Any]) -> list[tuple[str, str, str]]:
    out = []
    for mb, s in d["sizes"].items():
        r = s["mb_per_s"]
        up, down = s["upload_over_scp"], s["fetch_over_scp"]
        again, again_s = s["reupload_over_scp_s"], s["reupload_s"]
        out += [
            (f"upload {mb} MB", f"upload_blobs {r['upload_blobs']:.0f} MB/s (raw exec stream "
             f"{r['raw_up']:.0f}, {s['raw_up_over_scp']:.2f}x); scp {r['scp_up']:.0f} MB/s",
             f"**{up:.2f}x scp**; {judged('data.upload_over_scp', up, 'x')}"),
            (f"fetch {mb} MB", f"fetch {r['fetch']:.0f} MB/s (raw exec stream {r['raw_down']:.0f}, "
             f"{s['raw_down_over_scp']:.2f}x); scp {r['scp_down']:.0f} MB/s",
             f"**{down:.2f}x scp**; {judged('data.fetch_over_scp', down, 'x')}"),
            (f"re-upload unchanged {mb} MB", f"{s['reupload_bytes_sent']} bytes sent in {again_s:.2f}s",
             f"**{again:.3f}x** one scp's time; {judged('data.reupload_over_scp_s', again, 'x')}"),
        ]  # fmt: skip
    return out


def _submit_rows(s: dict[str, Any]) -> list[tuple[str, str, str]]:
    phases = ", ".join(f"{k} {v:.2f}" for k, v in s["phases_s"].items())
    lf_import = statistics.median(s["lf_import_s"])
    rounds = len(s.get("rounds", [])) or "?"
    measured = (
        f"median of {rounds}: first train.log line {s['median_first_log_line_s']:.1f}s, first step "
        f"{s['median_first_step_s']:.1f}s after submit; LLaMA-Factory start-up (train.log) "
        f"{s['median_lf_startup_s']:.1f}s; its import measured apart {lf_import:.1f}s"
    )
    if "median_lf_exec_s" in s:  # runs since the launcher's child start time was read
        measured += (
            f"; LLaMA-Factory's process started {s['median_lf_exec_s']:.1f}s after submit, its own "
            f"exec -> first step {s['median_lf_own_s']:.1f}s"
        )
        share = s["median_lf_exec_s"] / s["median_first_step_s"]
        ratio = (
            f"minus LF's own **{s['median_lf_exec_s']:.1f} s** ({share:.2f} of submit -> first step, the "
            f"rest LLaMA-Factory's own); {judged('submit.median_lf_exec_s', s['median_lf_exec_s'], ' s')} "
            f"(absolute: issue 15 sets seconds); minus only its logged start-up "
            f"{s['median_overhead_s']:.1f} s"
        )
    else:
        ratio = (
            f"minus LF start-up **{s['median_overhead_s']:.1f} s**; "
            f"{judged('submit.median_lf_exec_s', s['median_overhead_s'], ' s')}; "
            f"minus its import too {s['overhead_minus_import_s']:.1f} s"
        )
    return [
        ("submit phases (s)", f"{phases}; `submit` returns after {s['median_submit_s']:.2f}",
         "absolute: radeonlab's own steps (laptop checks, one staging round trip) have no baseline"),
        ("submit -> first step", measured, ratio),
    ]  # fmt: skip


def _hub_rows(h: dict[str, Any]) -> list[tuple[str, str, str]]:
    a, b = h["first"], h["second"]
    ratio = h["second_over_first"]
    # runs from before the model size and link rate were recorded show the row without them
    model = h["model"]
    if "model_bytes" in h:
        model += f" ({h['model_bytes'] / 1e6:.1f} MB, SIMULATED {h['link_mbit_s']:g} Mbit/s link)"
    return [
        ("Hub model: 2nd job vs 1st", f"{model}: first step {a['first_step_s']:.1f}s (Hub served "
         f"{h['hub_bytes_first']} bytes), then {b['first_step_s']:.1f}s ({h['hub_bytes_second']} bytes)",
         f"**{ratio:.2f}x** the first job's submit-to-first-step; "
         f"{judged('hub.second_over_first', ratio, 'x')}"),
    ]  # fmt: skip


def _watch_rows(w: dict[str, Any]) -> list[tuple[str, str, str]]:
    share = w["watch_cost_share_of_one_core"]
    return [
        ("watch cost on the host", f"{w['watching_cpu_s_per_min']:.2f} CPU-s/min outside the job while "
         f"watching, {w['idle_cpu_s_per_min']:.2f} without ({w['window_s']:.0f} s windows)",
         f"**{share:.4f} of one core**; {judged('watch.watch_cost_share_of_one_core', share, 'share')}"),
    ]  # fmt: skip


def _models_pull_rows(m: dict[str, Any]) -> list[tuple[str, str, str]]:
    over, fan = m["hub_bytes_over_model_bytes"], m["fanout_over_raw_stream"]
    once = "/".join(map(str, sorted(set(m["hub_downloads"].values()))))
    model = f"{m['model']} ({m['model_bytes'] / 1e6:.1f} MB, SIMULATED {m['link_mbit_s']:g} Mbit/s link)"
    pulled = (
        f"{model}: Hub served {m['hub_bytes']} bytes, each file sent whole {once} time(s); the pull took "
        f"{m['pull_s']:.1f}s: the Hub download at the link {m['download_at_link_s']:.1f}s, the fan-out "
        f"{m['fanout_s']:.1f}s (measured apart), the rest {m['rest_s']:.1f}s (CLI start, resolve, host "
        "records, tool starts)"
    )
    fanned = (
        f"copy to {m['hosts'] - 1} other host(s) at once {m['fanout_s']:.2f}s (the receivers check every "
        "file); "
        f"raw `cat` stream of the same bytes, relayed the same way {m['raw_stream_s']:.2f}s; the rest is "
        "the tools' start and the checks"
    )
    return [
        (f"models pull to {m['hosts']} hosts: Hub bytes", pulled,
         f"**{over:.3f}x** the model's bytes; {judged('models_pull.hub_bytes_over_model_bytes', over, 'x')}"),
        ("LAN fan-out vs raw stream", fanned,
         f"**{fan:.2f}x** the raw stream's speed; {judged('models_pull.fanout_over_raw_stream', fan, 'x')}"),
    ]  # fmt: skip


def rows(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(what, measured, ratio and goal) per row, for the sections the run measured."""
    out: list[tuple[str, str, str]] = []
    if "provisioning" in result:
        out += provisioning.table_rows(result["provisioning"])
    if "data" in result:
        out += _data_rows(result["data"])
    if "submit" in result:
        out += _submit_rows(result["submit"])
    if "hub" in result:
        out += _hub_rows(result["hub"])
    if "watch" in result:
        out += _watch_rows(result["watch"])
    if "models_pull" in result:
        out += _models_pull_rows(result["models_pull"])
    if "checker" in result:
        out += checker.table_rows(result["checker"])
    return out


def not_measured(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    """A row for each of NEW_ROWS that the run lacks: its goal, no number."""
    out = []
    for key, what in NEW_ROWS.items():
        section, name = key.split(".")
        if name not in result.get(section, {}):
            g = GOALS[key]
            out.append((what, "not measured yet (no run with this row)", f"goal {g['op']} {g['goal']}x"))
    return out


def table(result: dict[str, Any]) -> str:
    found = rows(result)
    width = max((len(r[1]) for r in found), default=10)
    lines = [f"{'what':28} {'measured':{width}}  ratio", "-" * (width + 48)]
    lines += [f"{a:28} {b:{width}}  {c.replace('**', '')}" for a, b, c in found]
    return "\n".join(lines)


def markdown(result: dict[str, Any]) -> str:
    """The benchmark table of docs/benchmarks.md, from a run's JSON, with the machine it ran on."""
    m = result.get("machine", {})
    head = (
        f"Run of {m.get('date', '?')} on {m.get('cpu', '?')}, {m.get('cpus', '?')} cores; load average "
        f"{m.get('load_start', '?')} at the start, {m.get('load_end', '?')} at the end"
        f"{' (--reduced)' if result.get('reduced') else ''}; total {result.get('total_s', 0):.0f} s"
        f"{'; cipher ' + result['data']['cipher'] if 'data' in result else ''}.\n\n"
    )
    lines = ["| what | measured | ratio |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows(result) + not_measured(result)]
    return head + "\n".join(lines)


# docs/benchmarks.md is page() of the committed full run: tests/bench/page.md's text with the table and, when
# they are about that run, tests/bench/last-run-notes.md's findings (tests/unit/test_bench_report.py fails
# when the committed page differs from page() of the committed JSON).
HERE = Path(__file__).resolve().parent
DOCS_PAGE = HERE.parents[1] / "docs" / "benchmarks.md"
LAST_RUN = HERE / "last-run-full.json"
TEMPLATE, NOTES = HERE / "page.md", HERE / "last-run-notes.md"
TABLE, FINDINGS = "<!-- bench:table -->", "<!-- bench:notes -->"
CHECKER = "<!-- bench:checker -->"  # the checker's own run (tests/bench/last-run-checker.json): laptop only


def findings(result: dict[str, Any], notes: str) -> str:
    """The notes' text when their first line names the run's date, else a line saying there are none: notes
    written for one run never stand under another run's table."""
    date = result.get("machine", {}).get("date", "")
    first, _, body = notes.partition("\n")
    if date and date in first:
        return body.strip()
    return f"No findings were written for the run of {date or '?'} yet: the table above is all it says."


def page(result: dict[str, Any], template: str | None = None, notes: str | None = None) -> str:
    """docs/benchmarks.md, whole, from a run's JSON."""
    text = TEMPLATE.read_text() if template is None else template
    text = text.replace(TABLE, markdown(result))
    text = text.replace(CHECKER, checker.markdown(json.loads(checker.LAST_RUN.read_text())))
    return text.replace(FINDINGS, findings(result, NOTES.read_text() if notes is None else notes))


def write_docs(result: dict[str, Any]) -> None:
    DOCS_PAGE.write_text(page(result))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="print docs/benchmarks.md, made from a bench run's JSON")
    parser.add_argument("json", nargs="?", type=Path, default=LAST_RUN, help="default: the committed run")
    args = parser.parse_args(argv)
    print(page(json.loads(args.json.read_text())), end="")


if __name__ == "__main__":
    main()

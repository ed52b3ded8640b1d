"""The checker's bench section (tests/bench/checker.py) runs and reports; its timings are reported against
issue 26's goal there, never asserted here (timings are not tests on a shared machine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench import checker, run
from tests.bench.report import rows

FAST = ("fifo", "dev-zero", "alias-bomb", "jinja-loop-bomb", "many-keys-1m")


def test_the_checker_section_runs_alone_without_a_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(checker, "CASES", {k: checker.CASES[k] for k in FAST})
    out = tmp_path / "bench.json"
    result = run.run(run.parse_args(["--only", "checker", "--reduced", "--out", str(out)]))
    assert json.loads(out.read_text()) == result and "errors" not in result, result.get("errors")
    cases = result["checker"]["cases"]
    assert list(cases) == list(FAST)
    said = {name: c["said"] for name, c in cases.items()}
    assert said["fifo"] == "spec.yaml:1: error: spec is a FIFO (named pipe), not a regular file: not read", (
        said
    )
    assert said["dev-zero"].endswith("spec is a character device, not a regular file: not read"), said
    assert "aliases expand the spec to more than 100000 values" in said["alias-bomb"], said
    assert "the template takes more than 100000 steps" in said["jinja-loop-bomb"], said
    assert said["many-keys-1m"] == "spec.yaml:1: error: spec is larger than 256 KiB: not read", said
    for c in cases.values():  # each a finished command, measured: exit 1 (errors found), a time and a peak
        assert c["exit"] == 1 and c["wall_s"][0] > 0 and c["max_rss_mb"] > 0, c
    table = rows(result)
    assert [r[0] for r in table] == [f"check: {name}" for name in FAST]
    assert all("goal <= 2 s and <= 200 MB: " in r[2] for r in table), table


def test_every_case_is_a_spec_under_1_mb_or_not_a_regular_file(tmp_path: Path) -> None:
    """The goal is about specs under 1 MB: every case must be one (a FIFO or a device is refused by type)."""
    for name, (_, make) in checker.CASES.items():
        folder = tmp_path / name
        folder.mkdir()
        spec = make(folder)
        assert not spec.is_file() or spec.stat().st_size < checker.SPEC_LIMIT, name


def test_a_case_over_the_goal_or_killed_is_reported_missed() -> None:
    result = {"goals": checker.GOALS, "rounds": 1, "cases": {
        "slow": {"what": "w", "spec_bytes": 2048, "exit": 1, "said": "s", "wall_s": [2.5],
                 "median_wall_s": 2.5, "max_rss_mb": 50.0},
        "killed": {"what": "w", "spec_bytes": 0, "exit": None, "said": "killed after 60 s", "wall_s": [60.0],
                   "median_wall_s": 60.0, "max_rss_mb": None},
        "fine": {"what": "w", "spec_bytes": 0, "exit": 1, "said": "s", "wall_s": [0.3], "median_wall_s": 0.3,
                 "max_rss_mb": 30.0},
    }}  # fmt: skip
    verdicts = [r[2].rsplit(": ", 1)[1] for r in checker.table_rows(result)]
    assert verdicts == ["missed", "missed", "met"]


def test_the_benchmarks_page_has_the_committed_checker_run() -> None:
    """docs/benchmarks.md's checker table is markdown() of tests/bench/last-run-checker.json."""
    page = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"
    result = json.loads(checker.LAST_RUN.read_text())
    assert checker.docs_table(page.read_text()) == checker.markdown(result)
    assert set(result["checker"]["cases"]) == set(checker.CASES)  # every case measured in the committed run

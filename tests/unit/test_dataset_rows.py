"""Every bad row of a dataset file in one pass: JSON Lines, JSON arrays (resynchronised), CSV, text."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from radeonlab.cli import main
from radeonlab.jobs.spec.datasets import MAX_ROW_PROBLEMS_PER_FILE, DatasetAttr, check_file
from radeonlab.jobs.spec.rows import Malformed, json_rows

ROW = {"instruction": "Uppercase the word.", "input": "apple", "output": "APPLE"}


def _errors(path: Path, stage: str = "sft") -> list[tuple[int, str]]:
    return [(p.line, p.message) for p in check_file(path, DatasetAttr(), stage) if p.severity == "error"]


def test_250_rows_three_bad_rows_named_in_one_check_run(tmp_path: Path) -> None:
    """The acceptance case: malformed JSON at lines 37 and 137, no `output` at 201, one `check` run."""
    lines = [json.dumps(dict(ROW, input=f"w{i}")) for i in range(1, 251)]
    lines[36] = '{"instruction": "Uppercase the word.", "input": "x", "output": '  # cut short
    lines[136] = '{"instruction": "Uppercase the word." "input": "y"}'  # missing comma
    lines[200] = json.dumps({"instruction": "Uppercase the word.", "input": "z"})  # no output
    data = tmp_path / "data"
    data.mkdir()
    (data / "rows.jsonl").write_text("\n".join(lines) + "\n")
    (data / "dataset_info.json").write_text(json.dumps({"rows": {"file_name": "rows.jsonl"}}))
    spec = tmp_path / "job.yaml"
    spec.write_text("model_name_or_path: m\ndo_train: true\ndataset: rows\n")
    result = CliRunner().invoke(main, ["check", str(spec), "--json", "--no-hub"])
    assert result.exit_code == 1
    found = [(Path(p["file"]).name, p["line"], p["message"]) for p in json.loads(result.output)]
    assert [(name, line) for name, line, _ in found] == [
        ("rows.jsonl", 37),
        ("rows.jsonl", 137),
        ("rows.jsonl", 201),
    ]
    assert "malformed JSON" in found[0][2] and "malformed JSON" in found[1][2]
    assert "`output` is missing" in found[2][2]


def test_every_non_utf8_line_is_named(tmp_path: Path) -> None:
    good = json.dumps(ROW).encode() + b"\n"
    path = tmp_path / "d.jsonl"
    path.write_bytes(good + b'{"instruction": "caf\xe9"}\n' + good + b'{"input": "\xff"}\n' + good)
    assert [(line, msg.split(" (")[0]) for line, msg in _errors(path)] == [
        (2, "not UTF-8"),
        (4, "not UTF-8"),
    ]


def test_array_resynchronises_after_a_broken_row(tmp_path: Path) -> None:
    rows = [dict(ROW, input=f"w{i}") for i in range(6)]
    rows[4] = {"instruction": "i", "input": "no output"}
    text = json.dumps(rows, indent=2).splitlines()
    # row 1 starts on line 7 ("[" + 5 lines per row): break its "input" line
    assert text[6].strip() == "{" and text[8].strip().startswith('"input"')
    text[8] = '    "input": "w1" "oops",'
    path = tmp_path / "d.json"
    path.write_text("\n".join(text) + "\n")
    errors = _errors(path)
    assert [line for line, _ in errors] == [9, 22]  # the broken row, then row 4 (no output) still checked
    assert "malformed JSON" in errors[0][1] and "`output` is missing" in errors[1][1]


def test_array_missing_comma_is_reported_and_the_rest_read(tmp_path: Path) -> None:
    bad = {"instruction": "i", "input": "x"}
    path = tmp_path / "d.json"
    path.write_text(f"[\n{json.dumps(ROW)}\n{json.dumps(ROW)},\n{json.dumps(bad)}\n]\n")
    errors = _errors(path)
    assert [line for line, _ in errors] == [3, 4]
    assert "expected , or ]" in errors[0][1] and "`output` is missing" in errors[1][1]


def test_one_line_array_stops_at_its_first_error_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text('[{"instruction": "a", "input": "", "output": "b"}, {"instruction": x}, {"a": 1}]\n')
    rows = list(json_rows(path))
    assert isinstance(rows[0][1], dict)
    assert len(rows) == 2 and isinstance(rows[1][1], Malformed)
    assert "not checked" in rows[1][1].message


def test_array_cut_short_after_a_broken_row_reports_once(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text(f'[\n  {json.dumps(ROW)},\n  {{"instruction": \n  {json.dumps(ROW)}\n')
    errors = _errors(path)
    assert len(errors) == 1 and errors[0][0] == 4 and "malformed JSON" in errors[0][1]


def test_csv_rows_field_counts_and_dropped_rows(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text(
        'instruction,input,output\nUpper,apple,APPLE\nUpper,"two\nlines",X\nUpper,pear\nUpper,a,b,c\n'
    )
    errors = _errors(path)
    # line 5: only two fields -> output empty -> dropped; line 6: four fields -> the loader stops
    assert [line for line, _ in errors] == [5, 6]
    assert "`output` is missing" in errors[0][1] and "4 fields but the header has 3" in errors[1][1]


def test_malformed_rows_share_the_cap_and_are_counted(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text("{broken\n" * 30 + json.dumps(ROW) + "\n")
    problems = check_file(path, DatasetAttr(), "sft")
    assert len(problems) == MAX_ROW_PROBLEMS_PER_FILE + 1
    assert "10 more row problems" in problems[-1].message

"""The claims table (docs/testing/claims.md, "Every claim in these docs and the test that runs it")
cannot rot: every test it names exists, and a claim said to run end to end names a test that runs on sandbox
hosts (the `sandbox` mark)."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEADING = "# Every claim in these docs and the test that runs it"
PAGE = REPO / "docs" / "testing" / "claims.md"  # moved there from README.md (issue 25)
TEST_REF = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")
KINDS = {"e2e", "unit"}


def claim_rows() -> list[tuple[str, list[tuple[str, str]], set[str]]]:
    """(claim, [(file, test)], kinds) for each row of the table."""
    text = PAGE.read_text()
    assert text.count(HEADING) == 1, f"{PAGE.name} has no single section {HEADING!r}"
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("claim", "---"):
            continue
        rows.append((cells[0], TEST_REF.findall(cells[1]), {k.strip() for k in cells[2].split(",")}))
    return rows


@cache
def sandbox_marks(file: str) -> dict[str, bool]:
    """Test function name -> whether it is marked `sandbox` (by the module's pytestmark, its decorators, or a
    module helper used as a decorator that applies the mark), for one test module."""
    tree = ast.parse((REPO / file).read_text())
    marks_sandbox = {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("test_")
        if "mark.sandbox" in ast.unparse(node)
    }
    module_marked = any(
        isinstance(node, ast.Assign)
        and any(getattr(t, "id", "") == "pytestmark" for t in node.targets)
        and "sandbox" in ast.unparse(node.value)
        for node in tree.body
    )
    out = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            decorators = " ".join(ast.unparse(d) for d in node.decorator_list)
            by_helper = any(re.search(rf"\b{name}\b", decorators) for name in marks_sandbox)
            out[node.name] = module_marked or "mark.sandbox" in decorators or by_helper
    return out


def test_the_table_is_there_and_every_row_names_a_test() -> None:
    rows = claim_rows()
    assert len(rows) >= 50, len(rows)
    for claim, refs, kinds in rows:
        assert refs, f"no test named for: {claim}"
        assert kinds and kinds <= KINDS, (claim, kinds)


def test_every_named_test_exists() -> None:
    missing = [
        f"{file}::{name}"
        for _, refs, _ in claim_rows()
        for file, name in refs
        if not (REPO / file).is_file() or name not in sandbox_marks(file)
    ]
    assert missing == [], f"the claims table names tests that do not exist: {missing}"


def test_an_end_to_end_claim_names_a_test_on_sandbox_hosts() -> None:
    wrong = []
    for claim, refs, kinds in claim_rows():
        marked = [sandbox_marks(file).get(name, False) for file, name in refs]
        if kinds == {"e2e"} and not all(marked) or "e2e" in kinds and not any(marked):
            wrong.append(claim)
    assert wrong == [], f"said to run end to end, but no sandbox test: {wrong}"


def test_the_checker_sees_a_missing_test_and_an_unmarked_one() -> None:
    """The checks above can fail: a made-up name is not found, a plain test is not taken for a sandbox one."""
    assert "test_no_such_test_anywhere" not in sandbox_marks("tests/e2e/test_provision.py")
    assert (
        sandbox_marks("tests/e2e/test_provision.py")["test_first_run_installs_everything"] is True
    )  # pytestmark
    security = sandbox_marks("tests/unit/test_security.py")
    assert security["test_training_never_runs_as_root"] is True  # through its on_a_host helper
    assert security["test_the_job_runner_never_uses_sudo"] is False  # source-only


def test_every_test_the_trust_page_names_exists() -> None:
    """docs/design/trust.md ("What radeonlab trusts"): each boundary names its tests, as `tests/x.py::name` or
    `::name` (same file as the one before); every one of them is a test function of that file."""
    text = (REPO / "docs/design/trust.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and "`tests/" in line]
    assert len(rows) >= 12, len(rows)
    for row in rows:
        current = ""
        for file, name in re.findall(r"`(tests/[\w/]+\.py)?::(\w+)`", row):
            current = file or current
            tree = ast.parse((REPO / current).read_text())
            defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
            assert name in defined, f"{current}::{name} named in docs/design/trust.md does not exist"

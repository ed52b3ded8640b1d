"""Print the rows of docs/reference/bad-inputs-new-rows.md: every bad input of tests/unit/test_bad_inputs.py's
spec, dataset, value, history, warning and override tables, run through the CLI as the tests do, and what
it says.

    PYTHONPATH=src:. .venv/bin/python scripts/bad_inputs_rows.py > /tmp/rows.md

Paths are shown relative to the input's folder; a message longer than MAX_SHOWN characters is cut with "...".
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import tests.unit.test_bad_inputs as rows

from radeonlab.jobs.fleet import store
from radeonlab.sandbox import demodata
from radeonlab.sandbox.demo import write_spec

MAX_SHOWN = 300


def _work() -> rows.Work:
    folder = Path(tempfile.mkdtemp(prefix="bad-inputs-"))
    os.environ[store.HOME_ENV] = str(folder / "home")
    spec = write_spec(folder, {"model_name_or_path": rows.HUB_MODEL, "max_steps": 5})
    data = demodata.write_dataset(folder / "data")
    inventory = folder / "closed.py"
    inventory.write_text(rows.CLOSED_INVENTORY)
    return rows.Work(folder, spec, data, inventory)


def _shown(text: str, work: rows.Work) -> str:
    text = re.sub(r"/tmp/rl-sock-[^/]+/", "<tmp>/", text.replace(f"{work.dir}/", ""))
    text = text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "..."
    return text.replace("|", "\\|")


def _first(output: str, severities: tuple[str, ...]) -> str:
    lines = output.strip().splitlines()
    return next((x for x in lines if any(f": {s}: " in x for s in severities)), lines[-1])


def main() -> None:
    os.environ.update(rows.HUB_ENV)
    print("| input | what radeonlab says |\n|---|---|")
    for table, row in rows.EVERY_BAD_INPUT:
        work = _work()
        spec = rows._bad_spec(work, table, row)
        if table in rows.WARNS_ONLY:
            result = work.cli("check", str(spec), "--no-hub")
            said = _first(result.output, ("warning",)) + " (check exits 0; submit goes on)"
        else:
            result = work.cli("submit", str(spec), "-i", str(work.inventory))
            # a finding line, then the summary line
            per_line = table in ("dataset", "value", "history", "rule", "type")
            said = _first(result.stderr, ("error",)) if per_line else result.stderr.strip().splitlines()[-1]
            said += " + summary" if per_line else ""
        print(f"| {table}: {row} | `{_shown(said, work)}` |")
    for name, (pair, _) in rows.OVERRIDE_ROWS.items():
        work = _work()
        said = work.submit(None, pair).stderr.strip().splitlines()[-1]
        print(f"| override: {name} | `{_shown(said, work)}` |")
    for form, make in rows.VALID_FORMS.items():
        work = _work()
        make(work)
        code = work.cli("check", str(work.spec), "--no-hub").exit_code
        print(f"| valid form: {form} | accepted (check exits {code}; submit goes on to the host) |")


if __name__ == "__main__":
    main()

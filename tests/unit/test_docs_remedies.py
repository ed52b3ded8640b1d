"""The remedy tables in docs/guide/remedies.md are the runner's registry (jobs/host/remedies.py) rendered:
a ladder, step or setting changed there without the page fails here, with the table to paste."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from radeonlab.jobs.host import health
from radeonlab.jobs.host.remedies import ENV_PREFIX, KILLED_FIRST, LADDER_OF, LADDERS, STEPS
from radeonlab.jobs.spec.block import REMEDY_NAMES

PAGE = Path(__file__).resolve().parents[2] / "docs/guide/remedies.md"
BEGIN, END = "<!-- remedies table: begin -->", "<!-- remedies table: end -->"


def render() -> str:
    """The two tables: each ladder (the spec's switch) with the failures it answers, then each step."""
    rows = ["| `remedies:` key | taken for | default steps, in order |", "|---|---|---|"]
    for ladder, steps in LADDERS.items():
        kinds = ", ".join(f"`{k.value}`" for k, name in LADDER_OF.items() if name == ladder)
        order = " -> ".join(f"`{s}`" for s in steps) + " -> give up with a report"
        rows.append(f"| `{ladder}` | {kinds} | {order} |")
    killed = ", ".join(f"`{s}`" for s in KILLED_FIRST)
    rows += ["", f"A `killed` run first tries {killed} (once), then the `oom` ladder.", ""]
    rows += ["| step | what it changes | resumes from a checkpoint |", "|---|---|---|"]
    rows += [
        f"| `{s.name}` | {s.does} | {'yes' if s.resumable else 'no: fresh start'} |" for s in STEPS.values()
    ]
    return "\n".join(rows)


def test_the_guide_shows_the_registry() -> None:
    text = PAGE.read_text(encoding="utf-8")
    shown = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert shown == render(), f"paste this between the markers in {PAGE.name}:\n{render()}"


def test_every_ladder_is_a_spec_switch() -> None:
    assert tuple(LADDERS) == REMEDY_NAMES and set(LADDER_OF.values()) == set(LADDERS)


def test_the_block_reference_example_names_real_ladders_and_steps() -> None:
    """The `remedies:` line of the reference's example spec loads without a problem (ladders and steps)."""
    page = PAGE.parent.parent / "reference/radeonlab-block.md"
    line = next(t for t in page.read_text(encoding="utf-8").splitlines() if t.strip().startswith("remedies:"))
    remedies = yaml.safe_load(line.split("#", 1)[0])["remedies"]
    assert set(remedies) == set(LADDERS)
    assert all(s in STEPS for v in remedies.values() if isinstance(v, list) for s in v)


@pytest.mark.parametrize(
    ("ladder", "advice"),
    [("nan", health.NAN_ADVICE), ("oom", health._OOM_GPU), ("gpu_reset", health._GPU_RESET)],
)
def test_the_advice_names_what_its_ladder_changes(ladder: str, advice: str) -> None:
    """health.py's advice (the host's stdlib side, which cannot import the ladders) says what they change."""
    keys = {k.removeprefix(ENV_PREFIX) for s in LADDERS[ladder] for k in STEPS[s].keys}
    assert keys and all(k in advice for k in keys), (keys, advice)

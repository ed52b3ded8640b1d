"""`radeonlab gpus` on recorded trees of each simulated card: the override decision for both torch sources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from radeonlab.cli.gpus import command
from radeonlab.sandbox import simcards

# card -> (AMD's multi-arch wheels, download.pytorch.org's rocm7.2 wheels)
WANT = {
    "rx7900xtx": ("-", "-"),
    "rx6700xt": ("-", "10.3.0"),  # AMD's wheels carry gfx1031; pytorch.org's borrow gfx1030
    "rx9070xt": ("-", "-"),
    "strixhalo": ("-", "11.0.0"),  # same major only: never 12.x on gfx1151
}


@pytest.mark.parametrize("card", WANT)
def test_override_decision_for_both_sources(card: str, tmp_path: Path) -> None:
    simcards.write_sysclass(tmp_path / "sys" / "class", card)
    done = CliRunner().invoke(command, ["--sysfs", str(tmp_path), "--json"])
    assert done.exit_code == 0, done.output
    (gpu,) = json.loads(done.output)
    assert gpu["gfx"] == simcards.CARDS[card]["gfx"]
    assert tuple(gpu["override_by_torch_source"].values()) == WANT[card]
    table = CliRunner().invoke(command, ["--sysfs", str(tmp_path)], terminal_width=160)
    assert "override" in table.output and "AMD wheels" in table.output


def test_strix_halo_lists_its_unified_memory(tmp_path: Path) -> None:
    simcards.write_sysclass(tmp_path / "sys" / "class", "strixhalo")
    (gpu,) = json.loads(CliRunner().invoke(command, ["--sysfs", str(tmp_path), "--json"]).output)
    assert gpu["igpu"] is True and gpu["usable_memory"] == 536870912 + 67148152832

"""The simulated cards read back through the product's own GPU detection (no root, no sandbox host)."""

from __future__ import annotations

from pathlib import Path

import pytest

from radeonlab.roles.gpu.sysfs import read_sysfs
from radeonlab.sandbox import simcards

# (card, gfx, name, VRAM GiB rounded, bf16): the cards issue 2 asks the sandbox to simulate.
EXPECTED = [
    ("rx7900xtx", "gfx1100", "AMD Radeon RX 7900 XTX", 24, True),
    ("rx6700xt", "gfx1031", "AMD Radeon RX 6700 XT", 12, False),
    ("rx9070xt", "gfx1201", "AMD Radeon RX 9070 XT", 16, True),
]


@pytest.mark.parametrize(("card", "gfx", "name", "vram_gib", "bf16"), EXPECTED)
def test_simulated_card_is_detected(
    tmp_path: Path, card: str, gfx: str, name: str, vram_gib: int, bf16: bool
):
    simcards.write_sysclass(tmp_path / "sys" / "class", card)
    [gpu] = read_sysfs(tmp_path)
    assert (gpu.gfx, gpu.name, round(gpu.vram_total / 2**30), gpu.bf16, gpu.igpu) == (
        gfx,
        name,
        vram_gib,
        bf16,
        False,
    )


def test_no_card_means_no_gpu(tmp_path: Path):
    simcards.write_sysclass(tmp_path / "sys" / "class", None)
    assert read_sysfs(tmp_path) == []

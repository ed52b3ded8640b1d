"""The simulated cards read back through the product's own GPU detection (no root, no sandbox host)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from radeonlab.roles.gpu import pci
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


def _pci(root: Path) -> list[dict[str, object]]:
    command = pci.dump_command(str(root))
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    return [gpu.to_dict() for gpu in pci.parse_dump(out.stdout.splitlines())]


@pytest.mark.parametrize(("card", "apu"), [("rx7900xtx", False), ("strixhalo", True)])
def test_an_undriven_card_is_on_pci_only_until_its_driven_trees_are_mounted(
    tmp_path: Path, card: str, apu: bool
) -> None:
    """driven=False: the product's PCI fact finds and names the card with no driver, KFD finds nothing; the
    trees the SIMULATED reboot mounts (boot-driven/) show it driven to both."""
    host_dir = tmp_path / "host"
    simcards.write_card_state(host_dir, card, driven=False)
    view = tmp_path / "view" / "sys"
    view.mkdir(parents=True)
    (view / "class").symlink_to(host_dir / "sysclass")
    (view / "bus" / "pci").mkdir(parents=True)
    (view / "bus" / "pci" / "devices").symlink_to(host_dir / "syspci")
    assert read_sysfs(tmp_path / "view") == []
    [gpu] = _pci(tmp_path / "view")
    assert (gpu["name"], gpu["apu"], gpu["driver"]) == (simcards.CARDS[card]["name"], apu, None)
    boot = host_dir / simcards.BOOT_DRIVEN
    (view / "class").unlink()
    (view / "class").symlink_to(boot / "class")
    (view / "bus" / "pci" / "devices").unlink()
    (view / "bus" / "pci" / "devices").symlink_to(boot / "pci")
    [driven] = read_sysfs(tmp_path / "view")
    assert driven.name == simcards.CARDS[card]["name"]
    assert _pci(tmp_path / "view")[0]["driver"] == "amdgpu"
    simcards.write_card_state(host_dir, card)  # driven again: nothing waits for a reboot
    assert not boot.exists()

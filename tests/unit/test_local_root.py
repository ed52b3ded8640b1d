"""`pyinfra @local deploy/setup.py --dry` as root on a machine without sudo (issue 23): the deploy plans its
operations with no sudo anywhere, and with the default training user (root's own login) it refuses naming
the setting. Run on this very machine (CI's is root without sudo), its GPU a SIMULATED RX 7900 XTX sysfs
tree given through the product's own setting (gpu_sysfs_root). --dry: nothing on the machine changes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from radeonlab.sandbox import simcards

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("sudo") is not None, reason="needs root on a machine without sudo"
)


@pytest.fixture(scope="module")
def sysfs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A filesystem root holding sys/class and sys/bus/pci/devices of a SIMULATED RX 7900 XTX."""
    cards = tmp_path_factory.mktemp("card")
    simcards.write_card_state(cards, "rx7900xtx")
    root = tmp_path_factory.mktemp("root")
    (root / "sys/bus/pci").mkdir(parents=True)
    shutil.copytree(cards / "sysclass", root / "sys/class", symlinks=True)
    shutil.copytree(cards / "syspci", root / "sys/bus/pci/devices", symlinks=True)
    return root


def dry_run(sysfs: Path, cwd: Path, *data: str) -> subprocess.CompletedProcess[str]:
    pyinfra = str(Path(sys.executable).with_name("pyinfra"))
    options = [arg for kv in (f"gpu_sysfs_root={sysfs}", *data) for arg in ("--data", kv)]
    command = [pyinfra, "-y", "@local", str(REPO / "deploy/setup.py"), "--dry", "--json", *options]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300)


def test_root_without_sudo_plans_every_role_and_changes_nothing(sysfs: Path, tmp_path: Path) -> None:
    key = Path("/etc/apt/keyrings/amdrocm.gpg")
    had_key = key.exists()
    run = dry_run(sysfs, tmp_path, "python_stack_user=nobody")  # a non-root user every Debian has
    assert run.returncode == 0, run.stderr[-3000:]
    names = [op["name"] for op in json.loads(run.stdout)["plan"]]
    assert "Install ROCm | Install AMD's apt key as /etc/apt/keyrings/amdrocm.gpg" in names, names
    assert any(n.startswith("Install ROCm | Install ROCm 10.1 packages (amdrocm10.1-gfx1100") for n in names)
    assert any(n.startswith("Install the Python training stack | Create the venv") for n in names), names
    said = (run.stderr + run.stdout).replace(str(tmp_path), "<tmp>")  # pytest names the folder after the test
    assert "sudo" not in said
    assert key.exists() == had_key and not (tmp_path / "locks").exists()  # planned, not run


def test_root_as_the_default_training_user_is_refused_naming_the_setting(sysfs: Path, tmp_path: Path) -> None:
    run = dry_run(sysfs, tmp_path)
    assert run.returncode != 0
    assert "the deploy runs as root and python_stack_user is empty" in run.stderr
    assert "set python_stack_user to a non-root user" in run.stderr

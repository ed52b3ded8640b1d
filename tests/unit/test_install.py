"""`pip install .` (not editable) gives a package that runs its own demo: every file the demo, the deploy and
the sandbox read at run time is inside the installed package, and nothing needs the checkout or `tests`.

Installed into a scratch folder (`pip install --no-deps --target`), imported from another working directory
with only that folder on the path, so a file left out of pyproject's package data fails here, not on a
user's machine."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LEFT_BEHIND = (".venv", ".git", "build", "*.egg-info", "__pycache__", ".sandbox", "tests", ".ruff_cache")

# run by path with only the install on sys.path
PROBE = Path(__file__).parents[1] / "support" / "install_probe.py"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    # a clean copy: setuptools reuses a checkout's build/ folder, which would hide a file left out
    source = tmp_path_factory.mktemp("src") / "radeonlab"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(*LEFT_BEHIND))
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(source)],
        check=True,
        capture_output=True,
        env={"PATH": "/usr/bin:/bin", "PIP_CONFIG_FILE": "/dev/null", "HOME": str(target)},
    )  # fmt: skip
    return target


def test_the_installed_package_holds_every_file_it_reads(installed: Path, tmp_path: Path) -> None:
    probe = subprocess.run(
        [sys.executable, "-I", str(PROBE), str(installed)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    found = json.loads(probe.stdout)
    assert found["package"].startswith(str(installed))  # not the checkout's
    assert found["modules"] == []  # nothing imported the tests package
    for what, path in found["files"].items():
        assert path.startswith(str(installed)) and Path(path).exists(), (what, path)
    assert list(Path(found["files"]["gpu_env template"]).glob("*.j2"))
    assert (Path(found["files"]["dashboard page"]) / "index.html").is_file()
    assert not (installed / "tests").exists() and not (installed / "jobs").exists()  # one import name

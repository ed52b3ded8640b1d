"""The laptop's bootstrap (scripts/bootstrap.sh through scripts/installer.sh): uv from the hosts' own
hash-pinned wheel installs .venv's packages; another file under uv's name is refused and pip installs instead,
said in one line. Run offline: pip and uv read their own settings (PIP_NO_INDEX, PIP_FIND_LINKS), pointed at
the pinned wheel from the sandbox's wheel cache."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from radeonlab.roles.python_stack.defaults import DEFAULTS
from radeonlab.sandbox.wheelfiles import cache_dir
from tests.unit.test_stack_installer import _wheel

REPO = Path(__file__).resolve().parents[2]
INSTALLER = REPO / "scripts" / "installer.sh"


def test_the_laptops_uv_pin_is_the_hosts_pin() -> None:
    text = INSTALLER.read_text()
    assert re.search(r"^UV_VERSION=(\S+)$", text, re.M)[1] == DEFAULTS["python_stack_uv_version"]  # type: ignore[index]
    assert re.search(r"^UV_SHA256=(\S+)$", text, re.M)[1] == DEFAULTS["python_stack_uv_sha256"]  # type: ignore[index]
    assert "source scripts/installer.sh" in (REPO / "scripts" / "bootstrap.sh").read_text()


def _bootstrap_steps(
    tmp: Path, links: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """bootstrap's install steps in a fresh venv: choose the installer, then install a one-file wheel."""
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    demo = _wheel(tmp / "demo")
    script = (
        f"source {INSTALLER} && choose_installer && venv_install demo {demo} && echo installer=$INSTALLER"
    )
    run_env = {k: v for k, v in os.environ.items() if k != "RADEONLAB_BOOTSTRAP_INSTALLER"}
    run_env |= {"VENV": str(venv), "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(links), **(env or {})}
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=run_env, timeout=300)


def _pinned_uv() -> Path:
    wheel = next((cache_dir() / "pypi").glob(f"uv-{DEFAULTS['python_stack_uv_version']}-*.whl"), None)
    if wheel is None:
        pytest.skip(
            "the pinned uv wheel is not in the sandbox wheel cache (python -m radeonlab.sandbox.wheels)"
        )
    return wheel


@pytest.mark.slow  # a venv and two installs
def test_bootstrap_installs_uv_from_its_pinned_wheel_and_uv_installs_the_packages(tmp_path: Path) -> None:
    links = tmp_path / "links"
    links.mkdir()
    shutil.copy(_pinned_uv(), links)
    done = _bootstrap_steps(tmp_path, links)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[
        0
    ] == f"bootstrap: uv {DEFAULTS['python_stack_uv_version']} from its hash-pinned wheel into " + str(
        tmp_path / "venv"
    )
    assert re.match(r"bootstrap:   done in \d+s \(uv's output: .*/logs/uv-demo.log\)$", lines[1]), lines
    assert lines[2:] == ["installer=uv"] and done.stderr == ""
    log = (tmp_path / "venv" / "logs" / "uv-demo.log").read_text()
    assert "Installed 1 package" in log and "+ demo-pkg==1.0" in log  # uv's own summary, not pip's
    assert list((tmp_path / "venv" / "lib").glob("python*/site-packages/demo_pkg/__init__.py"))
    again = subprocess.run(
        ["bash", "-c", f"source {INSTALLER} && choose_installer && echo installer=$INSTALLER"],
        capture_output=True,
        text=True,
        env={**os.environ, "VENV": str(tmp_path / "venv"), "PIP_NO_INDEX": "1"},
    )
    assert again.stdout == "installer=uv\n", (
        again.stdout + again.stderr
    )  # uv there: nothing installed, nothing said


@pytest.mark.slow
def test_another_file_under_uvs_name_is_refused_and_pip_installs_instead_said_once(tmp_path: Path) -> None:
    links = tmp_path / "links"
    links.mkdir()
    other = bytearray(_pinned_uv().read_bytes())
    other[len(other) // 2] ^= 0xFF
    (links / _pinned_uv().name).write_bytes(other)
    done = _bootstrap_steps(tmp_path, links)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    log = tmp_path / "venv" / "logs" / "uv.log"
    version = DEFAULTS["python_stack_uv_version"]
    assert lines[0] == (
        f"bootstrap: uv {version} could not be installed from its hash-pinned wheel ({log}); "
        "pip installs instead"
    )
    assert "THESE PACKAGES DO NOT MATCH THE HASHES" in log.read_text()  # pip's refusal, in the log only
    assert not (tmp_path / "venv" / "bin" / "uv").exists()
    assert re.match(r"bootstrap:   done in \d+s \(pip's output: .*/logs/pip-demo.log\)$", lines[1]), lines
    assert lines[2:] == ["installer=pip"]
    assert list((tmp_path / "venv" / "lib").glob("python*/site-packages/demo_pkg/__init__.py"))


@pytest.mark.slow
def test_the_pip_setting_skips_uv(tmp_path: Path) -> None:
    done = _bootstrap_steps(tmp_path, tmp_path, {"RADEONLAB_BOOTSTRAP_INSTALLER": "pip"})
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert re.match(r"bootstrap:   done in \d+s \(pip's output: .*/logs/pip-demo.log\)$", lines[0]), lines
    assert lines[1:] == ["installer=pip"]  # uv neither tried nor named
    assert not (tmp_path / "venv" / "bin" / "uv").exists()

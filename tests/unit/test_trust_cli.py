"""Issue 27's boundaries through the CLI a user types (`radeonlab check`, `submit`, `list`), each on the input
that got through before: what is refused says so in one line and nothing is sent. docs/design/trust.md lists
them with these tests; the host-side and end-to-end halves are in tests/unit/test_security.py,
tests/e2e/test_transport.py and tests/unit/test_roles_wheel_cache.py."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from radeonlab.cli import main
from tests.support.laptop_doubles import demo_job


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    return demo_job(tmp_path)


def check(spec: Path, text: str) -> Result:
    spec.write_text(text)
    return CliRunner().invoke(main, ["check", str(spec), "--no-hub"])


def one_error(result: Result, said: str) -> None:
    assert result.exit_code == 1, result.output
    errors = [line for line in result.output.splitlines() if ": error: " in line]
    assert len(errors) == 1 and said in errors[0], result.output


def test_s3_a_token_in_an_override_is_refused_before_anything_is_read_or_sent(spec: Path) -> None:
    token = "ghp_" + "a1B2c3D4e5" * 4  # GitHub's token shape, as an override value
    for override, said in (
        (f"run_name={token}", "override `run_name=...` holds a GitHub token"),
        (f"hf_hub_token=hf_{'x' * 30}", "`hf_hub_token` carries a credential"),
    ):
        result = CliRunner().invoke(main, ["submit", str(spec), override, "-i", "/nonexistent/inventory.py"])
        assert result.exit_code == 2, result.output
        assert said in result.output and "nothing uploaded" in result.output, result.output
        assert token not in result.output  # the value is never echoed


def test_s4_s12_the_blocks_files_are_the_specs_own_regular_files_each_once(spec: Path) -> None:
    base = spec.read_text()
    (spec.parent / "notes.txt").write_text("notes\n")
    one_error(check(spec, base + "radeonlab:\n  files: [/etc/shadow]\n"), "/etc/shadow is outside the spec's")
    one_error(
        check(spec, base + "radeonlab:\n  files: [notes.txt, notes.txt]\n"), "notes.txt is listed twice"
    )
    os.mkfifo(spec.parent / "pipe")  # reading a FIFO blocked submit
    one_error(check(spec, base + "radeonlab:\n  files: [pipe]\n"), "pipe is not a regular file")
    result = check(spec, base + "radeonlab:\n  files: [notes.txt]\n")
    assert result.exit_code == 0, result.output


def test_s6_an_output_path_outside_the_job_folder_is_refused_with_the_relative_fix(spec: Path) -> None:
    base = spec.read_text()
    text = base.replace("output_dir: output", "output_dir: output\nlogging_dir: /tmp/elsewhere")
    one_error(check(spec, text), "`logging_dir: /tmp/elsewhere` is outside the job folder")
    text = base.replace("output_dir: output", "output_dir: output\nlogging_dir: logs")
    assert check(spec, text).exit_code == 0


def test_s7_a_spec_cannot_set_the_gpus_radeonlab_locked_for_it(spec: Path) -> None:
    text = spec.read_text() + "radeonlab:\n  env:\n    HIP_VISIBLE_DEVICES: '1'\n"
    one_error(check(spec, text), "env HIP_VISIBLE_DEVICES cannot be set by a spec")


def test_s11_a_limit_that_is_not_a_finite_number_never_reaches_the_host(spec: Path) -> None:
    base = spec.read_text()
    for value in (".nan", ".inf", "-1"):
        result = check(spec, base + f"radeonlab:\n  limits:\n    memory_gb: {value}\n")
        one_error(result, "memory_gb")
    assert check(spec, base + "radeonlab:\n  limits:\n    memory_gb: 8\n").exit_code == 0


def test_s10_the_job_store_is_private_from_the_first_command(tmp_path: Path) -> None:
    home = tmp_path / "laptop"
    inventory = tmp_path / "inventory.py"
    inventory.write_text("hosts = []\n")  # no workstation: list reads the store alone
    result = CliRunner().invoke(main, ["list", "-i", str(inventory)], env={"RADEONLAB_HOME": str(home)})
    assert result.exit_code == 0, result.output
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "jobs.db").stat().st_mode) == 0o600

"""Sandbox address leases between sessions (two pytest-xdist workers, two test runs): a host being made
keeps its number until it is up, and a number whose holder is gone is free again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from radeonlab.contract.jobdir import start_time
from radeonlab.sandbox import config, hosts
from radeonlab.sandbox.hosts import Sandbox, lease_holder


@pytest.fixture
def leases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "leases"
    folder.mkdir()
    monkeypatch.setattr(config, "LEASE_DIR", folder)
    monkeypatch.setattr(hosts, "_port_free", lambda _address, _port: True)  # the machine's live hosts aside
    return folder


def test_a_host_still_being_made_by_a_live_session_keeps_its_number(tmp_path: Path, leases: Path) -> None:
    # another session leased 1 a moment ago: its host folder has no host.json and no sshd yet
    me = os.getpid()
    (leases / "1").write_text(f"{tmp_path / 'other' / 'hosts' / 'a'}\n{me} {start_time(me)}\n")
    assert Sandbox(tmp_path / "mine")._lease(tmp_path / "mine" / "hosts" / "b") == 2
    holder, pid, _start = lease_holder((leases / "2").read_text())
    assert holder == tmp_path / "mine" / "hosts" / "b" and pid == me


def test_a_number_whose_session_died_before_its_host_was_made_is_free(tmp_path: Path, leases: Path) -> None:
    argv = [sys.executable, "-c", "import os; print(os.getpid())"]
    gone = subprocess.run(argv, capture_output=True, text=True)
    (leases / "1").write_text(f"{tmp_path / 'dead' / 'hosts' / 'a'}\n{gone.stdout.strip()} 1\n")
    (leases / "3").write_text(f"{tmp_path / 'old' / 'hosts' / 'c'}\n")  # an older radeonlab's lease: no pid
    assert Sandbox(tmp_path / "mine")._lease(tmp_path / "mine" / "hosts" / "b") == 1
    assert Sandbox(tmp_path / "mine")._lease(tmp_path / "mine" / "hosts" / "d") == 2
    assert Sandbox(tmp_path / "mine")._lease(tmp_path / "mine" / "hosts" / "e") == 3

"""Bulk copies through OpenSSH's client (jobs/ssh/openssh.py): the `ssh` command line is no looser than the
paramiko connection, and on a sandbox host (SIMULATED workstation, real sshd) uploads and fetches over the
threshold really go through one multiplexed OpenSSH connection with the same integrity and resume as
paramiko; without `ssh` on PATH they go through paramiko and the command says so once.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from radeonlab.errors import TransportError
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.ssh import openssh
from radeonlab.jobs.ssh.connection import connect
from radeonlab.jobs.ssh.transfer import LocalFile, fetch, sha256_file, upload_blobs
from tests.conftest import inventory_target, module_host
from tests.e2e.test_transport import _interrupt_after, big_file, exists, put_text, remote_sha256

__all__ = ["big_file"]  # a fixture shared with test_transport

TARGET = HostTarget(
    name="ws1",
    hostname="10.0.0.7",
    port=2222,
    user="lab",
    key_filename="/keys/lab id",
    known_hosts_file="/inv/known_hosts",
    strict_host_key_checking="accept-new",
)


def _options(argv: list[str]) -> dict[str, str]:
    return dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "-o")


def test_ssh_command_line_is_no_looser_than_the_paramiko_connection() -> None:
    argv = openssh.ssh_argv(TARGET, "/tmp/ctl", "python3 -m x 'a b'")
    opts = _options(argv)
    assert argv[:3] == ["ssh", "-F", "/dev/null"]  # never ~/.ssh/config nor /etc/ssh/ssh_config
    # even under the inventory's accept-new: paramiko has already checked (or recorded) the key
    assert opts["StrictHostKeyChecking"] == "yes"
    assert opts["UserKnownHostsFile"] == "/inv/known_hosts" and opts["GlobalKnownHostsFile"] == "/dev/null"
    assert opts["UpdateHostKeys"] == "no" and opts["BatchMode"] == "yes"
    assert opts["IdentityFile"] == "/keys/lab id" and opts["IdentitiesOnly"] == "yes"
    assert opts["IdentityAgent"] == "none" and opts["PreferredAuthentications"] == "publickey"
    assert opts["ControlMaster"] == "auto" and opts["ControlPath"] == "/tmp/ctl/%C"
    assert int(opts["ControlPersist"]) > 0
    assert argv[argv.index("-p") + 1] == "2222" and argv[argv.index("-l") + 1] == "lab"
    assert argv[-3:] == ["--", "10.0.0.7", "python3 -m x 'a b'"]  # the command is one argument, quoted
    assert not any("StrictHostKeyChecking=no" in a or "accept-new" in a for a in argv)


def test_no_key_in_the_inventory_offers_none_and_the_agent_only_when_allowed() -> None:
    bare = HostTarget(name="ws2", hostname="ws2", allow_agent=True)
    opts = _options(openssh.ssh_argv(bare, "/c", None, control_op="exit"))
    assert opts["IdentityFile"] == "none" and "IdentityAgent" not in opts


def test_the_setting_picks_the_path_and_an_unknown_value_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RADEONLAB_BULK_TRANSPORT", "paramiko")
    assert not openssh.wanted(1 << 40)
    monkeypatch.setenv("RADEONLAB_BULK_TRANSPORT", "openssh")
    assert openssh.wanted(1 << 40) and not openssh.wanted(openssh.SETTINGS["min_bytes"] - 1)
    monkeypatch.setenv("RADEONLAB_BULK_TRANSPORT", "scp")
    with pytest.raises(TransportError, match="RADEONLAB_BULK_TRANSPORT='scp'"):
        openssh.wanted(1 << 40)


def test_socket_folder_is_private_and_removed_at_the_end() -> None:
    folder = openssh.control_dir()
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    openssh.close_all()
    assert not os.path.exists(folder)


# --- against a sandbox host --------------------------------------------------------------------------
host = module_host("bulk")
BLOBS = "/home/lab/bulk/blobs"


@pytest.fixture
def target(host, sandbox, monkeypatch: pytest.MonkeyPatch) -> HostTarget:  # noqa: ANN001
    monkeypatch.setenv("RADEONLAB_BULK_TRANSPORT", "openssh")
    return inventory_target(sandbox, host, monkeypatch)


@pytest.fixture
def used(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The tools that went through OpenSSH in this test (a spy on the one entry point)."""
    calls: list[str] = []
    real = openssh.open_tool

    def spy(remote, module, args):  # noqa: ANN001, ANN202
        calls.append(module)
        return real(remote, module, args)

    monkeypatch.setattr(openssh, "open_tool", spy)
    yield calls
    openssh.close_all()


def link(remote, job_dir: str, links: dict[str, str], blobs: str) -> None:  # noqa: ANN001
    """Hard-link blobs into a job folder with the stage tool, as submit does: {dest: sha256}."""
    request = {
        "job_dir": job_dir,
        "blobs": blobs,
        "links": [{"sha256": h, "dest": d} for d, h in links.items()],
    }
    remote.tool("stage", stdin_text=json.dumps(request))


def _masters(folder: str) -> list[str]:
    return [n for n in os.listdir(folder) if stat.S_ISSOCK(os.stat(os.path.join(folder, n)).st_mode)]


@pytest.mark.sandbox
def test_upload_and_fetch_go_through_one_openssh_master_verified(
    target: HostTarget, big_file: Path, tmp_path: Path, used: list[str]
) -> None:
    big = LocalFile.of(big_file)
    with connect(target) as remote:
        have, sent = upload_blobs(remote, [big], BLOBS)
        assert (have, sent) == (set(), big.size)
        folder = openssh.control_dir()
        assert len(_masters(folder)) == 1  # one multiplexed connection for this host
        assert remote_sha256(remote, f"{BLOBS}/sha256/{big.sha256}") == big.sha256
        link(remote, "/home/lab/bulk/job 1", {"data/big.bin": big.sha256}, BLOBS)
        report = fetch(remote, "/home/lab/bulk/job 1", tmp_path, names=["data/big.bin"])
        assert len(_masters(folder)) == 1  # the fetch reused it
    assert used == ["receive", "send"]
    assert report.bytes_received == big.size and sha256_file(tmp_path / "data/big.bin") == big.sha256
    openssh.close_all()
    assert not os.path.exists(folder)  # sockets and their folder gone at the end of the command


@pytest.mark.sandbox
def test_small_copies_stay_on_paramiko(target: HostTarget, tmp_path: Path, used: list[str]) -> None:
    src = tmp_path / "small.txt"
    src.write_text("small\n")
    with connect(target) as remote:
        upload_blobs(remote, [LocalFile.of(src)], BLOBS)
    assert used == []


@pytest.mark.sandbox
def test_interrupted_openssh_upload_resumes(target: HostTarget, big_file: Path, used: list[str]) -> None:
    blobs = "/home/lab/bulk/resume-up"
    big = LocalFile.of(big_file)
    blob = f"{blobs}/sha256/{big.sha256}"
    remote = connect(target)
    with pytest.raises(TransportError, match="connection lost after"):
        upload_blobs(remote, [big], blobs, _interrupt_after(remote, 10_000_000))
    with connect(target) as remote:
        assert not exists(remote, blob)
        kept = int(remote.run(["stat", "-c", "%s", blob + ".part"]).stdout)
        assert 0 < kept < big.size
        have, sent = upload_blobs(remote, [big], blobs)
        assert have == set() and 0 < sent < big.size and sent == big.size - kept  # only the rest moved
        assert remote_sha256(remote, blob) == big.sha256 and not exists(remote, blob + ".part")
    assert used == ["receive", "receive"]


@pytest.mark.sandbox
def test_interrupted_openssh_fetch_resumes_and_a_corrupted_byte_is_caught(
    target: HostTarget, big_file: Path, tmp_path: Path, used: list[str]
) -> None:
    big = LocalFile.of(big_file)
    local = tmp_path / "data/down.bin"
    with connect(target) as remote:
        upload_blobs(remote, [big], BLOBS)
        link(remote, "/home/lab/bulk/job 2", {"data/down.bin": big.sha256}, BLOBS)
    remote = connect(target)
    with pytest.raises(TransportError, match="connection lost downloading"):
        interrupt = _interrupt_after(remote, 10_000_000)
        fetch(remote, "/home/lab/bulk/job 2", tmp_path, ["data/down.bin"], progress=interrupt)
    part = tmp_path / "data/down.bin.part"
    kept = part.stat().st_size
    assert 0 < kept < big.size and not local.exists()
    with connect(target) as remote:
        report = fetch(remote, "/home/lab/bulk/job 2", tmp_path, ["data/down.bin"])
        assert report.bytes_received == big.size - kept  # resumed where the part ended
        assert sha256_file(local) == big.sha256 and not part.exists()
        # one flipped byte in a kept part: the host's sha256 disagrees, the file is fetched again whole
        data = bytearray(big_file.read_bytes()[:20_000_000])
        data[1234] ^= 0xFF
        local.unlink()
        part.write_bytes(bytes(data))
        report = fetch(remote, "/home/lab/bulk/job 2", tmp_path, ["data/down.bin"])
        assert sha256_file(local) == big.sha256 and not part.exists()
        assert report.bytes_received == big.size
    assert used[-4:] == ["send"] * 4  # interrupted, resumed, and the damaged part: once, then from zero


@pytest.mark.sandbox
def test_corrupted_part_on_the_host_is_sent_again_over_openssh(
    target: HostTarget, big_file: Path, tmp_path: Path, used: list[str]
) -> None:
    big = LocalFile.of(big_file)
    blobs = "/home/lab/bulk/damaged"
    blob = f"{blobs}/sha256/{big.sha256}"
    small = tmp_path / "small.txt"
    small.write_text("makes the store\n")
    with connect(target) as remote:
        upload_blobs(remote, [LocalFile.of(small)], blobs)  # the store's folders, made by the host tool
        put_text(remote, blob + ".part", "B" * 5000)  # not a prefix of the file
        _, sent = upload_blobs(remote, [big], blobs)
        assert sent == big.size  # the resumed bytes did not hash right: sent again from zero
        assert remote_sha256(remote, blob) == big.sha256 and not exists(remote, blob + ".part")
    assert used and set(used) == {"receive"}


@pytest.mark.sandbox
def test_without_openssh_paramiko_copies_and_says_so_once(
    target: HostTarget,
    big_file: Path,
    tmp_path: Path,
    used: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no `ssh` on the laptop
    monkeypatch.setitem(openssh._state, "said", False)
    big = LocalFile.of(big_file)
    with connect(target) as remote:
        have, sent = upload_blobs(remote, [big], "/home/lab/bulk/noss")
        assert sent == big.size
        link(remote, "/home/lab/bulk/job 3", {"data/big.bin": big.sha256}, "/home/lab/bulk/noss")
        fetch(remote, "/home/lab/bulk/job 3", tmp_path / "back", names=["data/big.bin"])
    assert used == []
    assert sha256_file(tmp_path / "back/data/big.bin") == big.sha256
    assert capsys.readouterr().err.count(openssh.FALLBACK_NOTICE) == 1


@pytest.mark.sandbox
def test_openssh_refuses_a_host_key_missing_from_the_inventorys_file(
    target: HostTarget, big_file: Path, tmp_path: Path, used: list[str]
) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with connect(target) as remote:
        # the paramiko connection was checked against the real file; OpenSSH is given only the empty one
        remote.target = dataclasses.replace(target, known_hosts_file=str(empty))
        said = "OpenSSH copy failed: Host key verification failed.*RADEONLAB_BULK_TRANSPORT=paramiko"
        with pytest.raises(TransportError, match=said):
            upload_blobs(remote, [LocalFile.of(big_file)], "/home/lab/bulk/refused")
    assert used == ["receive"] and empty.read_text() == ""  # nothing accepted, nothing recorded

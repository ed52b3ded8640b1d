"""radeonlab.jobs.ssh: quoting, secrets off the command line, host keys, the host tools, and the transfers
(jobs/ssh/transfer.py with jobs/host/receive.py and send.py): verified, resumable, never a half file under
its real name.

The quoting tests run the quoted line through a local POSIX shell (what sshd does on the host); the
`sandbox` tests run against a real SSH host from radeonlab/sandbox (SIMULATED workstation, real sshd).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from radeonlab.errors import HostKeyError, RemoteCommandError, TransportError
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.ssh import hostcode
from radeonlab.jobs.ssh.connection import SETTINGS, Remote, connect, env_prologue, quote_argv
from radeonlab.jobs.ssh.transfer import LocalFile, fetch, sha256_file, upload_blobs
from tests.conftest import inventory_target, module_host

HOSTILE = [
    "plain",
    "two words",
    "it's",
    'say "hi"',
    "a;rm -rf ~",
    "$(touch /tmp/pwned)",
    "`id`",
    "../../etc/passwd",
    "ünïcödé ✓",
    "line1\nline2",
    "tab\there",
    "*",
    "-n",
    "",
    "back\\slash",
    "$HOME ${PATH}",
]
ECHO_ARGV = [sys.executable, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))"]


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_quote_argv_round_trips_hostile_arguments(shell: str) -> None:
    line = quote_argv([*ECHO_ARGV, *HOSTILE])
    out = subprocess.run([shell, "-c", line], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == HOSTILE


def test_quote_argv_refuses_what_cannot_be_sent() -> None:
    with pytest.raises(ValueError, match="NUL"):
        quote_argv(["echo", "a\0b"])
    with pytest.raises(ValueError, match="empty"):
        quote_argv([])


def test_env_prologue_exports_exact_values_and_rejects_bad_names() -> None:
    value = 'tok\'en $(id) "x"\nsecond line'
    script = env_prologue({"HF_TOKEN": value}) + "exec printenv HF_TOKEN\n"
    out = subprocess.run(["bash", "-s"], input=script, capture_output=True, text=True, check=True).stdout
    assert out == value + "\n"
    with pytest.raises(ValueError, match="not an environment variable name"):
        env_prologue({"A=B; id": "x"})


# --- against a sandbox host --------------------------------------------------------------------------
host = module_host("xport")


@pytest.fixture(params=["openssh", "paramiko"])
def target(  # noqa: ANN001
    host, sandbox, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> HostTarget:
    """Every test twice: bulk copies through OpenSSH's client, and through paramiko (the fallback), each
    from an empty transfer folder (the host is shared by the module)."""
    monkeypatch.setenv("RADEONLAB_BULK_TRANSPORT", request.param)
    made = inventory_target(sandbox, host, monkeypatch)
    with connect(made) as remote:
        remote.run(["rm", "-rf", XFER])
    return made


@pytest.fixture
def big_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.getbasetemp() / "big-50MB.bin"
    if not path.exists():
        with open(path, "wb") as f:
            for _ in range(50):
                f.write(os.urandom(1_000_000))
    return path


def _interrupt_after(remote, threshold: int):  # noqa: ANN001, ANN202
    """A progress callback that closes the connection from another thread once `threshold` bytes moved."""
    fired = threading.Event()

    def progress(done: int, total: int) -> None:
        if done >= threshold and not fired.is_set():
            fired.set()
            closer = threading.Thread(target=remote.close)
            closer.start()
            closer.join()

    return progress


BLOBS = "/home/lab/xfer/blobs dir"  # a content store (<jobs_dir>/../blobs on a provisioned host)
XFER = "/home/lab/xfer"


def put_text(remote: Remote, path: str, text: str) -> None:
    """Write a file on the host through stdin (for test set-ups)."""
    remote.run(["sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1"', "sh", path], stdin_text=text)


def exists(remote: Remote, path: str) -> bool:
    return remote.run(["test", "-e", path], check=False).ok


def remote_sha256(remote: Remote, path: str) -> str:
    return remote.run(["sha256sum", path]).stdout.split()[0]


def link(remote: Remote, job_dir: str, links: dict[str, str]) -> None:
    """Hard-link blobs into a job folder with the stage tool, as submit does: {dest: sha256}."""
    request = {
        "job_dir": job_dir,
        "blobs": BLOBS,
        "links": [{"sha256": h, "dest": d} for d, h in links.items()],
    }
    remote.tool("stage", stdin_text=json.dumps(request))


@pytest.mark.sandbox
def test_run_passes_hostile_arguments_exactly(target: HostTarget) -> None:
    with connect(target) as remote:
        result = remote.run([*["python3", "-c", ECHO_ARGV[2]], *HOSTILE])
        assert json.loads(result.stdout) == HOSTILE
        assert not exists(remote, "/tmp/pwned")
        failed = remote.run(["sh", "-c", "echo oops >&2; exit 7"], check=False)
        assert (failed.exit_code, failed.stderr) == (7, "oops\n")
        with pytest.raises(RemoteCommandError, match="exited 7: oops"):
            remote.run(["sh", "-c", "echo oops >&2; exit 7"])
        script = remote.run(
            ["bash", "-c", 'printf "%s|" "$@"; echo "$GREETING"', "bash", "a b", "$(id)"],
            env={"GREETING": "hi"},
        )
        assert script.stdout == "a b|$(id)|hi\n"
        put_text(remote, "/tmp/hostile 'name'.txt", "ünï\n")
        assert remote.run(["cat", "/tmp/hostile 'name'.txt"]).stdout == "ünï\n"


@pytest.mark.sandbox
def test_secret_env_never_appears_in_any_command_line(target: HostTarget) -> None:
    secret = "hf_" + os.urandom(8).hex()
    scan = "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '; echo; printf 'env=%s\\n' \"$HF_TOKEN\"; cat"
    with connect(target) as remote:
        result = remote.run(["bash", "-c", scan], env={"HF_TOKEN": secret}, stdin_text="from stdin\n")
    listing, env_line, stdin_line = result.stdout.rsplit("\n", 3)[:3]
    assert secret not in listing  # every process's argv on the host, including our own shells
    assert env_line == f"env={secret}"
    assert stdin_line == "from stdin"


@pytest.mark.sandbox
def test_host_code_is_installed_on_first_use_and_then_reused(target: HostTarget) -> None:
    code = f"{SETTINGS['code_dir']}/{hostcode.digest()}"
    with connect(target) as remote:
        remote.run(["sh", "-c", 'rm -rf "$HOME/$1"', "sh", code])
        probe = remote.tool("probe", ["--record", "/nowhere/host.json", "--jobs", "none"]).last_json()
        assert probe["record"] is None and probe["record_error"] == "no host record"
        shipped = "radeonlab/jobs/host/launcher.py"
        digest = remote.run(["sh", "-c", 'sha256sum "$HOME/$1/$2"', "sh", code, shipped]).stdout.split()[0]
        assert digest == hostcode.file_digests()[shipped]
        remote.run(["sh", "-c", 'touch "$HOME/$1/marker"', "sh", code])
    with connect(target) as remote:  # a new connection: the code is found, not sent again
        assert remote.tool("probe", ["--record", "/nowhere/host.json", "--jobs", "none"]).ok
        assert remote.run(["sh", "-c", 'test -e "$HOME/$1/marker"', "sh", code], check=False).ok


@pytest.mark.sandbox
def test_upload_and_fetch_50mb_with_matching_checksums(
    target: HostTarget, big_file: Path, tmp_path: Path
) -> None:
    big = LocalFile.of(big_file)
    blob = f"{BLOBS}/sha256/{big.sha256}"
    with connect(target) as remote:
        have, sent = upload_blobs(remote, [big], BLOBS)
        assert have == set() and sent == big.size
        assert remote_sha256(remote, blob) == big.sha256 and not exists(remote, blob + ".part")
        assert remote.run(["stat", "-c", "%a", blob]).stdout.strip() == "440"  # shared by links: read-only
        link(remote, f"{XFER}/job 1", {"data/big.bin": big.sha256})
        report = fetch(remote, f"{XFER}/job 1", tmp_path / "back", names=["data/big.bin"])
    assert report.bytes_received == big.size and [f.sha256 for f in report.files] == [big.sha256]
    assert sha256_file(tmp_path / "back/data/big.bin") == big.sha256
    assert not (tmp_path / "back/data/big.bin.part").exists()


@pytest.mark.sandbox
def test_upload_with_wrong_hash_keeps_nothing(target: HostTarget, tmp_path: Path) -> None:
    src = tmp_path / "small.txt"
    src.write_text("content\n")
    lying = LocalFile(src, "0" * 64, src.stat().st_size)
    with connect(target) as remote:
        with pytest.raises(TransportError, match="sha256 mismatch"):
            upload_blobs(remote, [lying], BLOBS)
        blob = f"{BLOBS}/sha256/{'0' * 64}"
        assert not exists(remote, blob) and not exists(remote, blob + ".part")


@pytest.mark.sandbox
def test_interrupted_upload_leaves_only_a_part_and_resumes(target: HostTarget, big_file: Path) -> None:
    blobs = f"{XFER}/resume-up"
    big = LocalFile.of(big_file)
    blob = f"{blobs}/sha256/{big.sha256}"
    remote = connect(target)
    with pytest.raises(TransportError, match="connection lost after"):
        upload_blobs(remote, [big], blobs, _interrupt_after(remote, 10_000_000))
    with connect(target) as remote:
        assert not exists(remote, blob)  # no job could link a half file under the real name
        kept = int(remote.run(["stat", "-c", "%s", blob + ".part"]).stdout)
        assert 0 < kept < big.size
        have, sent = upload_blobs(remote, [big], blobs)
        assert have == set() and 0 < sent < big.size  # only the rest went over the wire
        assert remote_sha256(remote, blob) == big.sha256 and not exists(remote, blob + ".part")


@pytest.mark.sandbox
def test_part_that_is_not_a_prefix_is_restarted(target: HostTarget, tmp_path: Path) -> None:
    src = tmp_path / "data.bin"
    src.write_bytes(b"A" * 100_000)
    data = LocalFile.of(src)
    blob = f"{BLOBS}/sha256/{data.sha256}"
    other = tmp_path / "other.bin"
    other.write_bytes(b"makes the store")
    with connect(target) as remote:
        upload_blobs(remote, [LocalFile.of(other)], BLOBS)  # the store's folders, as the host tool makes them
        put_text(remote, blob + ".part", "B" * 5000)
        _, sent = upload_blobs(remote, [data], BLOBS)
        assert sent == 100_000  # the resumed bytes did not hash right: sent again from zero
        assert remote_sha256(remote, blob) == data.sha256 and not exists(remote, blob + ".part")


@pytest.mark.sandbox
def test_interrupted_download_keeps_the_complete_old_file_and_resumes(
    target: HostTarget, big_file: Path, tmp_path: Path
) -> None:
    big = LocalFile.of(big_file)
    local = tmp_path / "data/down.bin"
    local.parent.mkdir()
    local.write_bytes(b"an older complete result\n")
    with connect(target) as remote:
        upload_blobs(remote, [big], BLOBS)
        link(remote, f"{XFER}/job 2", {"data/down.bin": big.sha256})
    remote = connect(target)
    with pytest.raises(TransportError, match="connection lost downloading"):
        interrupt = _interrupt_after(remote, 10_000_000)
        fetch(remote, f"{XFER}/job 2", tmp_path, ["data/down.bin"], progress=interrupt)
    assert local.read_bytes() == b"an older complete result\n"
    part = tmp_path / "data/down.bin.part"
    assert 0 < part.stat().st_size < big.size
    with connect(target) as remote:
        report = fetch(remote, f"{XFER}/job 2", tmp_path, ["data/down.bin"])
    assert 0 < report.bytes_received < big.size
    assert sha256_file(local) == big.sha256 and not part.exists()


@pytest.mark.sandbox
def test_hostile_file_name_round_trips(target: HostTarget, tmp_path: Path) -> None:
    name = "we'ird $(id) `x`; ü\nname *.bin"
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(300_000))
    data = LocalFile.of(src)
    with connect(target) as remote:
        upload_blobs(remote, [data], BLOBS)
        link(remote, f"{XFER}/job 3", {f"data/{name}": data.sha256})
        listed = remote.run(
            ["python3", "-c", f"import os; print(repr(os.listdir({XFER + '/job 3/data'!r})))"]
        )
        assert repr(name) in listed.stdout
        fetch(remote, f"{XFER}/job 3", tmp_path / "back", [f"data/{name}"])
    assert (tmp_path / "back" / "data" / name).read_bytes() == src.read_bytes()


@pytest.mark.sandbox
def test_unknown_host_key_is_refused_with_the_accept_command(target: HostTarget, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    stranger = dataclasses.replace(target, known_hosts_file=str(known))
    with pytest.raises(HostKeyError) as err:
        connect(stranger)
    message = str(err.value)
    assert "\n" not in message and "SHA256:" in message and "Verify that fingerprint" in message
    command = message.split("accept it with: ", 1)[1]
    assert command == f"ssh-keyscan -p {target.port} -t ed25519 {target.hostname} >> {known}"
    subprocess.run(command, shell=True, check=True, capture_output=True)  # what the user would run
    with connect(stranger) as remote:
        assert remote.run(["true"]).ok


@pytest.mark.sandbox
def test_inventory_without_a_key_fails_authentication_in_one_line(target: HostTarget) -> None:
    keyless = dataclasses.replace(target, key_filename=None, allow_agent=False, look_for_keys=False)
    with pytest.raises(TransportError) as err:
        connect(keyless)
    assert "authentication failed" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.sandbox
def test_accept_new_records_the_key_once(target: HostTarget, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    trusting = dataclasses.replace(target, known_hosts_file=str(known), strict_host_key_checking="accept-new")
    with connect(trusting) as remote:
        assert remote.run(["true"]).ok
    assert known.read_text().startswith(f"[{target.hostname}]:{target.port} ssh-ed25519 ")


@pytest.mark.sandbox
def test_changed_host_key_is_refused(target: HostTarget, tmp_path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    other = (tmp_path / "other.pub").read_text().split()[:2]
    known = tmp_path / "known_hosts"
    known.write_text(f"{target.known_hosts_name} {' '.join(other)}\n")
    with pytest.raises(HostKeyError, match="HOST KEY CHANGED.*Refusing to connect"):
        connect(dataclasses.replace(target, known_hosts_file=str(known)))


@pytest.mark.sandbox
def test_connection_uses_gcm_and_nodelay(target: HostTarget) -> None:
    import socket

    with connect(target) as remote:
        transport = remote._client.get_transport()
        assert transport.local_cipher == "aes128-gcm@openssh.com"
        assert transport.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


def test_sha256_file_prefix(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abcdef")
    assert sha256_file(path) == hashlib.sha256(b"abcdef").hexdigest()
    assert sha256_file(path, 3) == hashlib.sha256(b"abc").hexdigest()


def test_closing_a_channel_on_a_lost_connection_keeps_the_error_that_said_so() -> None:
    """A transfer that lost its connection raises TransportError inside `with open_tool(...)`; the channel's
    close then meets the dead transport (paramiko raises EOFError sending the close): that must not replace
    the TransportError (seen on CI: test_faults' cut fetch ended in a bare EOFError)."""
    from radeonlab.errors import TransportError
    from radeonlab.jobs.ssh.connection import Channel

    class DeadChannel:
        def makefile(self, _mode: str) -> object:
            return object()

        def close(self) -> None:
            raise EOFError()

    with pytest.raises(TransportError, match="connection lost"), Channel(None, DeadChannel()):  # type: ignore[arg-type]
        raise TransportError("ws1: connection lost downloading x")

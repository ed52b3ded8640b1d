"""radeonlab.jobs.ssh.connection: quoting, secrets off the command line, host keys, atomic resumable
transfers.

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
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.ssh.connection import (
    ChangedHostKeyError,
    RemoteCommandError,
    TransportError,
    UnknownHostKeyError,
    connect,
    env_prologue,
    quote_argv,
    sha256_file,
)

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


@pytest.fixture
def target(host, sandbox, monkeypatch: pytest.MonkeyPatch) -> HostTarget:  # noqa: ANN001
    return inventory_target(sandbox, host, monkeypatch)


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


@pytest.mark.sandbox
def test_run_passes_hostile_arguments_exactly(target: HostTarget) -> None:
    with connect(target) as remote:
        result = remote.run([*["python3", "-c", ECHO_ARGV[2]], *HOSTILE])
        assert json.loads(result.stdout) == HOSTILE
        assert not remote.exists("/tmp/pwned")
        failed = remote.run(["sh", "-c", "echo oops >&2; exit 7"], check=False)
        assert (failed.exit_code, failed.stderr) == (7, "oops\n")
        with pytest.raises(RemoteCommandError, match="exited 7: oops"):
            remote.run(["sh", "-c", "echo oops >&2; exit 7"])
        script = remote.run_script(
            'printf "%s|" "$@"; echo "$GREETING"\n', ["a b", "$(id)"], env={"GREETING": "hi"}
        )
        assert script.stdout == "a b|$(id)|hi\n"
        remote.write_text_atomic("/tmp/hostile 'name'.txt", "ünï\n")
        assert remote.read_text("/tmp/hostile 'name'.txt") == "ünï\n"


@pytest.mark.sandbox
def test_secret_env_never_appears_in_any_command_line(target: HostTarget) -> None:
    secret = "hf_" + os.urandom(8).hex()
    scan = "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '; echo; printf 'env=%s\\n' \"$HF_TOKEN\"; cat"
    with connect(target) as remote:
        result = remote.run(["bash", "-c", scan], secret_env={"HF_TOKEN": secret}, stdin_text="from stdin\n")
    listing, env_line, stdin_line = result.stdout.rsplit("\n", 3)[:3]
    assert secret not in listing  # every process's argv on the host, including our own shells
    assert env_line == f"env={secret}"
    assert stdin_line == "from stdin"


@pytest.mark.sandbox
def test_put_and_get_50mb_with_matching_checksums(target: HostTarget, big_file: Path, tmp_path: Path) -> None:
    dest = "/home/lab/xfer/dir with space/big.bin"
    with connect(target) as remote:
        assert remote.put_file(big_file, dest) == big_file.stat().st_size
        remote_sum = remote.run(["sha256sum", dest]).stdout.split()[0]
        assert remote_sum == sha256_file(big_file)
        assert not remote.exists(dest + ".part")
        back = tmp_path / "back.bin"
        assert remote.get_file(dest, back) == big_file.stat().st_size
    assert sha256_file(back) == remote_sum
    assert not (tmp_path / "back.bin.part").exists()


@pytest.mark.sandbox
def test_put_with_wrong_expected_hash_keeps_nothing(target: HostTarget, tmp_path: Path) -> None:
    src = tmp_path / "small.txt"
    src.write_text("content\n")
    with connect(target) as remote:
        with pytest.raises(TransportError, match="sha256 mismatch"):
            remote.put_file(src, "/tmp/wrong-hash.txt", expected_sha256="0" * 64)
        assert not remote.exists("/tmp/wrong-hash.txt") and not remote.exists("/tmp/wrong-hash.txt.part")


@pytest.mark.sandbox
def test_interrupted_upload_leaves_only_a_part_and_resumes(target: HostTarget, big_file: Path) -> None:
    dest = "/home/lab/xfer/resume-up.bin"
    size = big_file.stat().st_size
    remote = connect(target)
    with pytest.raises(TransportError, match="connection lost uploading"):
        remote.put_file(big_file, dest, _interrupt_after(remote, 10_000_000))
    with connect(target) as remote:
        assert not remote.exists(dest)  # no job could read a half file under the real name
        kept = int(remote.run(["stat", "-c", "%s", dest + ".part"]).stdout)
        assert 0 < kept < size
        sent = remote.put_file(big_file, dest)
        assert 0 < sent < size  # only the rest went over the wire
        assert remote.run(["sha256sum", dest]).stdout.split()[0] == sha256_file(big_file)
        assert not remote.exists(dest + ".part")


@pytest.mark.sandbox
def test_part_that_is_not_a_prefix_is_restarted(target: HostTarget, tmp_path: Path) -> None:
    src = tmp_path / "data.bin"
    src.write_bytes(b"A" * 100_000)
    with connect(target) as remote:
        remote.write_text_atomic("/tmp/notprefix.bin.part", "B" * 5000)
        assert remote.put_file(src, "/tmp/notprefix.bin") == 100_000
        assert remote.run(["sha256sum", "/tmp/notprefix.bin"]).stdout.split()[0] == sha256_file(src)


@pytest.mark.sandbox
def test_interrupted_download_keeps_the_complete_old_file_and_resumes(
    target: HostTarget, big_file: Path, tmp_path: Path
) -> None:
    remote_path = "/home/lab/xfer/resume-down.bin"
    local = tmp_path / "down.bin"
    local.write_bytes(b"an older complete result\n")
    with connect(target) as remote:
        remote.put_file(big_file, remote_path)
    remote = connect(target)
    with pytest.raises(TransportError, match="connection lost downloading"):
        remote.get_file(remote_path, local, _interrupt_after(remote, 10_000_000))
    assert local.read_bytes() == b"an older complete result\n"
    part = tmp_path / "down.bin.part"
    assert 0 < part.stat().st_size < big_file.stat().st_size
    with connect(target) as remote:
        received = remote.get_file(remote_path, local)
    assert 0 < received < big_file.stat().st_size
    assert sha256_file(local) == sha256_file(big_file) and not part.exists()


@pytest.mark.sandbox
def test_hostile_file_name_round_trips(target: HostTarget, tmp_path: Path) -> None:
    name = "we'ird $(id) `x`; ü\nname *.bin"
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(300_000))
    with connect(target) as remote:
        remote.put_file(src, f"/home/lab/xfer/{name}")
        listed = remote.run(["python3", "-c", "import os; print(repr(os.listdir('/home/lab/xfer')))"]).stdout
        assert repr(name) in listed
        remote.get_file(f"/home/lab/xfer/{name}", tmp_path / name)
    assert (tmp_path / name).read_bytes() == src.read_bytes()


@pytest.mark.sandbox
def test_unknown_host_key_is_refused_with_the_accept_command(target: HostTarget, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    stranger = dataclasses.replace(target, known_hosts_file=str(known))
    with pytest.raises(UnknownHostKeyError) as err:
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
    with pytest.raises(ChangedHostKeyError, match="HOST KEY CHANGED.*Refusing to connect"):
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

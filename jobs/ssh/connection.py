"""SSH to the workstations: the only module that imports fabric (and paramiko, its engine).

A fabric `Connection` holds the one SSH connection per host per command; it is built with explicit settings
because everything fabric would add by default is what the job runner must NOT do (read ~/.ssh/config, use
the agent, auto-add unknown host keys). Commands and transfers then use raw exec channels of that
connection's paramiko client rather than `Connection.run`/`put`/`get`: a poll costs ~8 ms there vs ~25 ms
through invoke's runner threads, and fabric's SFTP defaults reach only ~0.6x scp (speed.md).

- host keys only from the inventory's known_hosts file; an unknown key is refused with the one command that
  accepts it, a changed key is refused loudly; ~/.ssh/config is never read; no agent, no ~/.ssh/id_* unless
  the inventory asks;
- TCP_NODELAY on the socket and the AES-GCM cipher first (both measured faster here, speed.md);
- files stream through an exec channel into a small python3 receiver/sender on the host (1.2-1.4x scp in
  speed.md): uploads land in `<dest>.part`, are fsync'd, size- (and optionally sha256-) checked and renamed;
  an interrupted upload resumes when the `.part` is a prefix of the local file (checked by sha256 on both
  sides); downloads land in a local `.part`, are checked against the host's own sha256, then renamed;
- every command line is built by `quote_argv`; environment values travel on stdin, never in argv.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import re
import shlex
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import fabric
import paramiko
from radeonlab.jobs.fleet.inventory import HostTarget

Progress = Callable[[int, int], None]  # (bytes_done, total)

SETTINGS: dict[str, Any] = {
    "connect_timeout": 15.0,  # seconds for TCP connect, SSH banner and authentication each
    # Proposed first (every OpenSSH since 6.2 offers them); the others follow in paramiko's order.
    "preferred_ciphers": ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com"),
    "block_size": 1 << 20,  # bytes read from a local file per send / per receive call
    "remote_python": "python3",
    "partial_suffix": ".part",
    # after a failed send: how long to wait for the host's exit status, which tells a receiver that stopped
    # on its own (disk full: its reason is on stderr) from a lost connection (no status ever comes)
    "exit_status_wait_s": 1.0,
}

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Runs on the host: receive stdin into <dest>.part (resuming when asked), fsync, check size (and sha256),
# rename to <dest>. First line out: what the .part already holds; first line in: where to start writing.
_RECEIVER = r"""
import fcntl, hashlib, json, os, sys
dest, total, want = sys.argv[1], int(sys.argv[2]), sys.argv[3]
part = dest + sys.argv[4]
out = sys.stdout
os.makedirs(os.path.dirname(part) or ".", exist_ok=True)
fd = os.open(part, os.O_RDWR | os.O_CREAT, 0o666)
fcntl.flock(fd, fcntl.LOCK_EX)  # an interrupted receiver may still be writing: wait for it
have = os.fstat(fd).st_size
h = hashlib.sha256()
if 0 < have <= total:
    for b in iter(lambda: os.read(fd, 1 << 20), b""):
        h.update(b)
else:
    have = 0
out.write(json.dumps({"have": have, "sha256": h.hexdigest() if have else ""}) + "\n")
out.flush()
line = b""
while not line.endswith(b"\n"):  # byte by byte: what follows on fd 0 is the file, left unbuffered
    c = os.read(0, 1)
    if not c:
        sys.exit(3)
    line += c
start = int(line)
if start != have:
    h = hashlib.sha256()
os.ftruncate(fd, start)
os.lseek(fd, start, 0)
n = start
if not want and hasattr(os, "splice"):  # nothing to hash: pipe -> file inside the kernel
    while True:
        k = os.splice(0, fd, 1 << 20)
        if not k:
            break
        n += k
else:
    while True:
        b = os.read(0, 1 << 20)
        if not b:
            break
        view = memoryview(b)
        while view:
            view = view[os.write(fd, view):]
        h.update(b)
        n += len(b)
os.fsync(fd)
if n != total:
    print(json.dumps({"error": "incomplete: %d of %d bytes arrived; %s kept for resume" % (n, total, part)}))
    sys.exit(3)
digest = h.hexdigest()
if want and digest != want:
    os.unlink(part)
    print(json.dumps({"error": "sha256 mismatch: got %s, expected %s" % (digest, want)}))
    sys.exit(4)
os.rename(part, dest)
os.close(fd)
dfd = os.open(os.path.dirname(dest) or ".", os.O_RDONLY)
os.fsync(dfd)
os.close(dfd)
print(json.dumps({"size": n, "sha256": digest}))
"""

# Runs on the host: header line {"size", "start"}, then the file's bytes from `start` on stdout; the sha256
# of the whole file (prefix included) on stderr at the end, so the laptop can check what it assembled.
_SENDER = r"""
import hashlib, json, os, sys
path, start, want_hash = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
out = sys.stdout.buffer
with open(path, "rb") as f:
    size = os.fstat(f.fileno()).st_size
    if start > size:
        start = 0
    h = hashlib.sha256()
    rest = start if want_hash else 0
    while rest:
        b = f.read(min(rest, 1 << 20))
        if not b:
            break
        h.update(b)
        rest -= len(b)
    out.write((json.dumps({"size": size, "start": start}) + "\n").encode())
    out.flush()
    pos, end = start, size
    if not want_hash:  # the laptop already knows the hash: file -> pipe inside the kernel
        while pos < end:
            k = os.sendfile(1, f.fileno(), pos, min(end - pos, 1 << 24))
            if not k:
                break
            pos += k
    else:
        f.seek(start)
        while pos < end:
            b = f.read(min(end - pos, 1 << 20))
            if not b:
                break
            h.update(b)
            out.write(b)
            pos += len(b)
        out.flush()
sys.stderr.write(json.dumps({"sha256": h.hexdigest() if want_hash else ""}))
"""


class TransportError(Exception):
    """Anything that went wrong talking to a host; the message is meant for the user as is."""


class UnknownHostKeyError(TransportError):
    """The host offered a key that the known_hosts file does not list."""


class ChangedHostKeyError(TransportError):
    """The host offered a different key than the one the known_hosts file lists for it."""


class RemoteCommandError(TransportError):
    """A remote command exited non-zero (with check=True)."""

    def __init__(self, message: str, result: RunResult) -> None:
        super().__init__(message)
        self.result = result


@dataclass(frozen=True)
class RunResult:
    stdout: str
    stderr: str
    exit_code: int

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def quote_argv(argv: Sequence[str | os.PathLike[str]]) -> str:
    """The one quoting helper: a command line that the remote POSIX shell splits back into exactly `argv`."""
    parts = [os.fspath(a) for a in argv]
    if not parts:
        raise ValueError("empty command")
    if any("\0" in p for p in parts):
        raise ValueError("a command argument contains a NUL byte, which no remote command can receive")
    return shlex.join(parts)


def env_prologue(env: Mapping[str, str]) -> str:
    """`export NAME='value'` lines for a script read by `bash -s` from stdin (never seen in argv or ps)."""
    lines = []
    for name, value in env.items():
        if not _ENV_NAME.match(name):
            raise ValueError(f"not an environment variable name: {name!r}")
        if "\0" in str(value):
            raise ValueError(f"environment value of {name} contains a NUL byte")
        lines.append(f"export {name}={shlex.quote(str(value))}\n")
    return "".join(lines)


def sha256_file(path: Path, limit: int | None = None) -> str:
    """sha256 of a local file (or of its first `limit` bytes), streamed."""
    h = hashlib.sha256()
    rest = limit
    with open(path, "rb") as f:
        while rest is None or rest > 0:
            block = f.read(SETTINGS["block_size"] if rest is None else min(rest, SETTINGS["block_size"]))
            if not block:
                break
            h.update(block)
            if rest is not None:
                rest -= len(block)
    return h.hexdigest()


_KEYSCAN_TYPES = {"ssh-ed25519": "ed25519", "ssh-rsa": "rsa", "ecdsa-sha2-nistp256": "ecdsa"}


class _HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """Unknown key: refuse with the accept command ("yes"), or record it like OpenSSH's accept-new."""

    def __init__(self, target: HostTarget) -> None:
        self.target = target

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        t = self.target
        if t.strict_host_key_checking == "accept-new":
            Path(t.known_hosts_file).parent.mkdir(parents=True, exist_ok=True)
            with open(t.known_hosts_file, "a", encoding="utf-8") as f:
                f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
            client.get_host_keys().add(hostname, key.get_name(), key)
            return
        kind = _KEYSCAN_TYPES.get(key.get_name())
        scan = ["ssh-keyscan", "-p", str(t.port)] + (["-t", kind] if kind else []) + [t.hostname]
        raise UnknownHostKeyError(
            f"{t.name}: unknown host key for {hostname} ({key.get_name()} {key.fingerprint}); refusing to "
            f"connect. Verify that fingerprint on the host itself "
            f"(ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub) "
            f"and accept it with: {quote_argv(scan)} >> {shlex.quote(t.known_hosts_file)}"
        )


def _transport_factory(sock: Any, **kwargs: Any) -> paramiko.Transport:
    """A paramiko Transport that proposes AES-GCM first (faster here than paramiko's aes-ctr + HMAC)."""
    transport = paramiko.Transport(sock, **kwargs)
    options = transport.get_security_options()
    gcm = tuple(c for c in SETTINGS["preferred_ciphers"] if c in options.ciphers)
    options.ciphers = gcm + tuple(c for c in options.ciphers if c not in gcm)
    return transport


def connect(target: HostTarget) -> Remote:
    """Open one SSH connection to `target` (use as a context manager; reuse it for the whole command)."""
    timeout = SETTINGS["connect_timeout"]
    where = f"{target.name} ({target.hostname}:{target.port})"
    try:
        sock = socket.create_connection((target.hostname, target.port), timeout=timeout)
    except OSError as exc:
        raise TransportError(f"cannot reach {where}: {exc.strerror or exc}") from None
    # Small command/response exchanges otherwise wait on Nagle + delayed ACK (~40 ms per poll, speed.md).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn = fabric.Connection(
        target.hostname,
        user=target.user,
        port=target.port,
        config=fabric.Config(overrides={"load_ssh_configs": False}),  # never ~/.ssh/config
        connect_kwargs={
            # fabric iterates key_filename: no key in the inventory means an empty list, not None
            "key_filename": [target.key_filename] if target.key_filename else [],
            "sock": sock,
            "timeout": timeout,
            "banner_timeout": timeout,
            "auth_timeout": timeout,
            "allow_agent": target.allow_agent,
            "look_for_keys": target.look_for_keys,
            "transport_factory": _transport_factory,
        },
    )
    client = conn.client
    # fabric's default policy auto-adds unknown keys: replace it with the inventory's known_hosts + ours.
    if Path(target.known_hosts_file).is_file():
        client.load_host_keys(target.known_hosts_file)
    client.set_missing_host_key_policy(_HostKeyPolicy(target))
    try:
        conn.open()
    except paramiko.BadHostKeyException as exc:
        conn.close()
        raise ChangedHostKeyError(
            f"{target.name}: HOST KEY CHANGED for {target.known_hosts_name}: {target.known_hosts_file} "
            f"lists {exc.expected_key.get_name()} {exc.expected_key.fingerprint}, the host offers "
            f"{exc.key.get_name()} {exc.key.fingerprint}. Someone may be intercepting the connection, or the "
            f"host was reinstalled. Refusing to connect. Only if you know it was reinstalled: "
            f"{quote_argv(['ssh-keygen', '-R', target.known_hosts_name, '-f', target.known_hosts_file])}"
        ) from None
    except UnknownHostKeyError:
        conn.close()
        raise
    except paramiko.AuthenticationException as exc:
        conn.close()
        raise TransportError(
            f"{where}: authentication failed as {target.user} with key {target.key_filename}: {exc}"
        ) from None
    except (paramiko.SSHException, OSError, EOFError) as exc:
        conn.close()
        if "No authentication methods available" in str(exc):
            raise TransportError(
                f"{where}: authentication failed: no SSH key to offer (set ssh_key for this host in the "
                "inventory, or ssh_allow_agent: true)"
            ) from None
        raise TransportError(f"{where}: SSH connection failed: {exc}") from None
    return Remote(target, conn)


class Remote:
    """One open SSH connection to a workstation: run commands, move files."""

    def __init__(self, target: HostTarget, conn: fabric.Connection) -> None:
        self.target = target
        self._conn = conn
        self._client: paramiko.SSHClient = conn.client

    # --- lifecycle -------------------------------------------------------------------------------------
    def __enter__(self) -> Remote:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (safe from another thread: an ongoing transfer then fails and can resume)."""
        self._conn.close()

    # --- commands --------------------------------------------------------------------------------------
    def _channel(self, command: str, timeout: float | None) -> paramiko.Channel:
        transport = self._client.get_transport()
        if transport is None or not transport.is_active():
            raise TransportError(f"{self.target.name}: connection is closed")
        try:
            chan = transport.open_session(timeout=SETTINGS["connect_timeout"])
            chan.settimeout(timeout)
            chan.exec_command(command)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise TransportError(f"{self.target.name}: cannot start a remote command: {exc}") from None
        return chan

    def _exec(self, command: str, stdin: bytes | None, timeout: float | None) -> RunResult:
        """Run `command` (already quoted), feeding `stdin`; stdout/stderr drained concurrently."""
        chan = self._channel(command, timeout)
        errors: list[BaseException] = []
        err_chunks: list[bytes] = []

        def feed() -> None:
            try:
                if stdin:
                    chan.sendall(stdin)
                chan.shutdown_write()
            except (OSError, EOFError, paramiko.SSHException) as exc:  # remote exited without reading
                errors.append(exc)

        def drain_stderr() -> None:
            try:
                err_chunks.append(chan.makefile_stderr("rb").read())
            except (OSError, EOFError, paramiko.SSHException) as exc:
                errors.append(exc)

        threads = [
            threading.Thread(target=feed, daemon=True),
            threading.Thread(target=drain_stderr, daemon=True),
        ]
        for t in threads:
            t.start()
        try:
            out = chan.makefile("rb").read()
            for t in threads:
                t.join(timeout)
            code = chan.recv_exit_status()
        except TimeoutError:
            chan.close()
            raise TransportError(f"{self.target.name}: timed out after {timeout}s: {command[:200]}") from None
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise TransportError(f"{self.target.name}: connection lost: {exc}") from None
        finally:
            chan.close()
        if code == -1:  # no exit status: the channel or connection closed under us
            raise TransportError(f"{self.target.name}: connection lost while running: {command[:200]}")
        return RunResult(
            out.decode("utf-8", "replace"), b"".join(err_chunks).decode("utf-8", "replace"), code
        )

    def _checked(self, result: RunResult, what: str, check: bool) -> RunResult:
        if check and not result.ok:
            tail = (result.stderr.strip().splitlines() or ["(no stderr)"])[-1]
            raise RemoteCommandError(
                f"{self.target.name}: `{what[:200]}` exited {result.exit_code}: {tail}", result
            )
        return result

    def run(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        env: Mapping[str, str] | None = None,
        secret_env: Mapping[str, str] | None = None,
        check: bool = True,
        timeout: float | None = None,
        stdin_text: str | None = None,
    ) -> RunResult:
        """Run one program with exactly these arguments.

        `env` and `secret_env` (tokens) are never put on the command line: they are sent on stdin as
        `export` lines to `bash -s`, which then `exec`s the program; bash reads a script from a pipe one
        byte at a time, so the program still receives `stdin_text` as its stdin.
        """
        command = quote_argv(argv)
        stdin = stdin_text.encode() if stdin_text is not None else None
        variables = {**(env or {}), **(secret_env or {})}
        if variables:
            script = env_prologue(variables) + f"exec {command}\n"
            stdin = script.encode() + (stdin or b"")
            return self._checked(self._exec("bash -s", stdin, timeout), command, check)
        return self._checked(self._exec(command, stdin, timeout), command, check)

    def run_script(
        self,
        sh_text: str,
        args: Sequence[str | os.PathLike[str]] = (),
        *,
        env: Mapping[str, str] | None = None,
        secret_env: Mapping[str, str] | None = None,
        check: bool = True,
        timeout: float | None = None,
    ) -> RunResult:
        """Run a multi-line bash script sent on stdin (never interpolated); `args` arrive as $1, $2, ..."""
        variables = {**(env or {}), **(secret_env or {})}
        stdin = (env_prologue(variables) + sh_text).encode()
        command = quote_argv(["bash", "-s", "--", *args])
        first = (sh_text.strip().splitlines() or [""])[0]
        return self._checked(self._exec(command, stdin, timeout), f"bash script: {first}", check)

    def exists(self, path: str) -> bool:
        return self.run(["test", "-e", path], check=False).exit_code == 0

    def read_text(self, path: str) -> str:
        return self.run(["cat", "--", path]).stdout

    def write_text_atomic(self, path: str, text: str) -> None:
        """Write a small text file via a temporary sibling + fsync + rename: readers see old or new, whole."""
        script = 'set -e; tmp="$1.tmp.$$"; cat > "$tmp"; sync -- "$tmp"; mv -f -- "$tmp" "$1"'
        self.run(["bash", "-c", script, "bash", path], stdin_text=text)

    # --- files -----------------------------------------------------------------------------------------
    def put_file(
        self,
        local: str | Path,
        remote: str,
        progress: Progress | None = None,
        *,
        expected_sha256: str | None = None,
    ) -> int:
        """Upload `local` to `remote` atomically; returns the bytes sent (0 of a resumed prefix counted).

        Lands in `<remote>.part`; resumes it when it is a prefix of `local` (sha256 compared); the host
        fsyncs, checks size (and `expected_sha256` if given) and only then renames it to `remote`.
        """
        local = Path(local)
        total = local.stat().st_size
        argv = [
            SETTINGS["remote_python"],
            "-c",
            _RECEIVER,
            remote,
            str(total),
            expected_sha256 or "",
            SETTINGS["partial_suffix"],
        ]
        chan = self._channel(quote_argv(argv), None)
        sent = 0
        try:
            out = chan.makefile("rb")
            header = out.readline()
            if not header:
                raise TransportError(self._remote_failure(chan, f"upload of {remote} could not start"))
            probe = json.loads(header)
            start = 0
            if probe["have"] and sha256_file(local, probe["have"]) == probe["sha256"]:
                start = probe["have"]
            chan.sendall(f"{start}\n".encode())
            with open(local, "rb") as f:
                f.seek(start)
                if progress:
                    progress(start, total)
                while block := f.read(SETTINGS["block_size"]):
                    chan.sendall(block)
                    sent += len(block)
                    if progress:
                        progress(start + sent, total)
            chan.shutdown_write()
            tail = out.read()
            code = chan.recv_exit_status()
        except (OSError, EOFError, paramiko.SSHException) as exc:
            # The host's receiver may have stopped on its own (disk full, permission): it then exits with
            # its reason on stderr before closing; no exit status (-1: just closed) means the link broke.
            if chan.status_event.wait(SETTINGS["exit_status_wait_s"]) and chan.exit_status != -1:
                raise TransportError(
                    self._remote_failure(chan, f"upload of {local} to {remote} failed after {sent} bytes")
                ) from None
            raise TransportError(
                f"{self.target.name}: connection lost uploading {local} after {sent} bytes "
                f"({exc or 'closed'}); "
                f"{remote}{SETTINGS['partial_suffix']} is kept and the next upload resumes it"
            ) from None
        finally:
            chan.close()
        result = _last_json(tail)
        if code != 0 or "error" in result:
            raise TransportError(
                f"{self.target.name}: upload of {local} to {remote} failed: "
                f"{result.get('error', f'exit {code}')}"
            )
        return sent

    def get_file(
        self,
        remote: str,
        local: str | Path,
        progress: Progress | None = None,
        *,
        expected_sha256: str | None = None,
    ) -> int:
        """Download `remote` to `local`; returns bytes received.

        Lands in `<local>.part` (resumed if present), is checked against the sha256 the host computed while
        sending (and `expected_sha256` if given), then renamed over `local`: a complete local file is never
        replaced by a partial one. A resumed `.part` that turns out not to be a prefix is discarded and
        the download restarts once from zero.
        """
        local = Path(local)
        part = local.with_name(local.name + SETTINGS["partial_suffix"])
        received, digest, resumed = self._get_into(remote, part, progress, expected_sha256)
        if resumed and digest is None:  # the kept .part was not a prefix of the host's file
            part.unlink()
            more, digest, _ = self._get_into(remote, part, progress, expected_sha256)
            received += more
        if digest is None:
            part.unlink(missing_ok=True)
            raise TransportError(
                f"{self.target.name}: {remote} changed or arrived damaged (sha256 mismatch); nothing kept"
            )
        os.replace(part, local)
        return received

    def _get_into(
        self, remote: str, part: Path, progress: Progress | None, expected_sha256: str | None
    ) -> tuple[int, str | None, bool]:
        """Append `remote` to the local `part` from its current size; returns (received, sha256, resumed).

        sha256 is None when the assembled file does not match the host's (computed while sending, unless
        the caller already knows it). Writing and hashing run in a second thread: hashlib and file writes
        release the GIL, so they overlap with paramiko decrypting the next packets.
        """
        part.parent.mkdir(parents=True, exist_ok=True)
        start = part.stat().st_size if part.exists() else 0
        host_hashes = "0" if expected_sha256 else "1"
        argv = [SETTINGS["remote_python"], "-c", _SENDER, remote, str(start), host_hashes]
        chan = self._channel(quote_argv(argv), None)
        received = 0
        blocks: queue.Queue[bytes | None] = queue.Queue(maxsize=32)
        h = hashlib.sha256()
        try:
            header = _read_line(chan)
            if not header:
                raise TransportError(self._remote_failure(chan, f"download of {remote} failed"))
            info = json.loads(header)
            start, total = info["start"], info["size"]
            with open(part, "r+b" if part.exists() else "wb") as f:
                _hash_prefix(f, h, start)
                f.truncate(start)
                f.seek(start)

                def write_and_hash() -> None:
                    while (block := blocks.get()) is not None:
                        f.write(block)
                        h.update(block)

                writer = threading.Thread(target=write_and_hash, daemon=True)
                writer.start()
                try:
                    if progress:
                        progress(start, total)
                    while received < total - start:
                        block = chan.recv(min(SETTINGS["block_size"], total - start - received))
                        if not block:
                            break
                        blocks.put(block)
                        received += len(block)
                        if progress:
                            progress(start + received, total)
                finally:
                    blocks.put(None)
                    writer.join()
                f.flush()
                os.fsync(f.fileno())
            err = chan.makefile_stderr("rb").read()
            code = chan.recv_exit_status()
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise TransportError(
                f"{self.target.name}: connection lost downloading {remote} after {received} bytes "
                f"({exc or 'closed'}); {part} is kept and the next fetch resumes it"
            ) from None
        finally:
            chan.close()
        if received != total - start or code != 0:
            why = "connection lost downloading" if code == -1 else f"exit {code} while downloading"
            raise TransportError(
                f"{self.target.name}: {why} {remote} at {start + received} of {total} bytes; "
                f"{part} is kept and the next fetch resumes it"
            )
        want = expected_sha256 or _last_json(err).get("sha256")
        digest = h.hexdigest()
        return received, digest if digest == want else None, start > 0

    def _remote_failure(self, chan: paramiko.Channel, what: str) -> str:
        err = chan.makefile_stderr("rb").read().decode("utf-8", "replace").strip().splitlines()
        return f"{self.target.name}: {what}: {err[-1] if err else 'exit ' + str(chan.recv_exit_status())}"


def _hash_prefix(f: IO[bytes], h: Any, length: int) -> None:
    """Feed the first `length` bytes of the open file `f` into hash `h`."""
    f.seek(0)
    rest = length
    while rest:
        block = f.read(min(rest, SETTINGS["block_size"]))
        if not block:
            break
        h.update(block)
        rest -= len(block)


def _read_line(chan: paramiko.Channel) -> bytes:
    """One header line from a channel, read byte by byte so that nothing after it is consumed."""
    line = b""
    while not line.endswith(b"\n"):
        c = chan.recv(1)
        if not c:
            break
        line += c
    return line


def _last_json(data: bytes) -> dict[str, Any]:
    """The last line of a remote helper's output parsed as JSON ({} if there is none)."""
    lines = data.decode("utf-8", "replace").strip().splitlines()
    try:
        return json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        return {"error": lines[-1]}

"""SSH to the workstations: with jobs/ssh/transfer.py, the only place that imports fabric and paramiko.

A fabric `Connection` holds the one SSH connection per host per command, built with explicit settings because
everything fabric would add by default is what radeonlab must NOT do (read ~/.ssh/config, use the agent,
auto-add unknown host keys). Commands use raw exec channels of that connection's paramiko client: a round trip
costs ~8 ms there vs ~25 ms through invoke's runner threads (docs/notes/speed.md).

- host keys only from the inventory's known_hosts file; an unknown key is refused with the one command that
  accepts it, a changed key is refused loudly; no agent, no ~/.ssh/id_* unless the inventory asks;
- TCP_NODELAY on the socket and the AES-GCM cipher first (both measured faster here, docs/notes/speed.md);
- every command line is built by `quote_argv`; environment values travel on stdin, never in argv;
- radeonlab's host code (jobs/host + the contract) runs as `python3 -m radeonlab.jobs.host.<tool>` from a
  content-addressed folder on the host (~/.cache/radeonlab/code/<digest>); the first command that finds it
  missing uploads it (one tar stream) and runs again, so a new radeonlab version costs one upload per host;
- every paramiko/socket failure becomes a one-line TransportError naming the host.

Why this module is long: every way a command reaches a host (exec, host tool, stream channel, terminal)
shares the one connection's checks and error wording here.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shlex
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fabric
import paramiko

from radeonlab.errors import HostKeyError, RemoteCommandError, TransportError
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.ssh import hostcode

SETTINGS: dict[str, Any] = {
    "connect_timeout": 15.0,  # seconds for TCP connect, SSH banner and authentication each
    # Proposed first (every OpenSSH since 6.2 offers them); the others follow in paramiko's order.
    "preferred_ciphers": ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com"),
    "remote_python": "python3",  # the host's system python: host tools never depend on the training venv
    "code_dir": ".cache/radeonlab/code",  # relative to the SSH user's home, one folder per bundle digest
    "code_missing_exit": 97,  # the tool wrapper's "no code here yet" answer
}
# paramiko logs a failed handshake from its own thread with a traceback, which Python's last-resort handler
# prints under the one line radeonlab says about that host ("unreachable (...)"): keep it out of the terminal.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KEYSCAN_TYPES = {"ssh-ed25519": "ed25519", "ssh-rsa": "rsa", "ecdsa-sha2-nistp256": "ecdsa"}
# `sh -c` wrappers, with the paths as arguments ($1...): nothing of the user's is spliced into them.
_TOOL = 'd="$HOME/$1"; shift; [ -d "$d" ] || exit {missing}; PYTHONPATH="$d" exec "$@"'
_UNPACK = (  # into a temporary folder, then renamed: a reader never sees half of it; a racing twin is fine
    't="$HOME/$1.tmp.$$"; mkdir -p "$t" && tar -xf - -C "$t" && chmod -R go-w "$t" && '
    '(mv -T "$t" "$HOME/$1" 2>/dev/null || { rm -rf "$t"; test -d "$HOME/$1"; })'
)


@dataclass(frozen=True)
class RunResult:
    stdout: str
    stderr: str
    exit_code: int

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def last_json(self) -> dict[str, Any]:
        """The last stdout line that parses as a JSON object ({} if none)."""
        for line in reversed(self.stdout.strip().splitlines()):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict):
                return data
        return {}

    def stderr_tail(self) -> str:
        lines = [ln for ln in self.stderr.strip().splitlines() if ln.strip()]
        return lines[-1] if lines else f"exit {self.exit_code}"


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
        raise HostKeyError(
            f"{t.name}: unknown host key for {hostname} ({key.get_name()} {key.fingerprint}); refusing to "
            "connect. Verify that fingerprint on the host itself "
            "(ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub) "
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
    # Small command/response exchanges otherwise wait on Nagle + delayed ACK (~40 ms per poll,
    # docs/notes/speed.md).
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
        raise HostKeyError(
            f"{target.name}: HOST KEY CHANGED for {target.known_hosts_name}: {target.known_hosts_file} "
            f"lists {exc.expected_key.get_name()} {exc.expected_key.fingerprint}, the host offers "
            f"{exc.key.get_name()} {exc.key.fingerprint}. Someone may be intercepting the connection, or the "
            f"host was reinstalled. Refusing to connect. Only if you know it was reinstalled: "
            f"{quote_argv(['ssh-keygen', '-R', target.known_hosts_name, '-f', target.known_hosts_file])}"
        ) from None
    except HostKeyError:
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
        raise TransportError(f"{where}: SSH connection failed: {exc or type(exc).__name__}") from None
    return Remote(target, conn)


class Channel:
    """One running remote command with its stdin/stdout/stderr: for the host tools' stream protocols."""

    def __init__(self, remote: Remote, chan: paramiko.Channel) -> None:
        self.remote, self.chan = remote, chan
        self._out = chan.makefile("rb")

    def _lost(self, exc: BaseException) -> TransportError:
        return TransportError(f"{self.remote.target.name}: connection lost ({exc or type(exc).__name__})")

    def send_json(self, obj: Any) -> None:
        self.send((json.dumps(obj) + "\n").encode())

    def send(self, data: bytes | memoryview) -> None:
        try:
            self.chan.sendall(bytes(data) if isinstance(data, memoryview) else data)
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise self._lost(exc) from None

    def read_json(self) -> dict[str, Any] | None:
        """The next stdout line as JSON; None at the end of the output."""
        try:
            line = self._out.readline()
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise self._lost(exc) from None
        if not line:
            return None
        return json.loads(line)

    def read_into(self, view: memoryview) -> int:
        """Read up to len(view) bytes of stdout; 0 at the end."""
        try:
            return self._out.readinto(view)  # type: ignore[arg-type]  # paramiko fills any writable buffer
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise self._lost(exc) from None

    def close_input(self) -> None:
        try:
            self.chan.shutdown_write()
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise self._lost(exc) from None

    def finish(self, wait_s: float | None = None) -> tuple[int, str]:
        """(exit status, the last line of stderr); exit -1 when the connection closed without one."""
        if wait_s is not None and not self.chan.status_event.wait(wait_s):
            return -1, ""
        code = self.chan.recv_exit_status()
        err = b""
        while self.chan.recv_stderr_ready():
            err += self.chan.recv_stderr(65536)
        lines = [ln for ln in err.decode("utf-8", "replace").splitlines() if ln.strip()]
        return code, (lines[-1] if lines else "")

    def close(self) -> None:
        # On a connection already lost, paramiko raises while sending the close: the loss itself has been
        # (or will be) reported by whoever read or wrote; the close must not replace that error.
        with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            self.chan.close()

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Remote:
    """One open SSH connection to a workstation: run commands and radeonlab's host tools."""

    def __init__(self, target: HostTarget, conn: fabric.Connection) -> None:
        self.target = target
        self._conn = conn
        self._client: paramiko.SSHClient = conn.client
        self._code_ready = False
        self.on_close: list[Callable[[], None]] = []  # OpenSSH bulk copies on this host (jobs/ssh/openssh.py)

    def __enter__(self) -> Remote:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (safe from another thread: an ongoing transfer then fails and can resume)."""
        for stop in list(self.on_close):
            stop()
        self._conn.close()

    @property
    def is_active(self) -> bool:
        transport = self._client.get_transport()
        return transport is not None and transport.is_active()

    # --- commands --------------------------------------------------------------------------------------
    def _channel(self, command: str, timeout: float | None = None) -> paramiko.Channel:
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
        err_chunks: list[bytes] = []

        def feed() -> None:
            try:
                if stdin:
                    chan.sendall(stdin)
                chan.shutdown_write()
            except (OSError, EOFError, paramiko.SSHException):
                pass  # the command exited without reading all of it: its exit status says the rest

        def drain_stderr() -> None:
            with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
                err_chunks.append(chan.makefile_stderr("rb").read())

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
            raise RemoteCommandError(
                f"{self.target.name}: `{what[:200]}` exited {result.exit_code}: {result.stderr_tail()}",
                result,
            )
        return result

    def run(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        timeout: float | None = None,
        stdin_text: str | None = None,
    ) -> RunResult:
        """Run one program with exactly these arguments.

        `env` is never put on the command line: it is sent on stdin as `export` lines to `bash -s`, which
        then `exec`s the program; bash reads a script from a pipe one byte at a time, so the program still
        receives `stdin_text` as its stdin."""
        command = quote_argv(argv)
        stdin = stdin_text.encode() if stdin_text is not None else None
        if env:
            script = env_prologue(env) + f"exec {command}\n"
            stdin = script.encode() + (stdin or b"")
            return self._checked(self._exec("bash -s", stdin, timeout), command, check)
        return self._checked(self._exec(command, stdin, timeout), command, check)

    # --- radeonlab's host tools ---------------------------------------------------------------------------
    def tool_command(self, module: str, args: Sequence[str], python: str | None = None) -> str:
        """The quoted command line that runs a host tool module (also run by jobs/ssh/openssh.py)."""
        code = f"{SETTINGS['code_dir']}/{hostcode.digest()}"
        wrapper = _TOOL.format(missing=SETTINGS["code_missing_exit"])
        argv = ["sh", "-c", wrapper, "sh", code, python or SETTINGS["remote_python"], "-m", module, *args]
        return quote_argv(argv)

    def install_code(self) -> None:
        """Upload radeonlab's host code to ~/.cache/radeonlab/code/<digest> (a no-op when it is there)."""
        code = f"{SETTINGS['code_dir']}/{hostcode.digest()}"
        self._checked(
            self._exec(quote_argv(["sh", "-c", _UNPACK, "sh", code]), hostcode.tar(), 60.0),
            "install radeonlab's host code",
            True,
        )
        self._code_ready = True

    def tool(
        self,
        module: str,
        args: Sequence[str] = (),
        *,
        stdin_text: str | None = None,
        check: bool = True,
        timeout: float | None = None,
        python: str | None = None,
        env: Mapping[str, str] | None = None,
        login: bool = False,
    ) -> RunResult:
        """Run `python3 -m radeonlab.jobs.host.<module>` on the host (installing the code on first use).

        python: another interpreter (the training venv's, for tools that import the training stack); login:
        in a login shell (profile.d: ROCm paths, the card's overrides); env: sent on stdin, never in argv."""
        name = f"radeonlab.jobs.host.{module}"
        command = self.tool_command(name, args, python)
        if login:
            command = quote_argv(["bash", "-lc", command])
        stdin = stdin_text.encode() if stdin_text is not None else None
        if env:  # bash -s reads the export lines, then exec's the tool, which reads the rest of stdin
            stdin = (env_prologue(env) + f"exec {command}\n").encode() + (stdin or b"")
            command = "bash -s"
        for _ in range(2):
            result = self._exec(command, stdin, timeout)
            if result.exit_code != SETTINGS["code_missing_exit"]:
                self._code_ready = True
                return self._checked(result, f"{module} {' '.join(args)}", check)
            self.install_code()
        raise TransportError(
            f"{self.target.name}: radeonlab's host code is still missing after installing it"
        )

    def open_pty(
        self, module: str, args: Sequence[str] = (), *, python: str | None = None
    ) -> paramiko.Channel:
        """A host tool on a pseudo-terminal, in a login shell (interactive: chat): the caller relays keys and
        output (stderr merged); the host's terminal turns Ctrl-C into SIGINT and Ctrl-D into end of input."""
        if not self._code_ready:  # a terminal session cannot be re-run: the code must be there first
            self.install_code()
        tool = self.tool_command(f"radeonlab.jobs.host.{module}", args, python)
        try:
            chan = self._client.get_transport().open_session(timeout=SETTINGS["connect_timeout"])  # type: ignore[union-attr]
            chan.get_pty(term=os.environ.get("TERM") or "xterm", width=80, height=24)  # resize_pty follows
            chan.exec_command(quote_argv(["bash", "-lc", tool]))
        except (paramiko.SSHException, OSError, EOFError, AttributeError) as exc:
            raise TransportError(f"{self.target.name}: cannot start a terminal session: {exc}") from None
        return chan

    def open_tool(
        self,
        module: str,
        args: Sequence[str] = (),
        *,
        python: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Channel:
        """Start a host tool and return its channel (stream protocols: receive, send, stream, models pull).

        env: sent first on the channel's stdin as `export` lines to `bash -s` (never in argv)."""
        if not self._code_ready:  # a channel cannot be re-run: make sure the code is there first
            code = f"{SETTINGS['code_dir']}/{hostcode.digest()}"
            if not self._exec(quote_argv(["sh", "-c", 'test -d "$HOME/$1"', "sh", code]), None, None).ok:
                self.install_code()
            self._code_ready = True
        command = self.tool_command(f"radeonlab.jobs.host.{module}", args, python)
        if not env:
            return Channel(self, self._channel(command))
        channel = Channel(self, self._channel("bash -s"))
        channel.send((env_prologue(env) + f"exec {command}\n").encode())
        return channel

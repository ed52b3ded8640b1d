"""Bulk bytes through OpenSSH's own client, where the laptop has one: one multiplexed connection per host.

paramiko decrypts and buffers in Python, which caps a copy near the speed of scp (docs/notes/speed.md); the
`ssh` binary does the same work in C. So uploads and fetches over SETTINGS["min_bytes"] run the very same host
tool (`receive` / `send`, the same framing, hashes and resume) as an `ssh` child whose stdin/stdout carry the
stream, while paramiko keeps every control command and remains the fallback.

What the `ssh` command line may and may not do (`ssh_argv`, tested option by option):
- only the inventory's known_hosts file (no global one, never rewritten: UpdateHostKeys=no) and
  StrictHostKeyChecking=yes: the paramiko connection opened first has already checked (or, under the
  inventory's accept-new, recorded) the key, so OpenSSH never accepts anything paramiko did not;
- only the inventory's key (IdentitiesOnly), no agent unless the inventory allows it, never ~/.ssh/config
  or /etc/ssh/ssh_config (-F /dev/null), no password or keyboard prompt (BatchMode);
- one ControlMaster per host, its socket in a private folder (0700) made for this command and removed,
  masters stopped, when the command ends.

Setting: RADEONLAB_BULK_TRANSPORT=openssh (the default: OpenSSH when `ssh` is on PATH) or paramiko. Without
`ssh` the copy goes through paramiko and the command says so once.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from radeonlab.errors import TransportError

if TYPE_CHECKING:
    from radeonlab.jobs.fleet.inventory import HostTarget
    from radeonlab.jobs.ssh.connection import Remote

SETTINGS: dict[str, Any] = {
    # Below this the first copy's extra SSH handshake (~0.1 s on a LAN) costs more than OpenSSH saves
    # (paramiko moves a few MB in well under a second); above it OpenSSH's C crypto wins.
    "min_bytes": 8_000_000,
    "persist_s": 60,  # a master left behind by a killed command stops on its own after this
    # AES-GCM first, as on the paramiko connection (faster with AES-NI than OpenSSH's default chacha20).
    "ciphers": "^aes128-gcm@openssh.com,aes256-gcm@openssh.com",
    "env": "RADEONLAB_BULK_TRANSPORT",
    "modes": ("openssh", "paramiko"),
}
FALLBACK_NOTICE = "OpenSSH client not found: bulk copies go through paramiko (slower)"

_lock = threading.Lock()
_state: dict[str, Any] = {"dir": None, "said": False, "masters": {}}


def mode() -> str:
    """'openssh' or 'paramiko', from the setting (an unknown value is an error, not a silent default)."""
    value = os.environ.get(SETTINGS["env"], "openssh").strip().lower() or "openssh"
    if value not in SETTINGS["modes"]:
        raise TransportError(f"{SETTINGS['env']}={value!r}: use one of {', '.join(SETTINGS['modes'])}")
    return value


def say(message: str) -> None:
    """Progress words go to stderr, as the CLI's own `say` (cli/options.py) does."""
    import click  # the CLI's dependency; imported here so this module stays cheap to import

    click.echo(message, err=True)


def wanted(nbytes: int) -> bool:
    """Whether a copy of `nbytes` goes through OpenSSH (saying once per command when it cannot)."""
    if nbytes < SETTINGS["min_bytes"] or mode() == "paramiko":
        return False
    if shutil.which("ssh"):
        return True
    with _lock:
        if not _state["said"]:
            _state["said"] = True
            say(FALLBACK_NOTICE)
    return False


def control_dir() -> str:
    """This command's private folder for the ControlMaster sockets (0700, removed at exit)."""
    with _lock:
        folder = _state["dir"]
        if folder is None:
            folder = _state["dir"] = tempfile.mkdtemp(prefix="radeonlab-ssh-")  # mkdtemp makes it 0700
            os.chmod(folder, 0o700)
        return folder


def ssh_argv(
    target: HostTarget, control: str, command: str | None, *, control_op: str | None = None
) -> list[str]:
    """The `ssh` command line for `target`: nothing looser than the paramiko connection (module docstring)."""
    argv = ["ssh", "-F", "/dev/null", "-T", "-x", "-a"]
    options = {
        "BatchMode": "yes",
        "StrictHostKeyChecking": "yes",  # never accept-new here: paramiko has already checked the key
        "UserKnownHostsFile": target.known_hosts_file,
        "GlobalKnownHostsFile": "/dev/null",
        "UpdateHostKeys": "no",
        "CheckHostIP": "no",
        "PreferredAuthentications": "publickey",
        "IdentitiesOnly": "no" if target.look_for_keys else "yes",
        "Ciphers": SETTINGS["ciphers"],
        "ControlMaster": "auto",
        "ControlPath": os.path.join(control, "%C"),
        "ControlPersist": str(SETTINGS["persist_s"]),
        "ConnectTimeout": "15",
    }
    if target.key_filename:
        options["IdentityFile"] = target.key_filename
    elif not target.look_for_keys:
        options["IdentityFile"] = "none"
    if not target.allow_agent:
        options["IdentityAgent"] = "none"
    for key, value in options.items():
        argv += ["-o", f"{key}={value}"]
    if control_op:
        argv += ["-O", control_op]
    argv += ["-p", str(target.port)]
    if target.user:
        argv += ["-l", target.user]
    argv += ["--", target.hostname]
    return argv + ([command] if command is not None else [])


def close_all() -> None:
    """Stop every master this command started and remove the socket folder (at exit; safe to call twice)."""
    with _lock:
        folder, masters = _state["dir"], list(_state["masters"].values())
        _state["dir"], _state["masters"] = None, {}
    for target in masters:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                ssh_argv(target, folder, None, control_op="exit"),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=10,
            )
    if folder:
        shutil.rmtree(folder, ignore_errors=True)


atexit.register(close_all)  # the end of the command: masters stopped, sockets and their folder removed


class SshChannel:
    """A host tool run by an `ssh` child: the same methods as connection.Channel, over its pipes."""

    def __init__(self, remote: Remote, command: str) -> None:
        self.remote = remote
        control = control_dir()
        with _lock:
            t = remote.target
            _state["masters"][(t.hostname, t.port, t.user)] = t
        self.proc = subprocess.Popen(
            ssh_argv(remote.target, control, command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=1 << 20,
        )
        self._err: list[bytes] = []
        self._drain = threading.Thread(target=self._read_stderr, daemon=True)
        self._drain.start()
        remote.on_close.append(self.kill)  # closing the Remote (Ctrl-C, a deadline) stops this copy too

    def _read_stderr(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            while chunk := self.proc.stderr.read1(65536):  # type: ignore[union-attr]
                self._err.append(chunk)

    def _lost(self, exc: BaseException) -> TransportError:
        return TransportError(f"{self.remote.target.name}: connection lost ({exc or type(exc).__name__})")

    def send_json(self, obj: Any) -> None:
        self.send((json.dumps(obj) + "\n").encode())
        self._flush()

    def send(self, data: bytes | memoryview) -> None:
        try:
            self.proc.stdin.write(data)  # type: ignore[union-attr]
        except (OSError, ValueError) as exc:
            raise self._lost(exc) from None

    def _flush(self) -> None:
        try:
            self.proc.stdin.flush()  # type: ignore[union-attr]
        except (OSError, ValueError) as exc:
            raise self._lost(exc) from None

    def read_json(self) -> dict[str, Any] | None:
        try:
            line = self.proc.stdout.readline()  # type: ignore[union-attr]
        except (OSError, ValueError) as exc:
            raise self._lost(exc) from None
        return json.loads(line) if line else None

    def read_into(self, view: memoryview) -> int:
        try:
            return self.proc.stdout.readinto(view) or 0  # type: ignore[union-attr]
        except (OSError, ValueError) as exc:
            raise self._lost(exc) from None

    def close_input(self) -> None:
        try:
            self.proc.stdin.close()  # type: ignore[union-attr]
        except (OSError, ValueError) as exc:
            raise self._lost(exc) from None

    def finish(self, wait_s: float | None = None) -> tuple[int, str]:
        """(exit status, last stderr line); -1 when the connection failed (ssh's own 255) or is still busy."""
        try:
            code = self.proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            return -1, ""
        self._drain.join(1.0)
        lines = [ln for ln in b"".join(self._err).decode("utf-8", "replace").splitlines() if ln.strip()]
        return (-1 if code == 255 else code), (lines[-1] if lines else "")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()

    def close(self) -> None:
        self.kill()
        for pipe in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError, ValueError):
                pipe.close()  # type: ignore[union-attr]
        self.proc.wait()
        with contextlib.suppress(ValueError):
            self.remote.on_close.remove(self.kill)

    def __enter__(self) -> SshChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_tool(remote: Remote, module: str, args: Sequence[str]) -> SshChannel:
    """`python3 -m radeonlab.jobs.host.<module>` over OpenSSH (its code is there: paramiko asked first)."""
    return SshChannel(remote, remote.tool_command(f"radeonlab.jobs.host.{module}", args))

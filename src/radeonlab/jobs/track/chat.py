"""Talk to a job's adapter on its host: one prompt for scripts (`ask`), or a terminal session (`interactive`).

`ask` runs jobs/host/tryout.py (greedy decoding; with compare_base the base model alone answers too).
`interactive` runs jobs/host/chat.py on an SSH pseudo-terminal (jobs/ssh/connection.py open_pty) and relays
this terminal to it: keys go up as typed (raw mode: Ctrl-C, Ctrl-D and line editing reach the host's
terminal, where the chat loop gives them their usual meaning), output comes down as written, and a window
resize follows. It ends when the chat ends; its exit status is the chat's.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import termios
import tty
from collections.abc import Iterator
from typing import Any

from radeonlab.errors import RadeonlabError, TransportError
from radeonlab.jobs.track.handle import JobHandle
from radeonlab.jobs.track.onhost import require_ended, run_venv_tool, venv_python

CHAT: dict[str, Any] = {
    "max_new_tokens": 128,  # --prompt: enough for a sentence; greedy
    "timeout_s": 900,  # --prompt: loading a large model on a workstation takes minutes
    "read_block": 65536,
}


def adapter_dir(handle: JobHandle, checkpoint: int | None) -> str:
    return handle.dir.path("output", f"checkpoint-{checkpoint}") if checkpoint else handle.dir.output


def ask(
    handle: JobHandle,
    prompt: str,
    *,
    max_new_tokens: int | None = None,
    compare_base: bool = False,
    checkpoint: int | None = None,
) -> dict[str, str]:
    """{"answer"} (and "base_answer" with compare_base), generated on the host."""
    if checkpoint is None:
        require_ended(handle, "chat")
    request = {
        "config": handle.dir.config,
        "adapter": adapter_dir(handle, checkpoint),
        "prompt": prompt,
        "max_new_tokens": max_new_tokens or CHAT["max_new_tokens"],
        "compare_base": compare_base,
    }
    result = run_venv_tool(handle, "tryout", request, CHAT["timeout_s"])
    answer = result.last_json()
    if not result.ok or "answer" not in answer:
        raise RadeonlabError(
            f"{handle.target.name}: asking {handle.id}'s adapter failed: {result.stderr_tail()}"
        )
    return {k: str(v) for k, v in answer.items()}


@contextlib.contextmanager
def raw_terminal(fd: int) -> Iterator[None]:
    """This terminal in raw mode while the session runs (keys go to the host as typed), restored after."""
    if not os.isatty(fd):
        yield
        return
    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def relay(chan: Any, stdin_fd: int, stdout_fd: int) -> int:
    """Copy stdin to the channel and the channel to stdout until the remote program exits; its status."""
    block = CHAT["read_block"]
    stdin_open = True
    while True:
        readable, _, _ = select.select([chan, stdin_fd] if stdin_open else [chan], [], [], 1.0)
        if chan in readable:
            data = chan.recv(block)
            if not data:
                break
            os.write(stdout_fd, data)
        if stdin_fd in readable:
            data = os.read(stdin_fd, block)
            if data:
                chan.sendall(data)
            else:  # stdin is not a terminal and ended: say so once, as Ctrl-D would
                chan.sendall(b"\x04")
                stdin_open = False
        if chan.exit_status_ready() and not chan.recv_ready():
            break
    return chan.recv_exit_status()


def interactive(
    handle: JobHandle,
    *,
    max_new_tokens: int | None = None,
    compare_base: bool = False,
    checkpoint: int | None = None,
    temperature: float | None = None,
    stdin_fd: int = 0,
    stdout_fd: int = 1,
) -> int:
    """A chat session with the adapter on the host's terminal; the chat's exit status."""
    if checkpoint is None:
        require_ended(handle, "chat")
    args = [handle.dir.root, "--adapter", adapter_dir(handle, checkpoint)]
    if max_new_tokens:
        args += ["--max-new-tokens", str(max_new_tokens)]
    if compare_base:
        args.append("--compare-base")
    if temperature is not None:
        args += ["--temperature", str(temperature)]
    chan = handle.remote.open_pty("chat", args, python=venv_python(handle))

    def resize(*_: object) -> None:
        with contextlib.suppress(OSError, ValueError):
            cols, rows = os.get_terminal_size(stdout_fd)
            chan.resize_pty(width=cols, height=rows)

    resize()
    previous = signal.signal(signal.SIGWINCH, resize)
    try:
        with raw_terminal(stdin_fd):
            return relay(chan, stdin_fd, stdout_fd)
    except OSError as exc:
        raise TransportError(f"{handle.target.name}: the chat session was cut: {exc}") from None
    finally:
        signal.signal(signal.SIGWINCH, previous)
        chan.close()

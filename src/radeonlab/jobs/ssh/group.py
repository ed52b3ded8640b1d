"""The same work on several hosts at once, one result per host: a slow or dead host never holds up the rest.

fabric's Group is the model (per-host results, failures as values), with one thing it lacks: a deadline. Each
host gets a thread and its own SSH connection; at the deadline the caller stops waiting, whatever the SSH
library is blocked on (a TCP connect, a server that accepts connections but never sends its banner, a hung
command), closes that host's connection if it had opened one, and reports "no answer within N s".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from radeonlab.errors import RadeonlabError, one_line
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.ssh.connection import Remote, connect

T = TypeVar("T")


@dataclass
class HostResult(Generic[T]):
    """What one host gave: a value, or the one-line reason it gave none."""

    host: str
    value: T | None = None
    error: str | None = None
    seconds: float | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def each_host(
    targets: Sequence[HostTarget], work: Callable[[Remote], T], timeout: float
) -> list[HostResult[T]]:
    """Connect to every target in parallel, run `work` on each connection; results in the targets' order."""
    results: dict[str, HostResult[T]] = {}
    remotes: dict[str, Remote] = {}
    lock = threading.Lock()

    def run(target: HostTarget) -> None:
        start = time.monotonic()
        try:
            with connect(target) as remote:
                with lock:
                    remotes[target.name] = remote
                result = HostResult(target.name, value=work(remote))
        except RadeonlabError as exc:
            result = HostResult(target.name, error=one_line(exc))
        except Exception as exc:  # a bug or an unexpected library error: still one row, not a traceback
            result = HostResult(target.name, error=f"{type(exc).__name__}: {one_line(exc)}")
        result.seconds = round(time.monotonic() - start, 3)
        with lock:
            results[target.name] = result

    threads = [threading.Thread(target=run, args=(t,), name=f"host-{t.name}", daemon=True) for t in targets]
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    out = []
    with lock:
        for target in targets:
            result = results.get(target.name)
            if result is None:
                result = HostResult(target.name, error=f"no answer within {timeout:g} s", seconds=timeout)
                if target.name in remotes:
                    remotes[target.name].close()  # its command is hung: end it
            out.append(result)
    return out

"""A quiet static HTTP server on loopback for the sandbox: serves config.www_dir(state) (www/amd/, www/pypi/).

In-process: `with serve(directory) as web: web.url` (a ThreadingHTTPServer in a daemon thread);
`web.served()` -> {path: Served(requests, bytes)}: what was fetched from "outside the lab" (the sandbox's
stand-in for PyPI, the PyTorch index and AMD's repositories), counted per request path.
As a subprocess (the demo may need it for minutes): `with spawn(directory) as web: ...`; the child prints its
URL, then serves until its stdin closes, so it ends with the process that started it, even a killed one.
CLI: python -m radeonlab.sandbox.web DIRECTORY [--port N] [--forever (until SIGINT/SIGTERM, for a shell)]
"""

from __future__ import annotations

import argparse
import functools
import signal
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from socketserver import BaseRequestHandler
from typing import TYPE_CHECKING, AnyStr, Generic

if TYPE_CHECKING:
    from _typeshed import SupportsRead, SupportsWrite

from radeonlab.sandbox import config

STARTUP_TIMEOUT_S = 10


@dataclass
class Served:
    """What one path served: completed GET requests with a body, and the body bytes sent."""

    requests: int = 0
    bytes: int = 0


class _CountingServer(ThreadingHTTPServer):
    """Counts bytes served per path (handler threads add to it under the lock)."""

    server_address: tuple[str, int]  # an IPv4 socket's getsockname() (typeshed's also allows bytes hosts)

    def __init__(self, server_address: tuple[str, int], handler: Callable[..., BaseRequestHandler]) -> None:
        super().__init__(server_address, handler)
        self.counts: dict[str, Served] = {}
        self.counts_lock = threading.Lock()


class _QuietHandler(SimpleHTTPRequestHandler):
    """No per-request log lines: test output and the demo's console stay readable. Counts bytes per path."""

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's signature
        pass

    def copyfile(self, source: SupportsRead[AnyStr], outputfile: SupportsWrite[AnyStr]) -> None:
        counter = _ByteCounter(outputfile)
        try:
            super().copyfile(source, counter)
        finally:
            server = self.server
            if isinstance(server, _CountingServer):
                path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
                with server.counts_lock:
                    entry = server.counts.setdefault(path, Served())
                    entry.requests += 1
                    entry.bytes += counter.count


class _ByteCounter(Generic[AnyStr]):
    """A write-only file wrapper that counts what passes through (bytes: the handler's output is binary)."""

    def __init__(self, out: SupportsWrite[AnyStr]) -> None:
        self._out: SupportsWrite[AnyStr] = out
        self.count = 0

    def write(self, data: AnyStr) -> int:
        self._out.write(data)
        self.count += len(data)
        return len(data)


class WebServer:
    """A running in-process server; stop() shuts it down and closes the socket."""

    def __init__(self, directory: Path, address: str, port: int) -> None:
        handler = functools.partial(_QuietHandler, directory=str(directory))
        self._httpd = _CountingServer((address, port), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="sandbox-web", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def served(self) -> dict[str, Served]:
        """A copy of the bytes served so far, per request path (e.g. /pypi/files/torch-...whl)."""
        with self._httpd.counts_lock:
            return {path: Served(c.requests, c.bytes) for path, c in self._httpd.counts.items()}

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def __enter__(self) -> WebServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(directory: Path, address: str = config.WEB_ADDRESS, port: int = 0) -> WebServer:
    """Serve directory on address:port (port 0 = any free port) in this process."""
    _check_loopback(address)
    return WebServer(Path(directory), address, port)


class WebProcess:
    """The server in a child process (python -m radeonlab.sandbox.web); stop() ends it."""

    def __init__(self, directory: Path, address: str, port: int) -> None:
        command = [
            sys.executable,
            "-m",
            "radeonlab.sandbox.web",
            str(directory),
            "--address",
            address,
            "--port",
            str(port),
        ]
        self._proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.pid = self._proc.pid
        line = self._proc.stdout.readline().strip() if self._proc.stdout else ""
        if not line.startswith("http://"):
            self.stop()
            raise RuntimeError(f"sandbox web server did not start (printed {line!r})")
        self.url = line

    def stop(self) -> None:
        if self._proc.poll() is None:
            if self._proc.stdin:
                self._proc.stdin.close()  # the child's signal to shut down cleanly
            try:
                self._proc.wait(timeout=STARTUP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._proc.stdout:
            self._proc.stdout.close()

    def __enter__(self) -> WebProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def spawn(directory: Path, address: str = config.WEB_ADDRESS, port: int = 0) -> WebProcess:
    """Serve directory from a child process that lives no longer than its stdin pipe to this one."""
    _check_loopback(address)
    return WebProcess(Path(directory), address, port)


def _check_loopback(address: str) -> None:
    # The sandbox may only listen on this machine's loopback network.
    if not address.startswith("127."):
        raise ValueError(f"sandbox web server must bind to 127.0.0.0/8, not {address}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve a sandbox www directory on loopback")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--address", default=config.WEB_ADDRESS)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--forever", action="store_true", help="ignore stdin; stop on SIGINT or SIGTERM")
    args = parser.parse_args(argv)
    stop_signals = {signal.SIGINT, signal.SIGTERM}
    if args.forever:  # blocked before the server threads start, so only sigwait below receives them
        signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    with serve(args.directory, args.address, args.port) as web:
        print(web.url, flush=True)
        if args.forever:
            signal.sigwait(stop_signals)
        else:
            sys.stdin.read()  # returns at EOF: the parent closed the pipe or died
    return 0


if __name__ == "__main__":
    sys.exit(main())

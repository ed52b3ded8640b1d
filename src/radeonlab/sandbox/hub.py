"""A SIMULATED Hugging Face Hub on loopback, serving a HubCatalog (radeonlab/sandbox/hubcatalog.py) through
the Hub's own HTTP API (radeonlab/sandbox/hubhttp.py), for the product's `huggingface_hub` client to use as it
uses the real one: the product reaches it only through HF_ENDPOINT and the token.

For tests, every file body sent is recorded as a Transfer (who, which file, from which byte, how many bytes,
whether it reached the end): `bytes_served()` and `downloads()` count them per file and per client. A client
is its token's name ("token:granted"), else the `origin/...` its User-Agent carries (HF_HUB_USER_AGENT_ORIGIN,
"origin:ws1"), else its address ("addr:127.0.0.1": every loopback client looks the same).
Faults: `set_rate(bytes_per_s)` is a slow link; `cut(repo, file, after_bytes)` stops the next transfer of
that file mid-way (its connection closes; the Hub then goes down unless told otherwise); `set_down(True)`
closes every new connection unanswered, as a dead server would; `stop()` / `start()` close and reopen the
port.

In-process: `with serve(catalog) as hub: hub.url`. As a child process: `with spawn(catalog) as hub:` (the
same questions and faults, over the child's stdin; the child ends when that pipe closes, so it dies with
its parent); `kill()` is a crash (SIGKILL), `restart()` a new process on the same port (counters from zero).
CLI (the child): python -m radeonlab.sandbox.hub [--address A] [--port N] [--tiny-model DIR --demo-data DIR]
(without the folders: the catalog JSON on stdin's first line); prints its URL, serves until stdin closes.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import hmac
import json
import secrets
import socket
import subprocess
import sys
import threading
from dataclasses import asdict
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from radeonlab.sandbox.hubcatalog import HubCatalog, sandbox_catalog
from radeonlab.sandbox.hubhttp import Handler, Request, Transfer

ADDRESS = "127.0.0.1"
STARTUP_TIMEOUT_S = 10
SETTLE_TIMEOUT_S = 5  # the longest transfers()/requests() wait for requests in progress to finish


class _Counters:
    """Questions about the transfers a Hub recorded (in this process or in a child)."""

    def transfers(self) -> list[Transfer]:
        raise NotImplementedError

    def _select(self, repo_id: str | None, path: str | None, client: str | None) -> list[Transfer]:
        return [
            t
            for t in self.transfers()
            if (repo_id is None or t.repo_id == repo_id)
            and (path is None or t.path == path)
            and (client is None or t.client == client)
        ]

    def bytes_served(
        self, repo_id: str | None = None, path: str | None = None, client: str | None = None
    ) -> int:
        """Body bytes sent, for one repo / file / client or all of them."""
        return sum(t.sent for t in self._select(repo_id, path, client))

    def downloads(self, repo_id: str, path: str, client: str | None = None) -> int:
        """How many transfers of the file reached its last byte (a resumed one counts when it finishes)."""
        return sum(1 for t in self._select(repo_id, path, client) if t.complete)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    hub: Hub
    server_address: tuple[str, int]  # an IPv4 socket's getsockname() (typeshed's also allows bytes hosts)

    def verify_request(self, request: Any, client_address: Any) -> bool:
        return not self.hub.down  # down: the connection is closed unanswered

    def process_request(self, request: Any, client_address: Any) -> None:
        self.hub.track(request, True)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        self.hub.track(request, False)
        super().shutdown_request(request)


class Hub(_Counters):
    """The SIMULATED Hub serving `catalog` in this process (a ThreadingHTTPServer in a daemon thread)."""

    def __init__(self, catalog: HubCatalog, address: str = ADDRESS, port: int = 0) -> None:
        _check_loopback(address)
        self.catalog = catalog
        self.down = False
        self._lock = threading.Condition()
        self._transfers: list[Transfer] = []
        self._requests: list[Request] = []
        self._cuts: dict[tuple[str, str], tuple[int, bool]] = {}
        self._rate: int | None = None
        self._active: set[socket.socket] = set()
        self._secret = secrets.token_bytes(16)  # signs the LFS download URLs this Hub hands out
        self._address = (address, port)
        self._httpd: _Server | None = None
        self.start()

    # --- lifecycle ---
    def start(self) -> None:
        """Listen (again) on the same address and port."""
        self._httpd = _Server(self._address, Handler)
        self._httpd.hub = self
        self._address = self._httpd.server_address[:2]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="sandbox-hub", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Close the port and cut every connection still open, as a killed server would."""
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        with self._lock:
            active, self._active = set(self._active), set()
        for sock in active:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._thread.join()
        self._httpd = None

    @property
    def url(self) -> str:
        host, port = self._address
        return f"http://{host}:{port}"

    def __enter__(self) -> Hub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- faults and records ---
    def set_down(self, down: bool = True) -> None:
        self.down = down

    def cut(self, repo_id: str, path: str, after_bytes: int, then_down: bool = True) -> None:
        """The next body sent of `path` stops after `after_bytes` bytes and its connection closes."""
        with self._lock:
            self._cuts[(repo_id, path)] = (after_bytes, then_down)

    def set_rate(self, bytes_per_s: int | None) -> None:
        """Send file bodies no faster than this (None: as fast as possible): a slow link, so that two
        clients' downloads overlap."""
        self._rate = bytes_per_s

    def rate(self) -> int | None:
        return self._rate

    def transfers(self) -> list[Transfer]:
        """The file bodies sent so far, once the requests in progress have finished (a client may hold the
        last byte a moment before the server thread records the transfer) or SETTLE_TIMEOUT_S has passed."""
        with self._lock:
            self._lock.wait_for(lambda: not self._active, timeout=SETTLE_TIMEOUT_S)
            return list(self._transfers)

    def requests(self) -> list[Request]:
        with self._lock:
            self._lock.wait_for(lambda: not self._active, timeout=SETTLE_TIMEOUT_S)
            return list(self._requests)

    def record(self, item: Transfer | Request) -> None:
        with self._lock:
            (self._transfers if isinstance(item, Transfer) else self._requests).append(item)  # type: ignore[arg-type]

    def take_cut(self, repo_id: str, path: str) -> tuple[int, bool] | None:
        with self._lock:
            return self._cuts.pop((repo_id, path), None)

    def track(self, sock: socket.socket, add: bool) -> None:
        with self._lock:
            (self._active.add if add else self._active.discard)(sock)
            self._lock.notify_all()

    def sign(self, text: str) -> str:
        return hmac.new(self._secret, text.encode(), hashlib.sha256).hexdigest()[:32]


def serve(catalog: HubCatalog, address: str = ADDRESS, port: int = 0) -> Hub:
    """The SIMULATED Hub in this process, on address:port (port 0: any free port)."""
    return Hub(catalog, address, port)


class HubProcess(_Counters):
    """The SIMULATED Hub in a child process (python -m radeonlab.sandbox.hub), controlled over its stdin."""

    def __init__(self, catalog: HubCatalog, address: str = ADDRESS, port: int = 0) -> None:
        _check_loopback(address)
        self._catalog_json = catalog.to_json()
        self._address, self._port = address, port
        self._start()

    def _start(self) -> None:
        command = [sys.executable, "-m", "radeonlab.sandbox.hub", "--address", self._address]
        command += ["--port", str(self._port)]
        self._proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.pid = self._proc.pid
        assert self._proc.stdin and self._proc.stdout
        self._proc.stdin.write(self._catalog_json + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline().strip()
        if not line.startswith("http://"):
            self.stop()
            raise RuntimeError(f"sandbox Hub did not start (printed {line!r})")
        self.url = line
        self._port = int(line.rsplit(":", 1)[1])

    def _call(self, op: str, **args: Any) -> Any:
        assert self._proc.stdin and self._proc.stdout
        self._proc.stdin.write(json.dumps({"op": op, "args": args}) + "\n")
        self._proc.stdin.flush()
        return json.loads(self._proc.stdout.readline())

    def transfers(self) -> list[Transfer]:
        return [Transfer(**t) for t in self._call("transfers")]

    def requests(self) -> list[Request]:
        return [Request(**r) for r in self._call("requests")]

    def cut(self, repo_id: str, path: str, after_bytes: int, then_down: bool = True) -> None:
        self._call("cut", repo_id=repo_id, path=path, after_bytes=after_bytes, then_down=then_down)

    def set_down(self, down: bool = True) -> None:
        self._call("set_down", down=down)

    def set_rate(self, bytes_per_s: int | None) -> None:
        self._call("set_rate", bytes_per_s=bytes_per_s)

    def kill(self) -> None:
        """A crash: SIGKILL, no clean shutdown; open downloads see their connection reset."""
        self._proc.kill()
        self._proc.wait()
        self._close_pipes()

    def restart(self) -> None:
        """A new Hub process on the same port (after kill() or stop()); its counters start at zero."""
        if self._proc.poll() is None:
            self.stop()
        self._start()

    def stop(self) -> None:
        if self._proc.poll() is None:
            if self._proc.stdin:
                self._proc.stdin.close()  # the child's signal to shut down
            try:
                self._proc.wait(timeout=STARTUP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._close_pipes()

    def _close_pipes(self) -> None:
        for pipe in (self._proc.stdin, self._proc.stdout):
            if pipe and not pipe.closed:
                with contextlib.suppress(OSError):
                    pipe.close()

    def __enter__(self) -> HubProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def spawn(catalog: HubCatalog, address: str = ADDRESS, port: int = 0) -> HubProcess:
    """The SIMULATED Hub in a child process that lives no longer than its stdin pipe to this one."""
    return HubProcess(catalog, address, port)


def _check_loopback(address: str) -> None:
    # The sandbox may only listen on this machine's loopback network.
    if not address.startswith("127."):
        raise ValueError(f"sandbox Hub must bind to 127.0.0.0/8, not {address}")


def main(argv: list[str] | None = None) -> int:
    """Child process: the catalog JSON on stdin's first line (or the sandbox catalog built from --tiny-model
    and --demo-data folders), then one JSON command per line until stdin closes."""
    parser = argparse.ArgumentParser(description="Serve the SIMULATED Hugging Face Hub on loopback")
    parser.add_argument("--address", default=ADDRESS)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tiny-model", type=Path, help="tinymodel.py's folder: serve the sandbox catalog")
    parser.add_argument("--demo-data", type=Path, help="demodata.py's folder (with --tiny-model)")
    args = parser.parse_args(argv)
    if args.tiny_model and args.demo_data:
        catalog = sandbox_catalog(args.tiny_model, args.demo_data)
    else:
        catalog = HubCatalog.from_json(sys.stdin.readline())
    with serve(catalog, args.address, args.port) as hub:
        print(hub.url, flush=True)
        for line in sys.stdin:  # ends at EOF: the parent closed the pipe or died
            command = json.loads(line)
            op, kwargs = command["op"], command.get("args", {})
            if op in ("transfers", "requests"):
                result: Any = [asdict(x) for x in getattr(hub, op)()]
            elif op in ("cut", "set_down", "set_rate"):
                result = getattr(hub, op)(**kwargs)
            else:
                result = {"error": f"unknown op {op}"}
            print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A webhook sink for notification tests: an HTTP server on loopback that keeps every JSON body POSTed to it
(what an Apprise `json://` URL sends: {"version", "title", "message", "type", ...})."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Sink:
    """`with Sink() as sink:` ... `sink.url(token)` is a json:// URL whose path carries `token`."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.received: list[dict[str, Any]] = []
        self.paths: list[str] = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    sink.received.append(json.loads(body))
                except ValueError:
                    sink.received.append({"raw": body.decode(errors="replace")})
                sink.paths.append(self.path)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def url(self, token: str) -> str:
        return f"json://127.0.0.1:{self.port}/hook/{token}"

    def titles(self) -> list[str]:
        return [str(m.get("title")) for m in self.received]

    def wait_for(self, pred: Any, timeout: float, what: str) -> None:
        until = time.monotonic() + timeout
        while not pred(self):
            assert time.monotonic() < until, f"timed out waiting for {what}; got {self.titles()}"
            time.sleep(0.2)

    def __enter__(self) -> Sink:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

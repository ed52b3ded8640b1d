"""A SIMULATED container registry on loopback: the read side of the OCI distribution API, no more.

It stands in for Docker Hub serving AMD's rocm/pytorch (sandbox/ociimage.py builds the SIMULATED image).
What a pull needs (OCI distribution spec, "pull"): GET/HEAD /v2/ (200: "this is a v2 registry"),
GET/HEAD /v2/<name>/manifests/<tag or digest> (the manifest, its media type as Content-Type and its digest in
Docker-Content-Digest), GET/HEAD /v2/<name>/blobs/<digest>. No auth, no push API, plain HTTP: the engine
must be told the registry is insecure (a setting of the product's container role). A "push" here is
`push(image)`: the tag now names that image's manifest, as a real push of another image under the tag would.

    with serve() as reg:                 # 127.0.0.1:<free port>, a daemon thread
        reg.push(img)                    # img: ociimage.Image
        reg.address                      # "127.0.0.1:PORT", the registry part of an image reference
        reg.pulls                        # manifest GETs per "name:reference" (skopeo inspect counts too)
        reg.blob_gets                    # blob GETs per digest (a layer's: what an engine pulled)
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from radeonlab.sandbox import config
from radeonlab.sandbox.ociimage import Image

_PATH = re.compile(r"^/v2/(?P<name>.+)/(?P<kind>manifests|blobs)/(?P<ref>[^/]+)$")


class Registry(ThreadingHTTPServer):
    server_address: tuple[str, int]

    def __init__(self, address: tuple[str, int]) -> None:
        super().__init__(address, _Handler)
        self.tags: dict[str, dict[str, str]] = {}  # name -> tag -> manifest digest
        self.blob_dirs: list[Path] = []
        self.pulls: dict[str, int] = {}
        self.blob_gets: dict[str, int] = {}
        self.lock = threading.Lock()

    @property
    def address(self) -> str:
        return f"{self.server_address[0]}:{self.server_address[1]}"

    def push(self, image: Image) -> str:
        """Let `image.name:image.tag` name this image from now on; returns the full reference."""
        with self.lock:
            self.tags.setdefault(image.name, {})[image.tag] = image.digest
            if image.blobs not in self.blob_dirs:
                self.blob_dirs.append(image.blobs)
        return f"{self.address}/{image.name}:{image.tag}"

    def blob(self, digest: str) -> Path | None:
        algo, _, hexd = digest.partition(":")
        if algo != "sha256" or not re.fullmatch(r"[0-9a-f]{64}", hexd):
            return None
        return next((d / "sha256" / hexd for d in self.blob_dirs if (d / "sha256" / hexd).is_file()), None)


class _Handler(BaseHTTPRequestHandler):
    server: Registry

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's signature
        pass

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's names
        self._answer(body=False)

    def do_GET(self) -> None:  # noqa: N802
        self._answer(body=True)

    def _answer(self, body: bool) -> None:
        path = self.path.split("?", 1)[0]
        if path in ("/v2", "/v2/"):
            return self._send(200, b"{}", "application/json", body)
        m = _PATH.match(path)
        if not m:
            return self._send(404, b'{"errors":[{"code":"NAME_UNKNOWN"}]}', "application/json", body)
        name, kind, ref = m["name"], m["kind"], m["ref"]
        with self.server.lock:
            digest = ref if ":" in ref else self.server.tags.get(name, {}).get(ref)
        found = self.server.blob(digest) if digest else None
        if found is None:
            code = "MANIFEST_UNKNOWN" if kind == "manifests" else "BLOB_UNKNOWN"
            return self._send(
                404, json.dumps({"errors": [{"code": code}]}).encode(), "application/json", body
            )
        if kind == "manifests":
            raw = found.read_bytes()
            if body:
                with self.server.lock:
                    key = f"{name}:{ref}"
                    self.server.pulls[key] = self.server.pulls.get(key, 0) + 1
            return self._send(200, raw, json.loads(raw)["mediaType"], body, digest)
        if body:
            with self.server.lock:
                self.server.blob_gets[str(digest)] = self.server.blob_gets.get(str(digest), 0) + 1
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(found.stat().st_size))
        self.send_header("Docker-Content-Digest", str(digest))
        self.end_headers()
        if body:
            with found.open("rb") as f:
                shutil.copyfileobj(f, self.wfile, 1 << 20)

    def _send(self, status: int, data: bytes, ctype: str, body: bool, digest: str | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Docker-Distribution-API-Version", "registry/2.0")
        if digest:
            self.send_header("Docker-Content-Digest", digest)
        self.end_headers()
        if body:
            self.wfile.write(data)


@contextlib.contextmanager
def serve(host: str = config.WEB_ADDRESS, port: int = 0) -> Iterator[Registry]:
    """The SIMULATED registry on host:port (0: a free port) in a daemon thread, for the `with` block."""
    reg = Registry((host, port))
    thread = threading.Thread(target=reg.serve_forever, name="sandbox-registry", daemon=True)
    thread.start()
    try:
        yield reg
    finally:
        reg.shutdown()
        reg.server_close()

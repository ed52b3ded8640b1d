"""The HTTP side of the SIMULATED Hugging Face Hub (radeonlab/sandbox/hub.py): the part of the Hub's API
that `huggingface_hub` (the version the deploy pins, 0.36.2: radeonlab/sandbox/wheels.lock) calls to resolve
a model and download its files (its hf_api.py and file_download.py):

  GET  /api/{models|datasets}/<id>[/revision/<rev>]  info: sha, gated, siblings (+ size, blobId, lfs: ?blobs)
  GET  /api/{models|datasets}/<id>/auth-check        200, or the gated errors below
  GET  /api/{models|datasets}/<id>/tree/<rev>[/dir]  file listing (?recursive)
  GET  /api/whoami-v2                                the token's name
  HEAD|GET /[datasets/]<id>/resolve/<rev>/<file>     a regular file: 200, ETag (git blob id), X-Repo-Commit;
                                                     an LFS file: 302 to a signed /lfs-cdn/ URL on this
                                                     server, X-Linked-Etag (sha256), X-Linked-Size
  GET  /lfs-cdn/<signature>/...                      the LFS content; HTTP Range (206): downloads resume

Errors carry the Hub's X-Error-Code / X-Error-Message headers, which the client turns into its exception
types: 404 RepoNotFound / RevisionNotFound / EntryNotFound, 401 GatedRepo (no token), 403 GatedRepo (a token
without access), 401 "Invalid credentials in Authorization header" (a token the Hub does not know). As on the
real Hub, a gated repo's info and file listing are public; its files are not.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import re
import socket
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any, Literal, Protocol
from urllib.parse import parse_qs, quote, unquote, urlsplit

from radeonlab.sandbox.hubcatalog import Commit, HubCatalog, HubFile, HubRepo

CHUNK = 64 * 1024
INVALID_TOKEN = "Invalid credentials in Authorization header"  # the Hub's message; the client tests for it
ORIGIN = re.compile(r"(?:^|; )origin/([^;]+)")


@dataclass(frozen=True)
class Transfer:
    """One file body sent: `start` is the first byte (a resumed download starts past 0); `began` and
    `ended` are wall-clock times (time.time()), to tell which requests overlapped."""

    client: str
    repo_type: str
    repo_id: str
    commit: str
    path: str
    start: int
    sent: int
    size: int
    began: float
    ended: float

    @property
    def complete(self) -> bool:
        return self.start + self.sent == self.size


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    status: int
    client: str
    at: float  # time.time() when it arrived


class HubState(Protocol):
    """What a request handler needs from the Hub that runs it (radeonlab.sandbox.hub.Hub)."""

    catalog: HubCatalog
    down: bool

    def record(self, item: Transfer | Request) -> None: ...

    def take_cut(self, repo_id: str, path: str) -> tuple[int, bool] | None: ...

    def rate(self) -> int | None: ...

    def sign(self, text: str) -> str: ...


class Handler(BaseHTTPRequestHandler):
    """One request: route it, answer it, record it (and the file body it sent) with the Hub."""

    server: Any  # the Hub's ThreadingHTTPServer; .hub is its HubState
    protocol_version = "HTTP/1.0"  # one request per connection: `down` and `cut` act on the next request

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's signature
        pass

    def do_HEAD(self) -> None:
        self._handle(head=True)

    def do_GET(self) -> None:
        self._handle(head=False)

    def send_response(self, code: int, message: str | None = None) -> None:
        self._status = code
        super().send_response(code, message)

    # --- dispatch ---
    def _handle(self, head: bool) -> None:
        hub: HubState = self.server.hub
        arrived = time.time()
        url = urlsplit(self.path)
        segs = [unquote(s) for s in url.path.split("/")[1:]]
        self._query = parse_qs(url.query)
        self._head = head
        self._status = 0
        token = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
        self._token_name = hub.catalog.tokens.get(token) if token else None
        origin = ORIGIN.search(self.headers.get("User-Agent") or "")
        if token:
            self._client = f"token:{self._token_name or 'invalid'}"
        else:
            self._client = f"origin:{origin.group(1)}" if origin else f"addr:{self.client_address[0]}"
        try:
            if token and self._token_name is None:
                self._error(401, None, INVALID_TOKEN)
            elif segs[:1] == ["api"]:
                self._api(segs[1:])
            elif segs[:1] == ["lfs-cdn"]:
                self._cdn(segs[1:])
            else:
                self._resolve(segs)
        finally:
            hub.record(Request(self.command, self.path, self._status, self._client, arrived))

    def _api(self, segs: list[str]) -> None:
        if segs == ["whoami-v2"]:
            if self._token_name is None:
                return self._error(401, None, INVALID_TOKEN)
            return self._json({"type": "user", "name": self._token_name})
        if not segs or segs[0] not in ("models", "datasets"):
            return self._error(404, None, "Not found")
        repo_type, rest = segs[0][:-1], segs[1:]
        split = 2 if len(rest) >= 2 and rest[1] not in ("revision", "tree", "auth-check") else 1
        repo = self._repo(repo_type, "/".join(rest[:split]))
        if repo is None:
            return
        tail = rest[split:]
        if tail == ["auth-check"]:
            if self._allowed(repo):
                self._json({})
        elif tail[:1] == ["tree"] and len(tail) >= 2:
            commit = self._commit(repo, tail[1])
            if commit is not None:
                self._json(tree(commit, "/".join(tail[2:]), self._query.get("recursive", [""])[0]))
        elif not tail or (tail[0] == "revision" and len(tail) == 2):
            commit = self._commit(repo, tail[1] if tail else "main")
            if commit is not None:
                blobs = self._query.get("blobs", [""])[0].lower() in ("1", "true")
                self._json(repo_info(repo, commit, blobs))
        else:
            self._error(404, None, "Not found")

    def _resolve(self, segs: list[str]) -> None:
        repo_type = "model"
        if segs[:1] == ["datasets"]:
            repo_type, segs = "dataset", segs[1:]
        at = 2 if len(segs) > 2 and segs[2] == "resolve" else 1
        if len(segs) < at + 3 or segs[at] != "resolve":
            return self._error(404, None, "Not found")
        repo = self._repo(repo_type, "/".join(segs[:at]))
        if repo is None or not self._allowed(repo):
            return
        commit = self._commit(repo, segs[at + 1])
        if commit is None:
            return
        file = commit.file("/".join(segs[at + 2 :]))
        if file is None:
            return self._error(404, "EntryNotFound", "Entry not found", {"X-Repo-Commit": commit.sha})
        headers = {"X-Repo-Commit": commit.sha, "ETag": f'"{file.blob_id}"'}
        if file.sha256 is None:
            return self._send_file(repo, commit, file, headers)
        # LFS: the Hub redirects to its CDN with a signed URL; the client follows it (same host here, so it
        # keeps sending the token) and names the cached blob after X-Linked-Etag.
        key = f"{commit.sha}/{repo_type}/{quote(repo.repo_id, safe='')}/{quote(file.path)}"
        host = self.headers.get("Host") or "{}:{}".format(*self.server.server_address[:2])
        headers |= {
            "Location": f"http://{host}/lfs-cdn/{self.server.hub.sign(key)}/{key}",
            "X-Linked-Etag": f'"{file.sha256}"',
            "X-Linked-Size": str(file.size),
        }
        self._reply(302, b"Found. Redirecting to the LFS CDN", headers)

    def _cdn(self, segs: list[str]) -> None:
        if len(segs) < 5:
            return self._error(404, None, "Not found")
        signature, sha, repo_type, repo_id = segs[0], segs[1], segs[2], segs[3]
        path = "/".join(segs[4:])
        key = f"{sha}/{repo_type}/{quote(repo_id, safe='')}/{quote(path)}"
        if not hmac.compare_digest(signature, self.server.hub.sign(key)):
            return self._error(403, None, "Request has expired or signature does not match")
        repo = self.server.hub.catalog.get(repo_type, repo_id)
        commit = repo.resolve(sha) if repo else None
        file = commit.file(path) if commit else None
        if repo is None or commit is None or file is None:
            return self._error(404, None, "Not found")
        self._send_file(repo, commit, file, {"ETag": f'"{file.sha256}"'})

    # --- checks shared by the routes ---
    def _repo(self, repo_type: str, repo_id: str) -> HubRepo | None:
        repo = self.server.hub.catalog.get(repo_type, repo_id)
        if repo is None:
            self._error(404, "RepoNotFound", "Repository not found")
        return repo

    def _commit(self, repo: HubRepo, revision: str) -> Commit | None:
        commit = repo.resolve(revision)
        if commit is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return commit

    def _allowed(self, repo: HubRepo) -> bool:
        """A gated repo's files need a token that was granted access (its info and listing do not)."""
        if not repo.gated or (self._token_name is not None and self._token_name in repo.granted):
            return True
        kind = "model" if repo.repo_type == "model" else repo.repo_type
        if self._token_name is None:
            message = (
                f"Access to {kind} {repo.repo_id} is restricted. You must have access to it and be "
                "authenticated to access it. Please log in."
            )
            self._error(401, "GatedRepo", message)
        else:
            message = (
                f"Access to {kind} {repo.repo_id} is restricted and you are not in the authorized list. "
                f"Visit the repository page to ask for access."
            )
            self._error(403, "GatedRepo", message)
        return False

    # --- responses ---
    def _reply(self, status: int, body: bytes, headers: dict[str, str], ctype: str = "text/plain") -> None:
        self.send_response(status)
        for name, value in {"Content-Type": ctype, "Content-Length": str(len(body)), **headers}.items():
            self.send_header(name, value)
        self.end_headers()
        if not self._head:
            self.wfile.write(body)

    def _json(self, obj: Any) -> None:
        self._reply(200, json.dumps(obj).encode(), {}, "application/json")

    def _error(
        self, status: int, code: str | None, message: str, extra: dict[str, str] | None = None
    ) -> None:
        headers = {"X-Error-Message": message, **({"X-Error-Code": code} if code else {}), **(extra or {})}
        self._reply(status, json.dumps({"error": message}).encode(), headers, "application/json")

    def _send_file(self, repo: HubRepo, commit: Commit, file: HubFile, headers: dict[str, str]) -> None:
        start, end = 0, file.size - 1
        wanted = byte_range(self.headers.get("Range"), file.size)
        if wanted == "unsatisfiable":
            return self._error(416, None, "Range Not Satisfiable", {"Content-Range": f"bytes */{file.size}"})
        if wanted is not None:
            start, end = wanted
            headers = {**headers, "Content-Range": f"bytes {start}-{end}/{file.size}"}
        self.send_response(206 if wanted else 200)
        headers = {"Accept-Ranges": "bytes", "Content-Length": str(end - start + 1), **headers}
        for name, value in {"Content-Type": "application/octet-stream", **headers}.items():
            self.send_header(name, value)
        self.end_headers()
        if not self._head:
            self._stream(repo, commit, file, start, end)

    def _stream(self, repo: HubRepo, commit: Commit, file: HubFile, start: int, end: int) -> None:
        hub: HubState = self.server.hub
        cut = hub.take_cut(repo.repo_id, file.path)
        limit = end - start + 1 if cut is None else min(cut[0], end - start + 1)
        rate, sent, began = hub.rate(), 0, time.time()
        try:
            with file.open() as f:
                f.seek(start)
                while sent < limit:
                    chunk = f.read(min(CHUNK, limit - sent))
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    sent += len(chunk)
                    if rate:  # a slow link: no faster than `rate` bytes per second
                        time.sleep(max(0.0, began + sent / rate - time.time()))
        except OSError:  # the client went away mid-file: record what was sent
            pass
        finally:
            where = (repo.repo_type, repo.repo_id, commit.sha, file.path)
            hub.record(Transfer(self._client, *where, start, sent, file.size, began, time.time()))
        if cut is not None:
            hub.down = hub.down or cut[1]  # before the client sees the cut, so its retry meets a dead Hub
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)


def byte_range(header: str | None, size: int) -> tuple[int, int] | Literal["unsatisfiable"] | None:
    """HTTP Range "bytes=a-b" / "a-" / "-n" -> (first, last); None: whole file; "unsatisfiable": 416."""
    match = re.fullmatch(r"bytes=(\d*)-(\d*)", (header or "").strip())
    if match is None or match.groups() == ("", ""):
        return None  # absent, or several ranges: send the whole file (allowed by RFC 9110)
    first, last = match.groups()
    if first == "":
        start, end = max(size - int(last), 0), size - 1
    else:
        start, end = int(first), min(int(last), size - 1) if last else size - 1
    return "unsatisfiable" if start >= size or start > end else (start, end)


def repo_info(repo: HubRepo, commit: Commit, blobs: bool) -> dict[str, Any]:
    """The repo info JSON (as /api/models/<id> answers it; `blobs` adds sizes, blob ids and LFS data)."""
    siblings = []
    for f in commit.files:
        entry: dict[str, Any] = {"rfilename": f.path}
        if blobs:
            entry |= {"size": f.size, "blobId": f.blob_id}
            if f.sha256:
                entry["lfs"] = {"size": f.size, "sha256": f.sha256, "pointerSize": f.pointer_size}
        siblings.append(entry)
    author = repo.repo_id.split("/")[0] if "/" in repo.repo_id else None
    info: dict[str, Any] = {
        "_id": repo.repo_id,
        "id": repo.repo_id,
        "author": author,
        "sha": commit.sha,
        "createdAt": "2026-01-01T00:00:00.000Z",
        "lastModified": "2026-01-01T00:00:00.000Z",
        "private": False,
        "gated": repo.gated or False,
        "disabled": False,
        "downloads": 0,
        "likes": 0,
        "tags": list(repo.tags),
        "siblings": siblings,
        "usedStorage": sum(f.size for f in commit.files),
    }
    if repo.repo_type == "model":
        info |= {"modelId": repo.repo_id, "library_name": "transformers", "pipeline_tag": "text-generation"}
    return info


def tree(commit: Commit, folder: str, recursive: str) -> list[dict[str, Any]]:
    """The /tree listing of `folder` (files and sub-folders; everything below with recursive=true)."""
    prefix = f"{folder.strip('/')}/" if folder.strip("/") else ""
    deep = recursive.lower() in ("1", "true")
    out: dict[str, dict[str, Any]] = {}
    for f in commit.files:
        if not f.path.startswith(prefix):
            continue
        parts = f.path[len(prefix) :].split("/")
        for depth in range(1, len(parts)):
            if deep or depth == 1:
                path = prefix + "/".join(parts[:depth])
                out.setdefault(path, {"type": "directory", "oid": commit.sha, "size": 0, "path": path})
        if deep or len(parts) == 1:
            entry = {"type": "file", "oid": f.blob_id, "size": f.size, "path": f.path}
            if f.sha256:
                entry["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": f.pointer_size}
            out[f.path] = entry
    return list(out.values())

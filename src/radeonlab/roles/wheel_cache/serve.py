"""Runs on the cache host (python3, standard library only): the lab wheel cache's HTTP server.

    python3 serve.py --bind ADDRESS --directory CACHE_DIR PORT

A read-only static server (GET and HEAD only, as http.server's) over CACHE_DIR that serves two things: the
simple index's pages (simple/.../index.html) and the lock's wheels (files/NAME); nothing else (no folder
listings, not the lock, not pip's venv), whatever the request's spelling: the check reads the path as
http.server will (percent-decoded, `.` and `..` resolved), so `/./files/X` or `/simple/../files/X` is checked
like `/files/X`. A wheel is served only while its sha256 is the one the lab's lock gives it
(CACHE_DIR/.lock-hashes.json, written by build_index.py from the lock). A file that no longer matches is
refused with HTTP 409 and a one-line body naming the file, the lock's hash and the one on disk (the
workstation's pip runner repeats it), and logged; a file the lock does not name is not served (404). Hashes
are remembered per (size, mtime, ctime, inode): any write to a file, or a `touch`, makes the next request hash
it again; a multi-GB wheel is read once otherwise. Workstations verify every file again on install (the hash
travels with their lock): this check keeps a changed file from being handed out at all, it is not the only
one.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import posixpath
import sys
import threading
import urllib.parse
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from typing import BinaryIO

HASHES = ".lock-hashes.json"
_memo: dict[str, tuple[tuple[int, int, int, int], str]] = {}
_lock = threading.Lock()


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def current_sha256(path: str) -> str:
    st = os.stat(path)
    key = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    with _lock:
        known = _memo.get(path)
    if known and known[0] == key:
        return known[1]
    digest = sha256(path)
    with _lock:
        _memo[path] = (key, digest)
    return digest


def check(directory: str, url_path: str) -> tuple[int, str] | None:
    """None: serve it. Else (HTTP status, one-line reason) for a wheel the lock does not let out."""
    # the file http.server's translate_path will open: query and fragment dropped, percent-decoded,
    # normalised, empty, "." and ".." parts left out
    raw = urllib.parse.unquote(url_path.split("?", 1)[0].split("#", 1)[0])
    words = [w for w in posixpath.normpath(raw).split("/") if w and w not in (".", "..")]
    path = "/" + "/".join(words)
    if path == "/simple" or path.startswith("/simple/"):
        page = os.path.join(directory, path.lstrip("/"))
        if os.path.isfile(page) or os.path.isfile(os.path.join(page, "index.html")):
            return None
        return 404, f"{path}: not an index page"
    if not path.startswith("/files/") or path.count("/") != 2:
        return 404, f"{path}: the wheel cache serves only its index and the lock's wheels"
    name = path.rsplit("/", 1)[-1]
    try:
        with open(os.path.join(directory, HASHES)) as f:
            expected = json.load(f).get(name)
    except (OSError, ValueError):
        expected = None
    if expected is None:
        return 404, f"{name} is not in the lab's lock: not served"
    full = os.path.join(directory, "files", name)
    if not os.path.isfile(full):
        return 404, f"{name} is not in the cache"
    got = current_sha256(full)
    if got != expected:
        return 409, (
            f"radeonlab wheel cache: {name} no longer matches the lab's lock: expected sha256 {expected}, "
            f"received {got} on this host; not served"
        )
    return None


class Handler(SimpleHTTPRequestHandler):
    def list_directory(self, path: str | os.PathLike[str]) -> io.BytesIO | None:
        self.send_error(404, "no listings")  # a folder without index.html: never listed
        return None

    def send_head(self) -> io.BytesIO | BinaryIO | None:
        refused = check(self.directory, self.path)
        if refused is None:
            return super().send_head()
        status, reason = refused
        body = (reason + "\n").encode()
        self.log_message("refused %s: %s", self.path, reason)
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        return None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bind", default="0.0.0.0")
    parser.add_argument("--directory", required=True)
    parser.add_argument("port", type=int)
    args = parser.parse_args(argv)
    handler = partial(Handler, directory=args.directory)
    with ThreadingHTTPServer((args.bind, args.port), handler) as server:
        print(f"serving {args.directory} on {args.bind}:{args.port}", file=sys.stderr, flush=True)
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

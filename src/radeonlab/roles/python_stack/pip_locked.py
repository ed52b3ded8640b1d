"""Runs on a workstation (python3, standard library only): a locked pip install that fails in one line.

    python3 pip_locked.py PIP ARGS... --require-hashes --no-deps -r LOCK
    python3 pip_locked.py --cache-first VENV/bin/uv pip install ARGS... --require-hashes --no-deps -r LOCK

Runs the pip (or uv) command it is given (the lock's path is the value of its `-r`). pip refuses a file whose
sha256 differs from the lock, but says so in several lines among its progress output. Here its output is
kept back; on success a one-line summary is printed, on a refused file one line per file on stderr:

    radeonlab: hash mismatch: peft-0.18.1-py3-none-any.whl from 10.0.0.5:8765: expected sha256 <lock's>,
    received <what was served>; nothing from this install was installed

A lab wheel cache that refuses to serve a file that no longer matches its own lock (HTTP 409) is reported
the same way, with the hash it says it holds. Any other failure: pip's last lines, unchanged.
pip downloads and checks every file before installing any, so a refused file leaves the venv as it was;
so does uv (it prepares every file, hash-checked, before it installs one). uv's wording is read too.

--cache-first (uv only): the command is first run with uv's --offline, from uv's cache alone, and only
when that fails (a file the cache lacks, or one whose sha256 uv computed on fetching it is not the lock's)
as given: every line is pinned by sha256, so a cached copy with the lock's hash is the locked file.
Online, uv revalidates each cached answer older than its freshness (the index's Cache-Control, else a
heuristic from Last-Modified: 600 s in uv 0.13.9's trace), and where the index's 304 carries no validator
(uv: "Server returned unusable 304") it reads every wheel's METADATA again, the whole file where the index
takes no range requests, while it still links the wheel itself from the cache. Offline, a re-install (a
new venv, the same lock) asks the indexes nothing.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request

MISMATCH_HEADER = "THESE PACKAGES DO NOT MATCH THE HASHES"
# pip 23: "    idna==3.20 from http://h:p/files/idna-3.20-py3-none-any.whl (from -r r.txt (line 1)):",
# and for a line by URL (a lock made by the deploy): "    idna@ http://h:p/files/idna-... from http://h..."
_FROM = re.compile(r"^\s+(?P<req>\S+|\S+@ \S+) from (?P<url>\S+?)(?: \(from .*\))?:\s*$")
_EXPECTED = re.compile(r"^\s+Expected sha256 (?P<sha>[0-9a-f]{64})")
_GOT = re.compile(r"^\s+Got\s+(?P<sha>[0-9a-f]{64})")
_HTTP = re.compile(r"HTTP error (?P<code>\d{3}) while getting (?P<url>\S+)")
_RECEIVED = re.compile(r"received ([0-9a-f]{64})")
_LOCK_LINE = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)==(?P<version>\S+) --hash=sha256:(?P<sha>[0-9a-f]{64})")
# uv 0.13: "  cause: Hash mismatch for `idna @ http://h:p/files/idna-3.20-py3-none-any.whl`" (or `idna==3.20`
# for a line by name), then "Expected:" and "Computed:", each followed by a "sha256:<hex>" line.
_UV_MISMATCH = re.compile(r"Hash mismatch for `(?P<req>[^`]+)`")
_UV_SHA = re.compile(r"^\s+sha256:(?P<sha>[0-9a-f]{64})\s*$")
# uv 0.13: "  cause: HTTP status client error (409 Conflict) for url (http://h:p/files/x.whl)"
_UV_HTTP = re.compile(r"HTTP status client error \((?P<code>\d{3})[^)]*\) for url \((?P<url>[^)\s]+)\)")
# uv 0.13 unpacks a wheel while it downloads and hashes it: a changed byte can stop it at the zip's own check
# first ("Failed to extract archive" ... "Bad CRC"), before the hash is compared. The runner then hashes the
# file itself (by its URL in the lock) to say the same one line.
_UV_FAILED = re.compile(
    r"Failed to (?:download|read) `(?P<req>[^`]+ @ (?P<url>[^`\s]+))`\n\s+cause: Failed to extract"
)
TAIL = 15  # lines of pip's output shown for a failure that is not about hashes
CACHE_FIRST = "--cache-first"
FROM_CACHE = "offline, from uv's cache: nothing downloaded"


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def file_and_host(url: str) -> tuple[str, str]:
    """ "http://10.0.0.5:8765/files/x.whl#sha256=..." -> ("x.whl", "10.0.0.5:8765")."""
    parts = urllib.parse.urlsplit(url)
    name = urllib.parse.unquote(parts.path.rsplit("/", 1)[-1])
    return name, parts.netloc or "this host's disk"


def mismatch_lines(output: str) -> list[str]:
    """pip's hash-mismatch block -> one line per refused file."""
    if MISMATCH_HEADER not in output:
        return []
    lines, current, expected = [], None, None
    for raw in output.splitlines():
        if m := _FROM.match(raw):
            current, expected = file_and_host(m["url"]), None
        elif (m := _EXPECTED.match(raw)) and current:
            expected = m["sha"]
        elif (m := _GOT.match(raw)) and current and expected:
            name, host = current
            lines.append(
                f"radeonlab: hash mismatch: {name} from {host}: expected sha256 {expected}, received "
                f"{m['sha']}; nothing from this install was installed"
            )
            current = None
    return lines


def uv_mismatch_lines(output: str, index_host: str = "the index") -> list[str]:
    """uv's hash-mismatch error -> one line per refused file. A line by URL names the file and its host;
    a line by name (`peft==0.18.1`) the requirement and the index it came through (`index_host`)."""
    lines = []
    for m in _UV_MISMATCH.finditer(output):
        req = m["req"]
        name, host = file_and_host(req.split(" @ ", 1)[1]) if " @ " in req else (req, index_host)
        shas = [s["sha"] for raw in output[m.end() :].splitlines() if (s := _UV_SHA.match(raw))][:2]
        if len(shas) == 2:
            lines.append(
                f"radeonlab: hash mismatch: {name} from {host}: expected sha256 {shas[0]}, received "
                f"{shas[1]}; nothing from this install was installed"
            )
    return lines


def unpack_failure_lines(output: str, lock_text: str, digest=None) -> list[str]:
    """uv's unpack failure of a file locked by URL -> the one hash-mismatch line, when the served file's
    sha256 (`digest(url)`, fetched again here) differs from the lock's; nothing otherwise."""
    digest = digest or _sha256_of
    lines = []
    for m in _UV_FAILED.finditer(output):
        expected = next(
            (h for raw in lock_text.splitlines() if m["url"] in raw and (h := _hash_of(raw))), None
        )
        got = digest(m["url"])
        if expected and got and got != expected:
            name, host = file_and_host(m["url"])
            lines.append(
                f"radeonlab: hash mismatch: {name} from {host}: expected sha256 {expected}, received {got}; "
                "nothing from this install was installed"
            )
    return lines


def _hash_of(line: str) -> str | None:
    m = re.search(r"--hash=sha256:([0-9a-f]{64})", line)
    return m.group(1) if m else None


def _sha256_of(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=60) as answer:
            h = hashlib.sha256()
            for block in iter(lambda: answer.read(1 << 20), b""):
                h.update(block)
            return h.hexdigest()
    except OSError:
        return None


def locked_sha(lock_text: str, wheel: str) -> str | None:
    """The lock's sha256 for a wheel file name (its name and version)."""
    name, version = (wheel.split("-") + ["", ""])[:2]
    for raw in lock_text.splitlines():
        m = _LOCK_LINE.match(raw.strip())
        if m and normalize(m["name"]) == normalize(name) and m["version"] == version:
            return m["sha"]
    return None


def refusal_lines(output: str, lock_text: str, fetch=None) -> list[str]:
    """pip's "HTTP error 409 while getting URL" (a wheel cache refusing a changed file) -> one line, with
    the hash the cache says it holds (from its answer's body) and the one the lock expects."""
    fetch = fetch or _fetch_body
    seen, lines = set(), []
    for m in [*_HTTP.finditer(output), *_UV_HTTP.finditer(output)]:
        if m["code"] != "409" or m["url"] in seen:
            continue
        seen.add(m["url"])
        name, host = file_and_host(m["url"])
        got = _RECEIVED.search(fetch(m["url"]) or "")
        lines.append(
            f"radeonlab: hash mismatch: {name} from {host}: expected sha256 {locked_sha(lock_text, name)}, "
            f"received {got.group(1) if got else 'unknown'} (the wheel cache refused to serve it); "
            "nothing from this install was installed"
        )
    return lines


def _fetch_body(url: str) -> str:
    try:
        urllib.request.urlopen(url.split("#", 1)[0], timeout=10)
    except urllib.error.HTTPError as e:
        return e.read(2000).decode(errors="replace")
    except OSError:
        return ""
    return ""


def _run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def summary(output: str) -> str:
    said = ("Successfully installed", "Installed ")  # pip's summary; uv's "Installed 3 packages in 9ms"
    installed = [line for line in output.splitlines() if line.startswith(said)]
    return installed[-1] if installed else "nothing to install"


def main(argv: list[str]) -> int:
    cache_first = argv[:1] == [CACHE_FIRST]
    argv = argv[1:] if cache_first else argv
    if "--require-hashes" not in argv or "-r" not in argv[:-1]:
        print("pip_locked.py: give pip --require-hashes and -r LOCK", file=sys.stderr)
        return 2
    r = argv.index("-r")
    lock = argv[r + 1]
    # uv wraps its error report at $COLUMNS (a long URL splits over two lines): read here, one line each
    env = {**os.environ, "COLUMNS": "100000"}
    if cache_first:  # any failure here (most often: a file not cached) is decided by the run online
        cached = _run([*argv[:r], "--offline", *argv[r:]], env)
        if cached.returncode == 0:
            print(f"{summary(cached.stdout)} ({FROM_CACHE})")
            return 0
    done = _run(argv, env)
    if done.returncode == 0:
        print(summary(done.stdout))
        return 0
    with open(lock) as f:
        lock_text = f.read()
    index = argv[argv.index("--index-url") + 1] if "--index-url" in argv[:-1] else ""
    uv_lines = uv_mismatch_lines(done.stdout, file_and_host(index)[1] if index else "the default index")
    lines = mismatch_lines(done.stdout) or uv_lines or refusal_lines(done.stdout, lock_text)
    lines = lines or unpack_failure_lines(done.stdout, lock_text)
    if not lines:
        lines = done.stdout.rstrip().splitlines()[-TAIL:]
    for line in lines:
        print(line, file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The first deploy of a stack with no lock: one host resolves, the lab's lock is written, every host
installs from it. Runs at execution time through pyinfra's `python.call` (the lock does not exist yet
when the deploy is planned), on the machine running pyinfra, one greenlet per host.

Hosts of one stack provisioned in parallel: a file lock beside the lab's lock (`.<key>.lock`) lets one host
resolve while the others wait (polled with gevent.sleep: a blocking flock would stop every greenlet of
this process); a host finding a lock that now covers it installs from it without resolving. A host with a
GPU target or an extra the lock lacks resolves again, constrained to the lock's versions (`-c`), and adds
its lines. python_stack_lock_refresh: the first host of the run re-resolves from nothing and rewrites the
lock; the others of the same run merge into it.
"""

from __future__ import annotations

import dataclasses
import fcntl
import io
import json
import os
import shlex
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gevent
from pyinfra import logger

from radeonlab.roles.python_stack import lock as stack_lock
from radeonlab.roles.python_stack import resolve

_REFRESHED: set[str] = set()  # lock files re-resolved from nothing by this run (python_stack_lock_refresh)
WAIT_POLL_S = 0.5


@dataclass
class Job:
    """What one host's first-deploy step needs (made when the deploy is planned)."""

    key: str
    lock_file: str  # the lab's lock on this machine
    data: dict[str, Any]
    rocm_version: str
    targets: list[str]
    extras: list[str]
    python: str  # the venv's python
    venv: str
    user: str
    group: str
    index_args: list[str]  # pip's --index-url / --extra-index-url / --find-links
    indexes: list[str]
    install: list[str] = field(default_factory=list)  # the locked install's command, -r excluded
    # privilege arguments (roles/privilege.py, decided when planned): as root, and as the training user
    root_args: dict[str, Any] = field(default_factory=dict)
    user_args: dict[str, Any] = field(default_factory=dict)


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive flock on `path`, waited for without blocking the other hosts' greenlets."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                gevent.sleep(WAIT_POLL_S)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _run(host: Any, job: Job, command: str, what: str) -> list[str]:
    ok, output = host.run_shell_command(command=command, **job.user_args)
    if not ok:
        tail = [line for line in output.stderr_lines if line.strip()][-3:] or output.stdout_lines[-3:]
        raise RuntimeError(f"{host.name}: {what} failed: {' | '.join(tail)}")
    return output.stdout_lines


def _report(host: Any, job: Job, args: list[str], name: str) -> dict[str, Any]:
    """`pip install --dry-run --ignore-installed --report` on the host (as the training user): what pip
    would install, nothing installed."""
    remote = f"{job.venv}/radeonlab-{name}.json"
    pip = [job.python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
    pip += ["--disable-pip-version-check", "--report", remote, *job.index_args, *args]
    _run(host, job, shlex.join(pip), f"resolving the stack {job.key} ({name})")
    buffer = io.BytesIO()
    if not host.get_file(remote, buffer, **job.root_args):
        raise RuntimeError(f"{host.name}: could not read pip's report {remote}")
    return json.loads(buffer.getvalue())


def _resolve(host: Any, job: Job, old: stack_lock.Lock | None) -> stack_lock.Lock:
    roots = resolve.stack_roots(job.data, job.rocm_version, job.targets, job.extras)
    args = roots.all()
    if old is not None:  # another target set: the lock's versions stay as they are
        old = dataclasses.replace(old, pins=resolve.carried_over(old, job.indexes))
        constraints = f"{job.venv}/radeonlab-constraints.txt"
        text = "".join(f"{p.name}=={p.version}\n" for p in old.pins)
        _put(host, job, text, constraints)
        args = ["-c", constraints, *args]
    reports = [_report(host, job, args, "report")]
    no_deps = [r for r in roots.common if r.split("==")[0] in resolve.NO_DEPS]
    reports.append(_report(host, job, ["--no-deps", *no_deps], "report-no-deps"))
    pins = resolve.pins_from_reports(reports, roots)
    pins = resolve.merge(old.pins if old is not None else (), pins)  # also sorts them
    head = resolve.header(job.key, host.name, job.indexes, job.lock_file)
    return stack_lock.Lock(job.key, head, tuple(pins))


def _put(host: Any, job: Job, text: str, remote: str) -> None:
    if not host.put_file(io.StringIO(text), remote, **job.root_args):
        raise RuntimeError(f"{host.name}: could not write {remote}")
    _run_root(host, job, f"chown {shlex.quote(job.user)}:{shlex.quote(job.group)} {shlex.quote(remote)}")


def _run_root(host: Any, job: Job, command: str) -> None:
    ok, output = host.run_shell_command(command=command, **job.root_args)
    if not ok:
        raise RuntimeError(f"{host.name}: `{command}` failed: {' | '.join(output.stderr_lines[-3:])}")


def _write(path: Path, lock: stack_lock.Lock) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(lock.text())
    os.chmod(tmp, 0o644)  # mkstemp's 0600: the lab's lock is meant to be read, reviewed and committed
    os.replace(tmp, path)


def lock_for_host(state: Any, host: Any, job: Job) -> stack_lock.Lock:
    """The lab's lock covering this host, resolved on it when there is none (or it lacks this host's
    targets/extras, or python_stack_lock_refresh asks for a new one), under the file lock."""
    path = Path(job.lock_file)
    with file_lock(path.with_name(f".{path.name}.lock")):
        refresh = bool(job.data.get("python_stack_lock_refresh")) and str(path) not in _REFRESHED
        old = None
        if path.exists() and not refresh:
            old = stack_lock.parse_lock(path.read_text(), job.key)
            if stack_lock.covers(old, job.data, job.targets, job.extras):
                return old
            if stack_lock.stale_pins(old, job.data, []):
                old = None  # a pin of the inventory moved: the stack is resolved again from nothing
        lock = _resolve(host, job, old)
        _write(path, lock)
        _REFRESHED.add(str(path))
        logger.warning(
            f"{host.name}: resolved the stack {job.key} and wrote the lab's hash lock {path} "
            f"({len(lock.pins)} files, sha256 each): other hosts install from it; commit it to keep the lab "
            "on these files"
        )
        return lock


def resolve_and_install(state: Any, host: Any, job: Job) -> None:
    """python.call's function: the lock (made here if need be), then this host's lines of it, installed
    with --require-hashes --no-deps through pip_locked.py."""
    lock = lock_for_host(state, host, job)
    pins = lock.for_host(job.targets, job.extras)
    by_url = tuple(job.indexes) == lock.indexes
    lock_file = f"{job.venv}/radeonlab-lock.txt"
    _put(host, job, lock.install_text(pins, by_url), lock_file)
    out = _run(host, job, shlex.join([*job.install, "-r", lock_file]), f"installing the hash lock {job.key}")
    logger.info(f"{host.name}: {out[-1] if out else 'installed'} (hash lock {job.lock_file})")

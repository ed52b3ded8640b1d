"""The laptop's job history: a SQLite cache of what the hosts' job folders say.

The hosts are the truth (job.json + state.json in each job folder); this cache makes `radeonlab list` fast
and offline, and `rebuild()` recreates it from the hosts' records. The only thing it knows that the hosts
do not is where a job's results were fetched to locally (kept across rebuilds).
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from radeonlab.contract.state import JobState

HOME_ENV = "RADEONLAB_HOME"  # overrides the data folder (tests, several labs on one laptop)
DEFAULT_HOME = Path("~/.local/share/radeonlab")
DB_NAME = "jobs.db"
SCHEMA_VERSION = 2  # PRAGMA user_version; 1 (unversioned) lacked end_reason
SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    name TEXT NOT NULL,
    state TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    gpus TEXT NOT NULL DEFAULT '[]',       -- JSON list of GPU indexes
    attempts TEXT NOT NULL DEFAULT '[]',   -- JSON list, as in job.json
    exit_code INTEGER,
    reason TEXT,
    remote_dir TEXT NOT NULL,
    local_dir TEXT,                         -- where `fetch` put the results; laptop-only knowledge
    end_reason TEXT                         -- contract EndReason value once the job ended
);
CREATE INDEX IF NOT EXISTS jobs_host_state ON jobs (host, state);
"""


@dataclass
class JobRow:
    """One job as the laptop remembers it."""

    id: str
    host: str
    name: str
    state: str
    created_at: str
    updated_at: str
    remote_dir: str
    gpus: list[int] = field(default_factory=list)
    attempts: list[dict[str, Any]] = field(default_factory=list)
    exit_code: int | None = None
    reason: str | None = None
    local_dir: str | None = None
    end_reason: str | None = None


@dataclass
class HostJob:
    """A job as read from a host: its job.json and state.json contents and its folder."""

    host: str
    remote_dir: str
    job: Mapping[str, Any]
    state: Mapping[str, Any]


def db_path(environ: Mapping[str, str] | None = None) -> Path:
    """$RADEONLAB_HOME/jobs.db, else ~/.local/share/radeonlab/jobs.db."""
    env = os.environ if environ is None else environ
    home = Path(env[HOME_ENV]) if env.get(HOME_ENV) else DEFAULT_HOME.expanduser()
    return home / DB_NAME


# version -> statements that bring a database of that version to the next one
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: ("ALTER TABLE jobs ADD COLUMN end_reason TEXT",),
}


def private(path: Path) -> None:
    """The database holds every job's hosts, names and overrides: its folder 0700 and the file 0600, made so
    (sqlite gives its journal the database's mode) and repaired when an older radeonlab left them open."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
    path.chmod(0o600)


def connect(path: Path | None = None) -> sqlite3.Connection:
    """Open the job database: created when missing, migrated when older; one made by a newer radeonlab is
    set aside (renamed) and rebuilt, since the hosts are the truth."""
    path = path or db_path()
    private(path)
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    exists = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'jobs'").fetchone() is not None
    if exists and version == 0:
        version = 1  # the first radeonlab did not number its schema
    if version > SCHEMA_VERSION:
        conn.close()
        path.rename(path.with_name(f"{path.name}.newer-schema-{version}"))
        return connect(path)
    if exists:
        for v in range(version, SCHEMA_VERSION):
            for statement in MIGRATIONS.get(v, ()):
                conn.execute(statement)
    else:
        conn.executescript(SCHEMA)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    conn.commit()
    return conn


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def row_from_host(record: HostJob, updated_at: str | None = None) -> JobRow:
    """A JobRow from a host's job.json + state.json (a single "gpu" index is accepted too)."""
    job, state = record.job, record.state
    gpus = job.get("gpus", [job["gpu"]] if isinstance(job.get("gpu"), int) else [])
    return JobRow(
        id=str(job["id"]),
        host=record.host,
        name=str(job.get("name", "")),
        state=str(state.get("state", JobState.QUEUED.value)),
        created_at=str(job.get("created_at", "")),
        updated_at=updated_at or _now(),
        remote_dir=record.remote_dir,
        gpus=list(gpus),
        attempts=list(job.get("attempts", [])),
        exit_code=state.get("exit_code"),
        reason=state.get("reason"),
        end_reason=state.get("end"),
    )


def upsert(conn: sqlite3.Connection, row: JobRow) -> None:
    """Insert or update a job; a known local_dir is kept when the new row has none."""
    conn.execute(
        """INSERT INTO jobs (id, host, name, state, created_at, updated_at, gpus, attempts, exit_code, reason,
                             remote_dir, local_dir, end_reason)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
           ON CONFLICT(id) DO UPDATE SET host=excluded.host, name=excluded.name, state=excluded.state,
             created_at=excluded.created_at, updated_at=excluded.updated_at, gpus=excluded.gpus,
             attempts=excluded.attempts, exit_code=excluded.exit_code, reason=excluded.reason,
             remote_dir=excluded.remote_dir, local_dir=COALESCE(excluded.local_dir, jobs.local_dir),
             end_reason=excluded.end_reason""",
        (
            row.id,
            row.host,
            row.name,
            row.state,
            row.created_at,
            row.updated_at,
            json.dumps(row.gpus),
            json.dumps(row.attempts),
            row.exit_code,
            row.reason,
            row.remote_dir,
            row.local_dir,
            row.end_reason,
        ),
    )
    conn.commit()


def upsert_from_host(conn: sqlite3.Connection, record: HostJob) -> JobRow:
    """Record what a host says about one job; returns the row stored."""
    row = row_from_host(record)
    upsert(conn, row)
    return row


def delete(conn: sqlite3.Connection, job_id: str) -> None:
    """Forget a job (its folder was removed on the host)."""
    conn.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
    conn.commit()


def set_local_dir(conn: sqlite3.Connection, job_id: str, local_dir: str) -> None:
    """Remember where `fetch` put a job's results."""
    conn.execute("UPDATE jobs SET local_dir = ?, updated_at = ? WHERE id = ?", (local_dir, _now(), job_id))
    conn.commit()


def _row(r: sqlite3.Row) -> JobRow:
    data = dict(r)
    data["gpus"], data["attempts"] = json.loads(data["gpus"]), json.loads(data["attempts"])
    return JobRow(**data)


def get(conn: sqlite3.Connection, job_id: str) -> JobRow | None:
    """One job by id, None if unknown."""
    r = conn.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
    return _row(r) if r else None


def list_jobs(
    conn: sqlite3.Connection,
    *,
    host: str | None = None,
    states: Iterable[str] | None = None,
    name: str | None = None,
    limit: int | None = None,
) -> list[JobRow]:
    """Jobs, newest first, filtered by host, state(s) and name (exact)."""
    where, args = [], []
    for column, value in (("host", host), ("name", name)):
        if value is not None:
            where.append(f"{column} = ?")
            args.append(value)
    states = list(states or [])
    if states:
        where.append(f"state IN ({','.join('?' * len(states))})")
        args += states
    sql = "SELECT * FROM jobs" + (f" WHERE {' AND '.join(where)}" if where else "")
    sql += " ORDER BY created_at DESC, id DESC" + (" LIMIT ?" if limit else "")
    return [_row(r) for r in conn.execute(sql, [*args, *([limit] if limit else [])])]


def rebuild(conn: sqlite3.Connection, records: Iterable[HostJob], hosts: Iterable[str] | None = None) -> int:
    """Make the cache match the hosts' job folders: upsert every record, drop rows of the given hosts (by
    default: the hosts the records came from) that no longer exist there. local_dir survives. Returns the
    number of jobs recorded."""
    rows = [row_from_host(r) for r in records]
    covered = set(hosts) if hosts is not None else {r.host for r in rows}
    for row in rows:
        upsert(conn, row)
    keep = {r.id for r in rows}
    for host in covered:
        for (job_id,) in conn.execute("SELECT id FROM jobs WHERE host = ?", (host,)).fetchall():
            if job_id not in keep:
                conn.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
    conn.commit()
    return len(rows)

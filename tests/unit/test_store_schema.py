"""The laptop's SQLite cache across radeonlab versions: an older database is migrated in place (its rows and
the laptop-only local_dir kept), one written by a newer radeonlab is set aside and rebuilt from the hosts."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from radeonlab.jobs.fleet import store

# The first radeonlab's table (jobs/store.py before the restructure): no end_reason, no user_version.
VERSION_1 = """
CREATE TABLE jobs (
    id TEXT PRIMARY KEY, host TEXT NOT NULL, name TEXT NOT NULL, state TEXT NOT NULL,
    created_at TEXT NOT NULL, updated_at TEXT NOT NULL, gpus TEXT NOT NULL DEFAULT '[]',
    attempts TEXT NOT NULL DEFAULT '[]', exit_code INTEGER, reason TEXT, remote_dir TEXT NOT NULL,
    local_dir TEXT
);
CREATE INDEX jobs_host_state ON jobs (host, state);
"""
OLD_JOB = "old-20250101-000000-abcd"


def version_1_database(path: Path, user_version: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as conn:
        conn.executescript(VERSION_1)
        conn.execute(
            "INSERT INTO jobs VALUES (?, 'ws1', 'old', 'succeeded', '2025-01-01T00:00:00Z', "
            "'2025-01-02T00:00:00Z', '[0]', '[{\"n\": 1}]', 0, NULL, '/home/lab/radeonlab/jobs/old', "
            "'/laptop/results/old')",
            (OLD_JOB,),
        )
        conn.execute(f"PRAGMA user_version = {user_version}")
    conn.close()


def host_job(job_id: str, state: str, end: str | None = None) -> store.HostJob:
    job = {"id": job_id, "name": job_id.split("-")[0], "created_at": "2026-01-01T00:00:00Z", "gpus": [0]}
    return store.HostJob("ws1", f"/home/lab/radeonlab/jobs/{job_id}", job, {"state": state, "end": end})


@pytest.mark.parametrize("user_version", [0, 1])  # 0: the first radeonlab did not number its schema
def test_a_version_1_database_is_migrated_in_place(tmp_path: Path, user_version: int) -> None:
    path = tmp_path / "jobs.db"
    version_1_database(path, user_version)
    conn = store.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == store.SCHEMA_VERSION
        old = store.get(conn, OLD_JOB)
        assert old is not None and (old.state, old.gpus, old.attempts) == ("succeeded", [0], [{"n": 1}])
        assert old.local_dir == "/laptop/results/old" and old.end_reason is None
        # the new column is usable, and a host's newer word about the job keeps the laptop's local_dir
        store.upsert_from_host(conn, host_job(OLD_JOB, "failed", "process_gone"))
        again = store.get(conn, OLD_JOB)
        assert again is not None and (again.end_reason, again.local_dir) == (
            "process_gone",
            "/laptop/results/old",
        )
    finally:
        conn.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jobs.db"]  # in place: nothing set aside
    reopened = store.connect(path)  # migrating twice is a no-op
    try:
        assert [r.id for r in store.list_jobs(reopened)] == [OLD_JOB]
    finally:
        reopened.close()


def test_a_database_of_a_newer_radeonlab_is_set_aside_and_rebuilt(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    newer = store.SCHEMA_VERSION + 1
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE jobs (id TEXT PRIMARY KEY, something_new BLOB)")
        conn.execute("INSERT INTO jobs VALUES ('x', 'kept for that radeonlab')")
        conn.execute(f"PRAGMA user_version = {newer}")
    conn.close()
    fresh = store.connect(path)
    try:
        assert fresh.execute("PRAGMA user_version").fetchone()[0] == store.SCHEMA_VERSION
        assert store.list_jobs(fresh) == []  # nothing read from a table this version does not know
        # the hosts are the truth: what they say fills the new cache
        assert store.rebuild(fresh, [host_job("a-20260101-000000-aaaa", "running")]) == 1
        assert [r.id for r in store.list_jobs(fresh)] == ["a-20260101-000000-aaaa"]
    finally:
        fresh.close()
    aside = tmp_path / f"jobs.db.newer-schema-{newer}"
    with sqlite3.connect(aside) as kept:  # set aside untouched, for the newer radeonlab to find again
        assert kept.execute("SELECT * FROM jobs").fetchall() == [("x", "kept for that radeonlab")]
        assert kept.execute("PRAGMA user_version").fetchone()[0] == newer
    kept.close()

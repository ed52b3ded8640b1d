"""The laptop's SQLite job cache, in a temporary RADEONLAB_HOME."""

from __future__ import annotations

from pathlib import Path

import pytest

from radeonlab.jobs.fleet import store


def host_job(
    job_id: str,
    host: str = "ws1",
    state: str = "running",
    created: str = "2025-01-01T00:00:00Z",
    **state_extra: object,
) -> store.HostJob:
    job = {
        "id": job_id,
        "name": job_id.split("-")[0],
        "spec_file": "s.yaml",
        "created_at": created,
        "host": host,
        "gpus": [0],
        "attempts": [{"n": 1, "created_at": created}],
    }
    return store.HostJob(
        host=host,
        remote_dir=f"/home/lab/radeonlab/jobs/{job_id}",
        job=job,
        state={"state": state, **state_extra},
    )


@pytest.fixture
def conn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(store.HOME_ENV, str(tmp_path / "rl home"))
    c = store.connect()
    yield c
    c.close()


def test_db_path_default_and_override(tmp_path: Path) -> None:
    assert store.db_path({}) == Path("~/.local/share/radeonlab/jobs.db").expanduser()
    assert store.db_path({store.HOME_ENV: str(tmp_path)}) == tmp_path / "jobs.db"


def test_upsert_from_host_then_update(conn, tmp_path: Path) -> None:
    assert (tmp_path / "rl home" / "jobs.db").exists()
    row = store.upsert_from_host(conn, host_job("a-20250101-000000-abcd"))
    assert row.state == "running" and row.gpus == [0] and row.attempts[0]["n"] == 1
    store.upsert_from_host(
        conn, host_job("a-20250101-000000-abcd", state="failed", exit_code=137, reason="r")
    )
    got = store.get(conn, "a-20250101-000000-abcd")
    assert got is not None and (got.state, got.exit_code, got.reason) == ("failed", 137, "r")
    assert got.remote_dir == "/home/lab/radeonlab/jobs/a-20250101-000000-abcd"
    assert store.get(conn, "nope") is None


def test_single_gpu_form_of_job_json(conn) -> None:
    rec = host_job("g-20250101-000000-abcd")
    rec.job = {**rec.job, "gpu": 2}
    del rec.job["gpus"]
    assert store.upsert_from_host(conn, rec).gpus == [2]


def test_list_filters_and_order(conn) -> None:
    store.upsert_from_host(conn, host_job("a-20250101-000000-aaaa", created="2025-01-01T00:00:00Z"))
    store.upsert_from_host(
        conn,
        host_job("b-20250102-000000-bbbb", host="ws2", state="succeeded", created="2025-01-02T00:00:00Z"),
    )
    store.upsert_from_host(
        conn, host_job("c-20250103-000000-cccc", state="failed", created="2025-01-03T00:00:00Z")
    )
    assert [r.id[0] for r in store.list_jobs(conn)] == ["c", "b", "a"]
    assert [r.id[0] for r in store.list_jobs(conn, host="ws1")] == ["c", "a"]
    assert [r.id[0] for r in store.list_jobs(conn, states=["succeeded", "failed"])] == ["c", "b"]
    assert [r.id[0] for r in store.list_jobs(conn, name="a")] == ["a"]
    assert len(store.list_jobs(conn, limit=1)) == 1


def test_rebuild_from_hosts_keeps_local_dir_and_drops_vanished(conn) -> None:
    store.upsert_from_host(conn, host_job("a-20250101-000000-aaaa"))
    store.upsert_from_host(conn, host_job("gone-20250101-000000-dddd"))
    store.upsert_from_host(conn, host_job("other-20250101-000000-eeee", host="ws9"))
    store.set_local_dir(conn, "a-20250101-000000-aaaa", "/laptop/results/a")
    n = store.rebuild(
        conn,
        [
            host_job("a-20250101-000000-aaaa", state="succeeded", exit_code=0),
            host_job("new-20250102-000000-ffff"),
        ],
    )
    assert n == 2
    ids = {r.id for r in store.list_jobs(conn)}
    assert ids == {"a-20250101-000000-aaaa", "new-20250102-000000-ffff", "other-20250101-000000-eeee"}
    a = store.get(conn, "a-20250101-000000-aaaa")
    assert a.state == "succeeded" and a.local_dir == "/laptop/results/a"
    # a host that answered with no jobs at all is emptied when named
    store.rebuild(conn, [], hosts=["ws9"])
    assert store.get(conn, "other-20250101-000000-eeee") is None


def test_rebuild_into_a_fresh_database(tmp_path: Path) -> None:
    fresh = store.connect(tmp_path / "x" / "jobs.db")
    store.rebuild(fresh, [host_job("a-20250101-000000-aaaa", state="cancelled")])
    assert [r.state for r in store.list_jobs(fresh)] == ["cancelled"]


def test_the_database_is_private_to_the_user_and_old_modes_are_repaired(tmp_path: Path) -> None:
    """jobs.db names every job's hosts, datasets and overrides: 0600 in a 0700 folder, also when an older
    radeonlab made them 0644 under 0755."""
    home = tmp_path / "share" / "radeonlab"
    store.connect(home / store.DB_NAME).close()
    assert (home.stat().st_mode & 0o777, (home / store.DB_NAME).stat().st_mode & 0o777) == (0o700, 0o600)
    home.chmod(0o755)
    (home / store.DB_NAME).chmod(0o644)
    conn = store.connect(home / store.DB_NAME)
    conn.execute("SELECT 1").fetchone()
    conn.close()
    assert (home.stat().st_mode & 0o777, (home / store.DB_NAME).stat().st_mode & 0o777) == (0o700, 0o600)

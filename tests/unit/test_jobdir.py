"""radeonlab.contract.jobdir on this machine's /proc: the one "is it alive?" test and the one scanner."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from radeonlab.contract.jobdir import (
    alive,
    group_alive,
    job_alive,
    live_groups,
    read_json,
    scan,
    start_time,
    write_json_atomic,
)
from tests.support.hostjob import wait_for

SLEEPER = [sys.executable, "-c", "import time; time.sleep(300)"]


def proc_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen]]:
    """Processes a test starts: killed and reaped at teardown."""
    made: list[subprocess.Popen] = []
    yield made
    for child in made:
        if child.poll() is None:
            child.kill()
        child.wait()


def zombie(children: list[subprocess.Popen]) -> subprocess.Popen:
    """A child that exited and was not reaped yet (state Z)."""
    child = subprocess.Popen(["true"], start_new_session=True)
    children.append(child)
    wait_for(lambda: proc_state(child.pid) == "Z")
    return child


def test_a_live_process_is_alive_and_its_start_time_names_it() -> None:
    me = os.getpid()
    started = start_time(me)
    assert isinstance(started, int) and started > 0
    assert alive(me) and alive(me, started) and alive(str(me), str(started))  # type: ignore[arg-type]
    assert not alive(None) and not alive(0)


def test_a_reused_pid_with_another_start_time_is_not_the_recorded_process() -> None:
    me = os.getpid()
    assert not alive(me, start_time(me) - 1)  # type: ignore[operator]
    assert not alive(me, start_time(me) + 1)  # type: ignore[operator]


def test_a_process_that_is_gone_is_dead(children: list[subprocess.Popen]) -> None:
    child = subprocess.Popen(["true"])
    child.wait()
    assert not alive(child.pid) and start_time(child.pid) is None


def test_a_zombie_is_dead(children: list[subprocess.Popen]) -> None:
    child = zombie(children)
    assert start_time(child.pid) is not None  # /proc still lists it...
    assert not alive(child.pid) and not alive(child.pid, start_time(child.pid))  # ...but it holds nothing


def test_live_groups_and_group_alive(children: list[subprocess.Popen]) -> None:
    leader = subprocess.Popen(SLEEPER, start_new_session=True)  # its own process group, like a training run
    children.append(leader)
    groups = live_groups()
    assert os.getpgid(0) in groups and leader.pid in groups
    assert group_alive(leader.pid) and not group_alive(None) and not group_alive(0)
    dead = zombie(children)  # a group whose only member is a zombie holds no GPU memory
    assert dead.pid not in live_groups() and not group_alive(dead.pid)
    os.kill(leader.pid, signal.SIGKILL)
    leader.wait()
    assert leader.pid not in live_groups() and not group_alive(leader.pid)


def test_job_alive_is_the_launcher_or_its_training_group(children: list[subprocess.Popen]) -> None:
    me = os.getpid()
    assert job_alive({"pid": me, "pid_start": start_time(me)})
    assert not job_alive({"pid": me, "pid_start": start_time(me) + 1})  # type: ignore[operator]
    training = subprocess.Popen(SLEEPER, start_new_session=True)
    children.append(training)
    # the launcher was SIGKILLed (no pid alive) but its training still runs: the job is alive
    gone = {"pid": 2**22 + 1, "pid_start": 1, "pgid": training.pid}
    assert job_alive(gone) and job_alive(gone, {training.pid}) and not job_alive(gone, set())
    assert not job_alive({}) and not job_alive({"state": "queued"})


def test_read_json_is_empty_for_what_is_not_a_json_object(tmp_path: Path) -> None:
    assert read_json(str(tmp_path / "absent.json")) == {}
    (tmp_path / "list.json").write_text("[1]")
    (tmp_path / "half.json").write_text('{"state": "runn')
    assert read_json(str(tmp_path / "list.json")) == {} and read_json(str(tmp_path / "half.json")) == {}
    write_json_atomic(str(tmp_path / "state.json"), {"state": "running"})
    assert read_json(str(tmp_path / "state.json")) == {"state": "running"}
    assert [p.name for p in tmp_path.iterdir() if ".tmp." in p.name] == []


def write_job(jobs: Path, job_id: str, created_at: str, state: dict | None) -> None:
    (jobs / job_id).mkdir(parents=True)
    (jobs / job_id / "job.json").write_text(json.dumps({"id": job_id, "created_at": created_at}))
    if state is not None:
        (jobs / job_id / "state.json").write_text(json.dumps(state))


def test_scan_order_and_contents(tmp_path: Path, children: list[subprocess.Popen]) -> None:
    jobs = tmp_path / "jobs"
    me = os.getpid()
    write_job(jobs, "b-newest", "2025-01-03T00:00:00Z", {"state": "succeeded", "exit_code": 0})
    write_job(
        jobs, "z-oldest", "2025-01-01T00:00:00Z", {"state": "running", "pid": me, "pid_start": start_time(me)}
    )
    write_job(jobs, "a-middle", "2025-01-02T00:00:00Z", None)  # staged, no state.json yet
    write_job(
        jobs, "c-middle", "2025-01-02T00:00:00Z", {"state": "running", "pid": 2**22 + 1, "pid_start": 1}
    )
    (jobs / "half-staged").mkdir()  # job.json is written last: without it, not a job yet
    (jobs / "half-staged" / "state.json").write_text('{"state": "queued"}')
    found = scan(str(jobs))
    assert [j["id"] for j in found] == ["z-oldest", "a-middle", "c-middle", "b-newest"]  # created_at, then id
    by_id = {j["id"]: j for j in found}
    assert by_id["z-oldest"]["alive"] is True and by_id["z-oldest"]["job"]["created_at"].startswith(
        "2025-01-01"
    )
    assert by_id["a-middle"]["state"] == {"state": "queued"} and by_id["a-middle"]["alive"] is False
    assert by_id["c-middle"]["alive"] is False  # says running, but its launcher is gone
    assert by_id["b-newest"]["state"]["exit_code"] == 0
    assert [j["id"] for j in scan(str(jobs), ["b-newest", "missing", "half-staged"])] == ["b-newest"]
    assert scan(str(tmp_path / "no-jobs-yet")) == []

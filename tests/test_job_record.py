"""Job ids (name sanitizing), the job state machine, and the job folder record (job.json/state.json)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from radeonlab.contract.jobid import is_job_id, new_job_id, parse_job_id, sanitize_name
from radeonlab.contract.records import Attempt, JobPaths, JobRecord, StateRecord
from radeonlab.contract.state import TRANSITIONS, InvalidTransition, JobState, can_move, check_move

WHEN = datetime(2025, 3, 31, 23, 26, 19, tzinfo=UTC)


@pytest.mark.parametrize(
    "name,slug",
    [
        ("Llama-3 8B LoRA", "llama-3-8b-lora"),
        ("../../etc/passwd", "etc-passwd"),
        ("..", "job"),
        ("", "job"),
        ("-rf --no-preserve-root", "rf-no-preserve-root"),
        ("$(rm -rf ~); `x` 'q' \"d\" *?", "rm-rf-x-q-d"),
        ("Café Übung", "cafe-ubung"),
        ("日本語", "job"),
        ("a" * 100, "a" * 40),
    ],
)
def test_sanitize_name(name: str, slug: str) -> None:
    assert sanitize_name(name) == slug


def test_new_job_id_shape_and_parse() -> None:
    job_id = new_job_id("My Run!", now=WHEN, rand_hex="beef")
    assert job_id == "my-run-20250331-232619-beef" and is_job_id(job_id)
    assert parse_job_id(job_id) == ("my-run", WHEN, "beef")
    assert is_job_id(new_job_id("../x"))
    for bad in ("../x-20250331-232619-beef", "x-20250331-232619-BEEF", "x", "x-2025-1-beef"):
        assert not is_job_id(bad)
        with pytest.raises(ValueError):
            parse_job_id(bad)
    with pytest.raises(ValueError):
        new_job_id("x", rand_hex="zz; rm")


def test_states_and_transitions() -> None:
    assert {s.value for s in JobState} == {"queued", "running", "succeeded", "failed", "cancelled"}
    assert [s for s in JobState if s.is_finished()] == [
        JobState.SUCCEEDED,
        JobState.FAILED,
        JobState.CANCELLED,
    ]
    assert can_move(JobState.QUEUED, JobState.RUNNING) and can_move(JobState.RUNNING, JobState.CANCELLED)
    assert not can_move(JobState.RUNNING, JobState.QUEUED)
    for done in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED):
        assert TRANSITIONS[done] == frozenset()
    with pytest.raises(InvalidTransition, match="a succeeded job cannot become running"):
        check_move(JobState.SUCCEEDED, JobState.RUNNING)
    assert JobState("running") is JobState.RUNNING


def test_job_paths_layout() -> None:
    p = JobPaths.for_job("/home/lab/radeonlab/jobs", "x-20250331-232619-beef")
    assert str(p.state) == "/home/lab/radeonlab/jobs/x-20250331-232619-beef/state.json"
    assert str(p.output) == "/home/lab/radeonlab/jobs/x-20250331-232619-beef/output"
    assert str(p.locks_dir) == "/home/lab/radeonlab/locks"
    with pytest.raises(AttributeError):
        _ = p.nonexistent


def test_records_round_trip_and_tolerate_unknown_keys() -> None:
    job = JobRecord(
        id="x-20250331-232619-beef",
        name="x",
        spec_file="s.yaml",
        created_at="t",
        host="ws1",
        gpus=[0],
        env={"HF_HUB_OFFLINE": "1"},
        attempts=[Attempt(n=1, created_at="t")],
    )
    assert JobRecord.from_dict({**job.to_dict(), "future_key": 1}) == job
    legacy = JobRecord.from_dict(
        {"id": "i", "name": "n", "spec_file": "s", "created_at": "t", "host": "h", "gpu": 1}
    )
    assert legacy.gpus == [1]
    st = StateRecord.from_dict({"state": "failed", "exit_code": 137, "reason": "r", "new": True})
    assert (
        st.state is JobState.FAILED and st.to_dict()["state"] == "failed" and st.to_dict()["exit_code"] == 137
    )

"""Job ids (name sanitizing), job states and end reasons, the job folder layout, and the records both sides
share (host.json, job.json, state.json)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from radeonlab.contract.jobdir import JobDir, blobs_dir
from radeonlab.contract.jobid import is_job_id, new_job_id, parse_job_id, sanitize_name
from radeonlab.contract.parts import Export, ModelRef, Result, RocmInfo, SlurmInfo, SlurmNode, TorchInfo
from radeonlab.contract.records import (
    HOST_RECORD_SCHEMA,
    Attempt,
    GpuRecord,
    HostRecord,
    JobRecord,
    StateRecord,
)
from radeonlab.contract.remedy import Remedy
from radeonlab.contract.state import AttemptState, EndReason, JobState

WHEN = datetime(2025, 3, 31, 23, 26, 19, tzinfo=UTC)
# the fields job.json must hold (JobRecord's without defaults)
MINIMAL_JOB = {"id": "x-20250331-232619-beef", "name": "x", "spec_file": "s.yaml", "created_at": "t"}
MINIMAL_JOB["host"] = "h"


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


def test_states_and_end_reasons() -> None:
    assert {s.value for s in JobState} == {"queued", "running", "succeeded", "failed", "cancelled"}
    assert [s for s in JobState if s.is_finished()] == [
        JobState.SUCCEEDED,
        JobState.FAILED,
        JobState.CANCELLED,
    ]
    assert JobState("running") is JobState.RUNNING and JobState.RUNNING == "running"
    # every reason ends the job: it maps to a finished state and says why in words
    for reason in EndReason:
        assert reason.state.is_finished() and reason.message
    assert EndReason.SUCCEEDED.state is JobState.SUCCEEDED
    assert EndReason.CANCELLED.state is JobState.CANCELLED
    failed = {r for r in EndReason if r.state is JobState.FAILED}
    assert failed == set(EndReason) - {EndReason.SUCCEEDED, EndReason.CANCELLED}


def test_job_dir_layout() -> None:
    p = JobDir.of("/home/lab/radeonlab/jobs", "x-20250331-232619-beef")
    assert p.state == "/home/lab/radeonlab/jobs/x-20250331-232619-beef/state.json"
    assert p.output == "/home/lab/radeonlab/jobs/x-20250331-232619-beef/output"
    assert p.code == "/home/lab/radeonlab/jobs/x-20250331-232619-beef/host"
    assert p.id == "x-20250331-232619-beef" and p.jobs_dir == "/home/lab/radeonlab/jobs"
    assert p.locks_dir == "/home/lab/radeonlab/locks"
    assert blobs_dir("/home/lab/radeonlab/jobs/") == "/home/lab/radeonlab/blobs"
    with pytest.raises(AttributeError):
        _ = p.nonexistent


def test_records_round_trip_and_keep_unknown_keys() -> None:
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
    assert JobRecord.from_dict(job.to_dict()) == job
    # a newer laptop's key survives a host-side writer (the supervisor rewrites job.json as it runs)
    newer = JobRecord.from_dict({**job.to_dict(), "future_key": 1})
    assert newer.extra == {"future_key": 1} and newer.to_dict()["future_key"] == 1
    assert isinstance(newer.attempts[0], Attempt)
    st = StateRecord.from_dict({"state": "failed", "exit_code": 137, "reason": "r", "new": True})
    assert (
        st.state is JobState.FAILED and st.to_dict()["state"] == "failed" and st.to_dict()["exit_code"] == 137
    )
    assert StateRecord.from_dict({}).state is JobState.QUEUED
    ended = StateRecord(JobState.FAILED, end=EndReason.GAVE_UP.value)
    assert ended.end_reason is EndReason.GAVE_UP and ended.summary() == "failed (no remedy left)"
    assert StateRecord(JobState.FAILED, end="from-a-newer-version").end_reason is None


def test_host_record_round_trip_and_what_makes_it_unusable() -> None:
    record = HostRecord(
        host="ws1",
        user="lab",
        venv="/opt/v",
        jobs_dir="/home/lab/radeonlab/jobs",
        gpus=[GpuRecord(0, gfx="gfx1036", igpu=True), GpuRecord(1, gfx="gfx1100", vram_total=24 * 2**30)],
    )
    again = HostRecord.from_dict({**record.to_dict(), "from_the_future": 1})
    assert again == record and again.unusable() is None
    assert again.training_gpus() == [record.gpus[1]]  # the small iGPU is never the default
    assert again.training_gpus([0]) == [record.gpus[0]]
    with pytest.raises(ValueError, match="no GPU index 5"):
        again.training_gpus([5])
    assert again.blobs_dir == "/home/lab/radeonlab/blobs" and again.job_dir("j").state.endswith(
        "/j/state.json"
    )
    old = HostRecord.from_dict({**record.to_dict(), "schema": HOST_RECORD_SCHEMA - 1})
    assert "schema" in (old.unusable() or "")
    assert HostRecord.from_dict({**record.to_dict(), "venv": ""}).unusable() == "host record lacks venv"
    broken = HostRecord.from_dict({**record.to_dict(), "problem": "torch cannot see the GPU"})
    assert broken.unusable() == "verification failed: torch cannot see the GPU"


def test_a_container_hosts_record_round_trips_its_runtime_and_image_digest() -> None:
    """Issue 29: a container host's record names the runtime and the image the stack was checked in."""
    digest = "sha256:" + "c" * 64
    record = HostRecord(
        host="ws", user="lab", venv="/opt/v", jobs_dir="/j", runtime="container",
        image="localhost/radeonlab/train:0123456789ab", image_digest=digest,
        base_image="rocm/pytorch:t", base_image_digest="sha256:" + "d" * 64,
    )  # fmt: skip
    again = HostRecord.from_dict(json.loads(json.dumps(record.to_dict())))
    assert again == record and (again.runtime, again.image_digest) == ("container", digest)
    assert (again.base_image, again.base_image_digest) == ("rocm/pytorch:t", "sha256:" + "d" * 64)
    minimal = {"host": "ws", "user": "lab", "venv": "/v", "jobs_dir": "/j"}
    assert HostRecord.from_dict(minimal).runtime == "venv"


RECORDED = Path(__file__).parents[1] / "fixtures" / "records"


def test_a_host_record_written_before_the_typed_parts_reads_and_writes_back_the_same() -> None:
    """host.json as roles/verify wrote it before rocm and torch were dataclasses (see
    fixtures/records/README.md)."""
    data = json.loads((RECORDED / "host-simulated-rx7900xtx.json").read_text())
    record = HostRecord.from_dict(data)
    assert record.rocm == RocmInfo(stream="coresdk", version="10.1", installed="10.1.0")
    assert record.torch.version == "2.13.0+cpu" and record.torch.hip is None and record.torch.source == "amd"
    assert record.cpu_torch and record.torch.cpu_allowed and record.unusable() is None
    # written back the same, plus the runtime fields added since (issue 29), at their venv defaults
    added = {"runtime": "venv", "image": "", "image_digest": "", "base_image": "", "base_image_digest": "",
             "container_command": [], "container_problem": None}  # fmt: skip
    assert record.to_dict() == {**data, **added}
    # a host.json from before `source` existed: the part reads with its default
    older = {**data, "torch": {k: v for k, v in data["torch"].items() if k != "source"}}
    read = HostRecord.from_dict(older).torch
    assert read == TorchInfo(version="2.13.0+cpu", cpu_build=True, cpu_allowed=True)


def test_a_job_record_written_before_the_typed_parts_reads_and_writes_back_the_same() -> None:
    """A job folder written before the nested parts were dataclasses (fixtures/records/README.md): read
    through the typed record, its parts are typed, and writing it back changes nothing in the JSON."""
    data = json.loads((RECORDED / "job-nan-remedy.json").read_text())
    job = JobRecord.from_dict(data)
    assert [a.state for a in job.attempts] == [AttemptState.STOPPED, AttemptState.SUCCEEDED]
    assert job.attempts[1].remedy() == ("nan", "lower_lr")
    assert job.result == Result(
        attempt=2,
        settings={"learning_rate": 5e-05},
        config="config.yaml",
        summary="attempt 2: learning_rate 1e+30 -> 5e-05 (NaN at step 2), fresh start: succeeded",
    )
    assert job.code is not None and job.code.digest == "74394556607182260ee13001"
    assert job.code.files["radeonlab/jobs/host/supervisor.py"].startswith("2166173744")
    assert job.model is None and job.exports == []
    assert job.remedies == {"nan": Remedy(enabled=True, steps=[])}
    assert json.dumps(job.to_dict(), indent=1) == json.dumps(data, indent=1)


def test_model_and_exports_read_as_typed_parts_and_write_back() -> None:
    """model and exports as jobs/plan/model.py and jobs/host/export.py write them (key for key)."""
    model = {"name": "Qwen/Qwen2.5-0.5B", "revision": "main", "sha": "a" * 40, "local": False}
    model["endpoint"] = None
    export = {
        "name": "merged", "dir": "export/merged", "merged": True, "quantize": 4, "created_at": "t",
        "base_model": model, "adapter": "/j/output", "files": 3, "bytes": 2**30, "cleared": [],
    }  # fmt: skip
    job = JobRecord.from_dict({**MINIMAL_JOB, "model": model, "exports": [export], "result": {}})
    assert job.model == ModelRef(name="Qwen/Qwen2.5-0.5B", revision="main", sha="a" * 40, local=False)
    assert job.exports == [Export.from_dict(export)] and job.exports[0].base_model == job.model
    assert job.exports[0].quantize == 4 and job.result is None
    written = job.to_dict()
    assert written["model"] == {**model, "host_dir": None} and written["result"] == {}
    assert written["exports"] == [{**export, "base_model": {**model, "host_dir": None}}]
    # a Slurm job's part as jobs/apply/slurm.py writes it, before and after sbatch answered
    node = {"host": "ws1", "address": "10.0.0.1"}
    slurm = {"controller": "ctl", "candidates": ["ws1"], "nodes": {"sl-1": node}}
    staged = JobRecord.from_dict({**MINIMAL_JOB, "slurm": slurm})
    assert staged.slurm == SlurmInfo("ctl", ["ws1"], {"sl-1": SlurmNode("ws1", "10.0.0.1")})
    assert staged.to_dict()["slurm"] == slurm and job.to_dict()["slurm"] == {} and job.slurm is None
    sent = JobRecord.from_dict({**MINIMAL_JOB, "slurm": {**slurm, "job_id": "7"}})
    assert sent.slurm is not None and sent.slurm.job_id == "7" and sent.to_dict()["slurm"]["job_id"] == "7"
    # an attempt's state outside the enum is refused, not carried as a string
    with pytest.raises(ValueError):
        Attempt(n=1, created_at="t", state="exploded")  # type: ignore[arg-type]

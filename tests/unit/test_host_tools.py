"""The host tools a workstation runs as `python3 -m radeonlab.jobs.host.<tool>`: probe, stream, stage,
housekeeping. Run here, without SSH, from the shipped code (tests/support/hostjob.py) on temporary folders."""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest

from radeonlab.contract.jobdir import scan, start_time
from radeonlab.contract.messages import StageAnswer
from radeonlab.contract.records import StateRecord
from radeonlab.contract.state import JobState
from radeonlab.jobs.ssh import hostcode
from radeonlab.jobs.ssh.connection import SETTINGS
from tests.support.hostjob import fake_venv, last_json, run_tool, unpack_code, wait_for

MIB = 1 << 20
FAKE_CLI = f"""#!{sys.executable}
# SIMULATED llamafactory-cli for the stage tests: writes an adapter and exits 0; no training happens here.
import os
os.makedirs("output", exist_ok=True)
open("output/adapter_model.safetensors", "wb").write(b"simulated adapter")
"""


@pytest.fixture(scope="module")
def code(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """radeonlab's host code as a workstation holds it (~/.cache/radeonlab/code/<digest>)."""
    return unpack_code(tmp_path_factory.mktemp("code"))


def write_job(jobs: Path, job_id: str, job: dict, state: dict | None) -> Path:
    root = jobs / job_id
    root.mkdir(parents=True)
    (root / "job.json").write_text(json.dumps({"id": job_id, **job}))
    if state is not None:
        (root / "state.json").write_text(json.dumps(state))
    return root


def lines(done) -> list[dict]:  # noqa: ANN001
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


# ------------------------------------------------------------------------------------------------- probe


def test_probe_reports_the_record_and_the_jobs(code: Path, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    me = os.getpid()
    write_job(
        jobs,
        "a-1",
        {"created_at": "2025-01-01", "name": "a", "gpus": [1], "nodes": {"rank": 1}},
        {"state": "running", "pid": me, "pid_start": start_time(me)},
    )
    write_job(jobs, "b-2", {"created_at": "2025-01-02", "name": "b", "gpus": [0]}, {"state": "succeeded"})
    record = {"host": "ws1", "jobs_dir": str(jobs), "gpus": []}
    (tmp_path / "host.json").write_text(json.dumps(record))
    out = last_json(run_tool(code, "probe", "--record", str(tmp_path / "host.json")))
    assert out["record"] == record and out["record_error"] == "" and isinstance(out["gpus"], list)
    assert out["jobs"] == [
        {
            "id": "a-1",
            "state": {"state": "running", "pid": me, "pid_start": start_time(me)},
            "alive": True,
            "gpus": [1],
            "created_at": "2025-01-01",
            "name": "a",
            "rank": 1,
        },
        {
            "id": "b-2",
            "state": {"state": "succeeded"},
            "alive": False,
            "gpus": [0],
            "created_at": "2025-01-02",
            "name": "b",
            "rank": 0,
        },
    ]
    full = last_json(
        run_tool(code, "probe", "--record", str(tmp_path / "host.json"), "--jobs", "full", "--ids", "b-2")
    )
    assert [j["id"] for j in full["jobs"]] == ["b-2"] and full["jobs"][0]["job"]["name"] == "b"
    none = last_json(run_tool(code, "probe", "--record", str(tmp_path / "host.json"), "--jobs", "none"))
    assert none["jobs"] == []
    missing = last_json(run_tool(code, "probe", "--record", str(tmp_path / "absent.json")))
    assert missing["record"] is None and missing["record_error"] == "no host record" and missing["jobs"] == []


# ------------------------------------------------------------------------------------------------ stream


@pytest.fixture
def streamed_job(tmp_path: Path) -> Path:
    root = write_job(tmp_path / "jobs", "s-1", {"name": "s"}, {"state": "succeeded", "exit_code": 0})
    (root / "train.log").write_text("hello\nworld\n")
    (root / "output").mkdir()
    (root / "output/trainer_log.jsonl").write_text('{"current_steps": 1, "loss": 1.0}\n')
    return root


def data_of(events: list[dict], name: str) -> list[tuple[int, bytes]]:
    return [
        (e["offset"], base64.b64decode(e["data"])) for e in events if e["t"] == "data" and e["file"] == name
    ]


def test_stream_once_sends_the_state_the_data_and_end(code: Path, streamed_job: Path) -> None:
    events = lines(run_tool(code, "stream", str(streamed_job)))
    assert events[0] == {
        "t": "state",
        "state": {"state": "succeeded", "exit_code": 0},
        "alive": False,
        "job": {"id": "s-1", "name": "s"},
    }
    assert data_of(events, "train.log") == [(0, b"hello\nworld\n")]
    assert data_of(events, "output/trainer_log.jsonl") == [(0, b'{"current_steps": 1, "loss": 1.0}\n')]
    assert events[-1] == {"t": "end"} and [e["t"] for e in events].count("state") == 1


def test_stream_offsets_tail_and_a_rewritten_file(code: Path, streamed_job: Path) -> None:
    events = lines(run_tool(code, "stream", str(streamed_job), "--from", "train.log=6"))
    assert data_of(events, "train.log") == [(6, b"world\n")]
    assert data_of(events, "output/trainer_log.jsonl") == []  # --from names the files wanted
    tail = lines(run_tool(code, "stream", str(streamed_job), "--from", "train.log=-3"))
    assert data_of(tail, "train.log") == [(9, b"ld\n")]  # a negative offset: the last N bytes
    caught_up = lines(run_tool(code, "stream", str(streamed_job), "--from", "train.log=12"))
    assert data_of(caught_up, "train.log") == [] and caught_up[-1] == {"t": "end"}
    # a remedy trimmed trainer_log.jsonl below what the watcher had: it starts over at 0
    shrunk = lines(run_tool(code, "stream", str(streamed_job), "--from", "output/trainer_log.jsonl=500"))
    assert data_of(shrunk, "output/trainer_log.jsonl") == [(0, b'{"current_steps": 1, "loss": 1.0}\n')]


def test_stream_sends_a_large_file_in_chunks(code: Path, streamed_job: Path) -> None:
    big = os.urandom(2 * MIB + 5)
    (streamed_job / "train.log").write_bytes(big)
    chunks = data_of(lines(run_tool(code, "stream", str(streamed_job))), "train.log")
    assert [offset for offset, _ in chunks] == [0, MIB, 2 * MIB]
    assert b"".join(data for _, data in chunks) == big


def test_stream_follow_of_a_finished_job_ends(code: Path, streamed_job: Path) -> None:
    events = lines(run_tool(code, "stream", str(streamed_job), "--follow", "--interval", "0.05"))
    assert events[-1] == {"t": "end"} and data_of(events, "train.log") == [(0, b"hello\nworld\n")]


# ------------------------------------------------------------------------------------------------- stage


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The SSH user's home: the host code lives in ~/.cache/radeonlab/code/<digest>, the store beside jobs."""
    home = tmp_path / "home"
    unpack_code(home / SETTINGS["code_dir"] / hostcode.digest())
    return home


def blob(home: Path, content: bytes) -> str:
    digest = hashlib.sha256(content).hexdigest()
    path = home / "radeonlab/blobs/sha256" / digest
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    path.chmod(0o444)
    return digest


def stage(home: Path, request: dict) -> dict:
    code = home / SETTINGS["code_dir"] / hostcode.digest()
    return last_json(run_tool(code, "stage", stdin=json.dumps(request), cwd=home, env={"HOME": str(home)}))


def job_request(home: Path, job_id: str, **extra: object) -> dict:
    train = blob(home, b'{"instruction": "hi", "output": "there"}\n')
    return {
        "job_dir": str(home / "radeonlab/jobs" / job_id),
        "blobs": str(home / "radeonlab/blobs"),
        "links": [{"sha256": train, "dest": "data/train.jsonl"}],
        "files": {"config.yaml": "stage: sft\n", "config.json": '{"stage": "sft"}\n'},
        "code": f"{SETTINGS['code_dir']}/{hostcode.digest()}",
        "job": {
            "id": job_id,
            "name": "t",
            "spec_file": "s.yaml",
            "created_at": "x",
            "host": "h",
            "gpus": [0],
            "code": {"digest": hostcode.digest(), "files": hostcode.file_digests()},
        },
        **extra,
    }


def test_stage_writes_links_copies_code_and_secret(home: Path) -> None:
    request = job_request(home, "st-1", secret={"HF_TOKEN": "hf_s3cr3t"})
    answer = stage(home, request)
    assert StageAnswer.from_dict(answer) == StageAnswer(StateRecord(JobState.QUEUED), alive=False)
    root = Path(request["job_dir"])
    assert stat.S_IMODE(root.stat().st_mode) == 0o750
    assert (root / "config.yaml").read_text() == "stage: sft\n" and (root / "config.json").is_file()
    linked = root / "data/train.jsonl"
    stored = home / "radeonlab/blobs/sha256" / request["links"][0]["sha256"]
    assert linked.stat().st_ino == stored.stat().st_ino and linked.stat().st_nlink == 2  # a link, not a copy
    shipped = {
        str(p.relative_to(root / "host")): p.read_bytes() for p in (root / "host").rglob("*") if p.is_file()
    }
    assert shipped == hostcode.files()  # the code, without the __pycache__ of the tool that copied it
    assert json.loads((root / "job.json").read_text()) == request["job"]
    assert json.loads((root / "state.json").read_text()) == {"state": "queued"}
    secret = root / "env.secret"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600 and json.loads(secret.read_text()) == {
        "HF_TOKEN": "hf_s3cr3t"
    }
    assert "hf_s3cr3t" not in (root / "job.json").read_text()
    # resume: new code digests merged into job.json, the rest kept
    stage(home, {"job_dir": str(root), "job_update": {"code": {"digest": "new"}}})
    assert json.loads((root / "job.json").read_text()) == {**request["job"], "code": {"digest": "new"}}


def test_stage_writes_job_json_last(home: Path) -> None:
    request = job_request(home, "st-2")
    request["links"].append({"sha256": "0" * 64, "dest": "data/missing.jsonl"})  # not in the store
    done = run_tool(
        home / SETTINGS["code_dir"] / hostcode.digest(),
        "stage",
        stdin=json.dumps(request),
        cwd=home,
        env={"HOME": str(home)},
    )
    assert done.returncode != 0 and "FileNotFoundError" in done.stderr
    root = Path(request["job_dir"])
    assert (root / "config.yaml").exists() and not (root / "job.json").exists()
    assert scan(str(root.parent)) == []  # a half-staged folder is not a job
    request["links"] = [{"sha256": request["links"][0]["sha256"], "dest": "../../outside"}]
    refused = run_tool(
        home / SETTINGS["code_dir"] / hostcode.digest(), "stage", stdin=json.dumps(request), cwd=home
    )
    assert refused.returncode != 0 and "refusing link destination: '../../outside'" in refused.stderr
    assert not (root.parent.parent / "outside").exists()


def test_stage_launch_started_and_refused(home: Path, tmp_path: Path) -> None:
    venv = fake_venv(tmp_path, FAKE_CLI)
    request = job_request(home, "st-3", launch={"venv": str(venv)}, wait_s=30)
    answer = stage(home, request)
    assert answer["state"]["pid"] and answer["state"]["state"] in ("running", "succeeded")
    root = Path(request["job_dir"])
    wait_for(lambda: json.loads((root / "state.json").read_text())["state"] == "succeeded")
    assert (root / "output/adapter_model.safetensors").read_bytes() == b"simulated adapter"

    # the end state is written after the GPU lock is released: the next job can take it at once
    # GPU 0 held by another holder, and the job may not wait in line: refused at once, said why
    locks = home / "radeonlab/locks"
    locks.mkdir(parents=True, exist_ok=True)
    fd = os.open(locks / "gpu0.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.pwrite(fd, b"someone-else", 0)
        busy = job_request(home, "st-4", launch={"venv": str(venv), "queue": False}, wait_s=30)
        refused = stage(home, busy)
    finally:
        os.close(fd)
    assert refused["state"]["state"] == "failed" and refused["state"]["end"] == "gpu_busy"
    assert "GPU 0 is in use by someone-else" in refused["state"]["reason"]
    assert not (Path(busy["job_dir"]) / "output").exists()


# ------------------------------------------------------------------------------------------ housekeeping


def ended(days_ago: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - days_ago * 86400))


def test_rm_refuses_a_live_job_and_removes_a_finished_one(code: Path, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    me = os.getpid()
    live = write_job(jobs, "live-1", {}, {"state": "running", "pid": me, "pid_start": start_time(me)})
    done = run_tool(code, "housekeeping", "rm", str(live))
    assert done.returncode == 1 and json.loads(done.stdout) == {"error": "live-1 is running: cancel it first"}
    assert live.is_dir()
    old = write_job(jobs, "old-1", {}, {"state": "failed", "ended_at": ended(1)})
    (old / "train.log").write_bytes(b"x" * 1000)
    size = sum(p.stat().st_size for p in old.rglob("*") if p.is_file())
    dry = last_json(run_tool(code, "housekeeping", "rm", str(old), "--dry-run"))
    assert dry == {"removed": ["old-1"], "bytes": size, "dry_run": True} and old.is_dir()
    assert last_json(run_tool(code, "housekeeping", "rm", str(old))) == {**dry, "dry_run": False}
    assert not old.exists()


def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_prune_removes_old_finished_folders_and_only_their_blobs(code: Path, tmp_path: Path) -> None:
    jobs, store = tmp_path / "radeonlab/jobs", tmp_path / "radeonlab/blobs/sha256"
    store.mkdir(parents=True)
    for name, size in (
        ("shared", 100),
        ("only-old", 200),
        ("orphan", 400),
        ("old.part", 800),
        ("new.part", 1600),
    ):
        (store / name).write_bytes(b"b" * size)
    two_days_ago = time.time() - 2 * 86400
    os.utime(store / "old.part", (two_days_ago, two_days_ago))  # an upload abandoned long ago

    def links(root: Path, *names: str) -> None:
        (root / "data").mkdir()
        for name in names:
            os.link(store / name, root / "data" / name)

    me = os.getpid()
    old = write_job(jobs, "old-1", {"created_at": "1"}, {"state": "succeeded", "ended_at": ended(3)})
    links(old, "shared", "only-old")
    (old / "train.log").write_bytes(b"l" * 10)
    recent = write_job(jobs, "recent-1", {"created_at": "2"}, {"state": "failed", "ended_at": ended(0)})
    links(recent, "shared")
    running = write_job(
        jobs, "run-1", {"created_at": "3"}, {"state": "running", "pid": me, "pid_start": start_time(me)}
    )
    links(running, "only-old")  # not removable, so neither is this blob
    gone_old = write_job(jobs, "gone-1", {"created_at": "4"}, {"state": "cancelled", "ended_at": ended(5)})

    before = listing(tmp_path / "radeonlab")
    dry = last_json(run_tool(code, "housekeeping", "prune", str(jobs), "--older-than", "86400", "--dry-run"))
    assert listing(tmp_path / "radeonlab") == before  # nothing removed
    # the old folders; the orphan blob and the abandoned upload (only-old is still linked by run-1)
    own = {f.name: sum(p.stat().st_size for p in f.rglob("*") if p.is_file() and p.stat().st_nlink == 1)
           for f in (old, gone_old)}  # fmt: skip
    jobs_named = dry.pop("jobs")  # each with its age (3 and 5 days) and the bytes only its folder holds
    assert [(j["id"], j["bytes"]) for j in jobs_named] == [("old-1", own["old-1"]), ("gone-1", own["gone-1"])]
    assert [round(j["age_s"] / 86400, 2) for j in jobs_named] == [3.0, 5.0]
    freed = sum(own.values())
    assert dry == {"removed": ["old-1", "gone-1"], "blobs": 2, "bytes": freed + 400 + 800, "dry_run": True}
    real = last_json(run_tool(code, "housekeeping", "prune", str(jobs), "--older-than", "86400"))
    assert [(j["id"], j["bytes"]) for j in real.pop("jobs")] == [(j["id"], j["bytes"]) for j in jobs_named]
    assert real == {**dry, "dry_run": False}
    assert sorted(p.name for p in jobs.iterdir()) == ["recent-1", "run-1"]
    assert sorted(p.name for p in store.iterdir()) == ["new.part", "only-old", "shared"]
    assert (recent / "data/shared").read_bytes() == b"b" * 100

    # once run-1 is removed too, the blob only it used goes with the next prune
    (running / "state.json").write_text(json.dumps({"state": "cancelled", "ended_at": ended(2)}))
    again = last_json(run_tool(code, "housekeeping", "prune", str(jobs), "--older-than", "86400"))
    assert again["removed"] == ["run-1"] and again["blobs"] == 1
    assert sorted(p.name for p in store.iterdir()) == ["new.part", "shared"]


def test_checkpoints_lists_output_two_levels_deep(code: Path, tmp_path: Path) -> None:
    root = write_job(tmp_path / "jobs", "c-1", {}, {"state": "running"})
    (root / "output/checkpoint-10").mkdir(parents=True)
    (root / "output/checkpoint-10/trainer_state.json").write_text("{}")
    (root / "output/trainer_log.jsonl").write_text("")
    out = last_json(run_tool(code, "housekeeping", "checkpoints", str(root)))
    assert out == {"listing": ["checkpoint-10", "checkpoint-10/trainer_state.json", "trainer_log.jsonl"]}

"""`radeonlab list` without a workstation: job folders on this machine read by the host's probe tool exactly
as a host runs it (shipped code only), its answer as the laptop's view, and the verb's table and --json.

Each row says where a job is (its latest logged step and loss, how long it has run) and what it was given (its
overrides): the two jobs of a sweep differ only there, and looked identical before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from radeonlab.cli import main
from radeonlab.errors import EXIT_OK
from radeonlab.jobs.fleet import listing
from radeonlab.jobs.fleet.probe import parse_probe
from radeonlab.jobs.fleet.store import HOME_ENV
from radeonlab.jobs.host.probe import run_seconds
from tests.support.laptop_doubles import gpu, host_record, run_host_tool, ship_code

SWEEP = {"lr-a": {"learning_rate": "1e-4"}, "lr-b": {"learning_rate": "5e-5"}}
CREATED = {"lr-a": "2026-12-01T00:00:00Z", "lr-b": "2026-12-01T00:00:01Z"}


def sweep_job(jobs: Path, job_id: str, state: dict, log: list[dict]) -> None:
    """A job folder as a sweep leaves it: job.json with its overrides, state.json, the trainer log."""
    folder = jobs / job_id
    (folder / "output").mkdir(parents=True)
    job = {"id": job_id, "name": "sweep", "spec_file": "sweep.yaml", "host": "ws1", "gpus": [0],
           "created_at": CREATED[job_id], "overrides": SWEEP[job_id]}  # fmt: skip
    (folder / "job.json").write_text(json.dumps(job))
    (folder / "state.json").write_text(json.dumps(state))
    lines = [json.dumps(line) for line in log]  # NaN as the bare literal, as LLaMA-Factory writes it
    (folder / "output" / "trainer_log.jsonl").write_text("\n".join(lines) + "\n")


@pytest.fixture
def two_sweep_jobs(tmp_path: Path) -> dict:
    """The probe tool's `full` answer for a host holding a finished and a failed job of one sweep."""
    jobs = tmp_path / "jobs"
    ended = {"started_at": "2026-12-01T00:00:10Z", "ended_at": "2026-12-01T01:02:13Z"}
    sweep_job(jobs, "lr-a", {"state": "succeeded", **ended}, [
        {"current_steps": 10, "total_steps": 20, "loss": 1.25},
        {"current_steps": 20, "total_steps": 20, "loss": 0.5},
        {"current_steps": 20, "total_steps": 20},  # the summary line: no loss
    ])  # fmt: skip
    sweep_job(jobs, "lr-b", {"state": "failed", "started_at": "2026-12-01T00:00:10Z",
                             "ended_at": "2026-12-01T00:00:52Z", "reason": "NaN"}, [
        {"current_steps": 5, "total_steps": 20, "loss": 2.0},
        {"current_steps": 7, "total_steps": 20, "loss": float("nan")},
    ])  # fmt: skip
    record = tmp_path / "host.json"
    card = gpu("rx7900xtx", device_id=None, revision=None)  # no card here: not judged by its PCI ids
    record.write_text(json.dumps(host_record("ws1", [card], jobs_dir=str(jobs)).to_dict()))
    done = run_host_tool(ship_code(tmp_path / "code"), "probe", "--record", str(record), "--jobs", "full")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def list_ws1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: dict, *args: str):
    """`radeonlab list ARGS` over one host whose probe answered `data` (SSH stands aside)."""
    monkeypatch.setenv(HOME_ENV, str(tmp_path / "home"))
    inventory = tmp_path / "inv.py"
    inventory.write_text('hosts = ["ws1"]\n')
    monkeypatch.setattr(listing, "probe_hosts", lambda targets, timeout, jobs: [parse_probe("ws1", data)])
    result = CliRunner().invoke(main, ["list", "-i", str(inventory), *args])
    assert result.exit_code == EXIT_OK, result.output
    return result


def test_list_json_has_step_loss_duration_and_the_sweep_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, two_sweep_jobs: dict
) -> None:
    rows = json.loads(list_ws1(tmp_path, monkeypatch, two_sweep_jobs, "--json").stdout)
    got = {r["id"]: (r["step"], r["total_steps"], r["loss"], r["duration_s"], r["overrides"]) for r in rows}
    assert got == {
        "lr-a": (20, 20, 0.5, 3723.0, {"learning_rate": "1e-4"}),  # the last loss, not the summary line's
        "lr-b": (7, 20, None, 42.0, {"learning_rate": "5e-5"}),  # a NaN loss is null: --json stays JSON
    }


def test_list_table_tells_the_jobs_of_a_sweep_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, two_sweep_jobs: dict
) -> None:
    out = list_ws1(tmp_path, monkeypatch, two_sweep_jobs).stdout
    header = next(line for line in out.splitlines() if " job " in f" {line} ")
    for column in ("step", "loss", "duration", "overrides"):
        assert f" {column} " in header, header
    [a] = [line.split() for line in out.splitlines() if line.strip().startswith("lr-a")]
    [b] = [line.split() for line in out.splitlines() if line.strip().startswith("lr-b")]
    assert a[2:7] == ["succeeded", "20/20", "0.5000", "1:02:03", "learning_rate=1e-4"]
    assert b[2:7] == ["failed", "7/20", "-", "0:00:42", "learning_rate=5e-5"]


def test_a_job_waiting_in_line_has_no_duration_and_a_running_one_counts_to_now() -> None:
    from datetime import datetime

    now = datetime(2026, 12, 1, 0, 10, 0)
    assert run_seconds({"state": "queued", "started_at": "2026-12-01T00:00:00Z"}, now) is None
    assert run_seconds({"state": "running", "started_at": "2026-12-01T00:00:00Z"}, now) == 600.0
    assert run_seconds({"state": "running"}, now) is None  # no start recorded

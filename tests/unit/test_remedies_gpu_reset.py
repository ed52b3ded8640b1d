"""The GPU reset remedy (ROCm/TheRock#7699): recognised from the public issue's error text, retried once with
TORCH_BLAS_PREFER_HIPBLASLT=0, returned as an environment change the supervisor can tell from config keys."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from radeonlab.contract.records import Attempt as AttemptRecord
from radeonlab.jobs.host import remedies
from radeonlab.jobs.host.health import Kind, diagnose

FIXTURE = Path(__file__).parents[1] / "fixtures" / "errors"
LOG = (FIXTURE / "therock7699_r9700_rocm10.0_memory-access-fault_gpu-coredump_EXCERPT.txt").read_text()
LISTING = ["checkpoint-10", "checkpoint-10/trainer_state.json", "checkpoint-20"]


def test_the_reset_is_recognised_and_retryable() -> None:
    d = diagnose(log_text="step 1\n" + LOG, exit_code=134)
    assert d is not None and d.kind is Kind.GPU_RESET and d.retryable
    assert d.evidence.startswith("Memory access fault by GPU node-1") and "TheRock#7699" in d.advice


def test_retry_once_with_hipblaslt_off_from_the_newest_checkpoint() -> None:
    d = diagnose(log_text=LOG, exit_code=134)
    first = remedies.next_attempt({"learning_rate": 1e-4}, d, [], {}, checkpoint_listing=LISTING)
    assert isinstance(first, remedies.Attempt)
    assert first.changes == {"env:TORCH_BLAS_PREFER_HIPBLASLT": (None, "0")}
    assert remedies.env_changes(first.overrides) == {"TORCH_BLAS_PREFER_HIPBLASLT": "0"}
    assert first.resume_from_checkpoint == "checkpoint-10" and first.note.startswith("remedy gpu_reset/")
    history = [AttemptRecord(n=1, created_at="t0"), first.record(2, "t1")]
    assert history[1].env == {"TORCH_BLAS_PREFER_HIPBLASLT": "0"}  # what the supervisor starts it with
    saved = dataclasses.asdict(history[1])  # as job.json holds it (JobRecord.to_dict)
    assert (saved["ladder"], saved["step"]) == ("gpu_reset", "hipblaslt_off")  # fields, not the note
    saved["note"] = "reworded by a later version"
    history[1] = AttemptRecord(**saved)
    again = remedies.next_attempt({"learning_rate": 1e-4}, d, history, {}, checkpoint_listing=LISTING)
    assert isinstance(again, remedies.GiveUp) and "gpu_reset ladder has been applied" in again.reason


def test_config_keys_are_not_env_changes() -> None:
    assert remedies.env_changes({"cutoff_len": 1024, "env:HIP_VISIBLE_DEVICES": 0}) == {
        "HIP_VISIBLE_DEVICES": "0"
    }


def test_an_old_job_json_without_ladder_fields_still_counts_its_remedies() -> None:
    """job.json files written before Attempt.ladder/step: the note's prefix is the only record of the step."""
    d = diagnose(log_text=LOG, exit_code=134)
    note, env = "remedy gpu_reset/hipblaslt_off: GPU reset; ...", {"TORCH_BLAS_PREFER_HIPBLASLT": "0"}
    overrides = {f"env:{k}": v for k, v in env.items()}
    old = {"n": 2, "created_at": "t1", "note": note, "env": env, "overrides": overrides}
    history = [AttemptRecord(n=1, created_at="t0"), AttemptRecord(**old)]
    assert history[1].remedy() == ("gpu_reset", "hipblaslt_off") and history[1].ladder is None
    again = remedies.next_attempt({}, d, history, {}, checkpoint_listing=LISTING)
    assert isinstance(again, remedies.GiveUp) and "gpu_reset ladder has been applied" in again.reason

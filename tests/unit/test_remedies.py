"""The remedy ladders (NaN, OOM, killed), spec switches, give-up reports and checkpoint choice."""

from __future__ import annotations

from typing import Any

import pytest

from radeonlab.contract.records import Attempt as AttemptRecord
from radeonlab.jobs.host.health import Diagnosis, Kind
from radeonlab.jobs.host.remedies import (
    SETTINGS,
    STEPS,
    Attempt,
    GiveUp,
    effective_config,
    next_attempt,
    resume_checkpoint,
    unknown_steps,
)
from radeonlab.jobs.spec.load import Remedy
from tests.support.hostjob import LF_DEFAULTS

NAN = Diagnosis(Kind.NAN, "step 30: loss nan", "advice", step=30, safe_step=20, pattern="loss")
OOM = Diagnosis(
    Kind.OOM, "torch.OutOfMemoryError: HIP out of memory.", "advice", memory={"total": int(23.98 * 2**30)}
)
KILLED = Diagnosis(Kind.KILLED, "exit code 137 (SIGKILL)", "advice")
LISTING = [
    "checkpoint-10",
    "checkpoint-10/trainer_state.json",
    "checkpoint-10/adapter_model.safetensors",
    "checkpoint-20",
    "checkpoint-20/trainer_state.json",
    "checkpoint-30",
    "checkpoint-30/trainer_state.json",  # written at the NaN step: never resumed from
    "checkpoint-40",  # cut off by the kill: no trainer_state.json
    "trainer_log.jsonl",
]


def with_defaults(config: dict[str, Any]) -> dict[str, Any]:
    """What the supervisor hands next_attempt: job.json's lf_defaults (LLaMA-Factory's defaults for the keys
    the steps read, recorded by the planner) under the job's config."""
    return {**LF_DEFAULTS, **config}


def run_ladder(config: dict[str, Any], diagnosis: Diagnosis, remedies: dict[str, Remedy] | None = None):
    """Apply next_attempt until it gives up; returns (attempts, give_up)."""
    history = [AttemptRecord(n=1, created_at="t0")]
    attempts: list[Attempt] = []
    for _ in range(20):
        got = next_attempt(
            with_defaults(config), diagnosis, history, remedies or {}, checkpoint_listing=LISTING
        )
        if isinstance(got, GiveUp):
            return attempts, got
        attempts.append(got)
        history.append(got.record(len(history) + 1, f"t{len(history)}"))
    raise AssertionError("the ladder never ended")


def test_nan_ladder_every_step() -> None:
    config = {"flash_attn": "auto", "learning_rate": 1.0e-4, "optim": "adamw_torch_fused"}
    attempts, give_up = run_ladder(config, NAN)
    assert [a.step for a in attempts] == ["flash_attn_disabled", "lower_lr", "adamw_torch"]
    assert [a.changes for a in attempts] == [
        {"flash_attn": ("auto", "disabled")},
        {"learning_rate": (1.0e-4, 5.0e-5)},
        {"optim": ("adamw_torch_fused", "adamw_torch")},
    ]
    # flash_attn survives a resume: newest complete checkpoint before the NaN (and not after the safe step)
    assert attempts[0].resume_from_checkpoint == "checkpoint-20" and not attempts[0].fresh_output
    assert attempts[0].discard_checkpoints == ["checkpoint-30", "checkpoint-40"]
    # lr and optimizer would come back from optimizer.pt / scheduler.pt: fresh start
    assert [a.resume_from_checkpoint for a in attempts[1:]] == [None, None]
    assert all(a.fresh_output for a in attempts[1:])
    assert give_up.ladder == "nan" and "every step of the nan ladder" in give_up.reason
    assert "flash_attn=disabled" in give_up.report and "learning_rate=5e-05" in give_up.report
    assert "optim=adamw_torch" in give_up.report and give_up.report.count("attempt ") == 3


def test_nan_ladder_skips_steps_already_true() -> None:
    # defaults from LLaMA-Factory: flash_attn auto, learning_rate 5e-5 (not higher), optim adamw_torch_fused
    assert LF_DEFAULTS["learning_rate"] == 5.0e-5
    attempts, _ = run_ladder({"flash_attn": "disabled"}, NAN)
    assert [a.step for a in attempts] == ["adamw_torch"]
    attempts, give_up = run_ladder(
        {"flash_attn": "disabled", "learning_rate": 1e-5, "optim": "adamw_torch"}, NAN
    )
    assert attempts == [] and "every step" in give_up.reason


def test_oom_ladder_every_step_keeps_effective_batch() -> None:
    config = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 2, "cutoff_len": 4096}
    attempts, give_up = run_ladder(config, OOM)
    assert [a.step for a in attempts] == ["halve_batch", "halve_batch", "halve_batch", "cutoff_1024"]
    batches = [(8, 2)]
    for a in attempts[:3]:
        new = effective_config(config, [a.record(2, "t")])
        batches.append((new["per_device_train_batch_size"], new["gradient_accumulation_steps"]))
    assert batches == [(8, 2), (4, 4), (2, 8), (1, 16)]
    assert {b * g for b, g in batches} == {16}
    assert attempts[3].changes == {"cutoff_len": (4096, 1024)}
    # OOM resumes from the newest COMPLETE checkpoint (40 has no trainer_state.json)
    assert {a.resume_from_checkpoint for a in attempts} == {"checkpoint-30"}
    assert attempts[0].discard_checkpoints == ["checkpoint-40"]
    assert "VRAM seen: total capacity 23.98 GiB" in give_up.report
    assert "per_device_train_batch_size=1" in give_up.report and "cutoff_len=1024" in give_up.report


@pytest.mark.parametrize(("batch", "accum", "new_batch"), [(6, 1, 3), (5, 3, 1), (3, 2, 1), (12, 1, 6)])
def test_halve_batch_odd_sizes_keep_effective_batch(batch: int, accum: int, new_batch: int) -> None:
    changes = STEPS["halve_batch"].apply(
        {"per_device_train_batch_size": batch, "gradient_accumulation_steps": accum}
    )
    assert changes is not None
    (_, b), (_, g) = changes["per_device_train_batch_size"], changes["gradient_accumulation_steps"]
    assert b == new_batch and b * g == batch * accum


def test_oom_defaults_from_llamafactory() -> None:
    # nothing set: HF's batch 8, accumulation 1, LLaMA-Factory's cutoff_len 2048
    attempts, _ = run_ladder({}, OOM)
    assert attempts[0].changes == {
        "per_device_train_batch_size": (8, 4),
        "gradient_accumulation_steps": (1, 2),
    }
    assert attempts[-1].changes == {"cutoff_len": (2048, 1024)}


def test_killed_resumes_once_then_oom_ladder() -> None:
    config = {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 1, "cutoff_len": 1024}
    attempts, give_up = run_ladder(config, KILLED)
    assert [a.step for a in attempts] == ["resume", "halve_batch"]
    assert attempts[0].changes == {} and attempts[0].resume_from_checkpoint == "checkpoint-30"
    assert "VRAM seen: no VRAM figure in the log" in give_up.report


def test_ladders_off() -> None:
    off = {"nan": Remedy(enabled=False), "oom": Remedy(enabled=False)}
    for diagnosis in (NAN, OOM, KILLED):
        attempts, give_up = run_ladder(
            {"learning_rate": 1e-3, "per_device_train_batch_size": 8}, diagnosis, off
        )
        assert attempts == [] and "turns the" in give_up.reason and "remedy off" in give_up.reason


def test_replaced_steps() -> None:
    remedies = {"nan": Remedy(steps=["adamw_torch"]), "oom": Remedy(steps=["halve_cutoff", "halve_batch"])}
    attempts, _ = run_ladder({"flash_attn": "auto", "learning_rate": 1e-3}, NAN, remedies)
    assert [a.step for a in attempts] == ["adamw_torch"]
    attempts, _ = run_ladder({"cutoff_len": 1024, "per_device_train_batch_size": 2}, OOM, remedies)
    assert [a.step for a in attempts] == ["halve_cutoff", "halve_cutoff", "halve_batch"]
    assert [a.changes.get("cutoff_len") for a in attempts[:2]] == [
        (1024, 512),
        (512, SETTINGS["halve_cutoff_floor"]),
    ]


def test_unknown_step_gives_up_and_is_reported() -> None:
    remedies = {"oom": Remedy(steps=["halve_batch", "buy_more_vram"])}
    assert unknown_steps(remedies) == ["oom: buy_more_vram"]
    attempts, give_up = run_ladder({}, OOM, remedies)
    assert attempts == [] and "buy_more_vram" in give_up.reason


def test_no_remedy_for_gpu_fault() -> None:
    fault = Diagnosis(
        Kind.GPU_FAULT, "RuntimeError: HIP error: invalid device function", "check the override"
    )
    got = next_attempt({}, fault, [], {})
    assert isinstance(got, GiveUp) and "no automatic remedy for gpu_fault" in got.reason
    assert "check the override" in got.report


def test_attempt_limit() -> None:
    history = [AttemptRecord(n=i + 1, created_at="t") for i in range(SETTINGS["max_attempts"])]
    got = next_attempt(with_defaults({"per_device_train_batch_size": 8}), OOM, history, {})
    assert isinstance(got, GiveUp) and "limit" in got.reason


def test_record_carries_overrides_and_note() -> None:
    got = next_attempt(with_defaults({"per_device_train_batch_size": 4}), OOM, [AttemptRecord(1, "t")], {})
    assert isinstance(got, Attempt)
    rec = got.record(2, "t2")
    assert rec.overrides == {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 2}
    assert rec.note.startswith("remedy oom/halve_batch:") and rec.resume_from_checkpoint is None
    assert got.fresh_output  # no checkpoint listed


def test_resume_checkpoint_choice() -> None:
    assert resume_checkpoint(LISTING, 30) == "checkpoint-20"  # never the one written at the NaN step
    assert resume_checkpoint(LISTING, 31) == "checkpoint-30"
    assert resume_checkpoint(LISTING, 30, safe_step=15) == "checkpoint-10"
    assert resume_checkpoint(LISTING, 10) is None
    assert resume_checkpoint(LISTING, None) == "checkpoint-30"  # 40 is incomplete
    assert resume_checkpoint([], None) is None
    absolute = ["/j/output/checkpoint-5/trainer_state.json", "/j/output/checkpoint-50"]
    assert resume_checkpoint(absolute, None) == "/j/output/checkpoint-5"
    assert resume_checkpoint(["checkpoint-9", "checkpoint-10/trainer_state.json"], None) == "checkpoint-10"


def test_a_job_json_without_lf_defaults_skips_the_steps_it_cannot_read() -> None:
    """An older job.json has no lf_defaults: cutoff_len unknown must not crash the supervisor (int(None));
    the steps whose values are known still apply, then the ladder gives up with its report."""
    config = {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 1}  # no cutoff_len anywhere
    history = [AttemptRecord(n=1, created_at="t0")]
    first = next_attempt(config, OOM, history, {}, checkpoint_listing=LISTING)
    assert isinstance(first, Attempt) and first.step == "halve_batch"
    history.append(first.record(2, "t1"))
    second = next_attempt(config, OOM, history, {}, checkpoint_listing=LISTING)
    assert isinstance(second, GiveUp) and "oom ladder" in second.reason

"""Failure detection over recorded real error outputs (tests/fixtures/errors, tests/fixtures/llamafactory)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from radeonlab.jobs.host.health import GPU_ENV_FILE, PATTERNS, Kind, diagnose, nan_diagnosis, scan_text
from radeonlab.jobs.host.metrics import TrainerLogReader

FIXTURES = Path(__file__).parents[1] / "fixtures"
ERRORS = FIXTURES / "errors"
LF = FIXTURES / "llamafactory"

# every recorded error output -> (kind, pattern name); None: nothing wrong in it
EXPECTED: dict[str, tuple[Kind, str] | None] = {
    "amd_log_level3_two-gpus_gfx1100_plus_igpu_gfx1036_EXCERPT.txt": None,  # a debug log, no error
    "comfyui_rx7900xt_rocm6.2_hipblaslt-unsupported-warning_HSA_STATUS_ERROR_OUT_OF_REGISTERS.txt": (
        Kind.GPU_FAULT,
        "out_of_registers",
    ),
    "hipErrorNoBinaryForGpu_rx6900xt_rocm5.1.1_docker.txt": (Kind.GPU_FAULT, "no_binary_for_gpu"),
    "hip_invalid_device_function_rx6600_traceback.txt": (Kind.GPU_FAULT, "invalid_device_function"),
    "hip_invalid_device_function_strixhalo_EXCERPT.txt": (Kind.GPU_FAULT, "invalid_device_function"),
    "hip_invalid_device_function_torch-AcceleratorError_rocm7.0-nightly_EXCERPT.txt": (
        Kind.GPU_FAULT,
        "invalid_device_function",
    ),
    "hip_oom_16GB-card_comfyui_no-exception-prefix_EXCERPT.txt": (Kind.OOM, "hip_oom"),
    "therock7699_r9700_rocm10.0_memory-access-fault_gpu-coredump_EXCERPT.txt": (Kind.GPU_RESET, "gpu_reset"),
    "hip_oom_24GB-card_total-23.98GiB_EXCERPT.txt": (Kind.OOM, "hip_oom"),
    "hip_oom_strixhalo_128GB_traceback-tail_EXCERPT.txt": (Kind.OOM, "hip_oom"),
    "hip_oom_strixhalo_gfx1151_reports-15.24GiB.txt": (Kind.OOM, "hip_oom"),
    # "Cannot allocate memory" from /dev/kfd and HSA_STATUS_ERROR_OUT_OF_RESOURCES: NOT an OOM
    "rocminfo_kfd_cannot-allocate-memory_hsa-out-of-resources_raven.txt": (
        Kind.PROVISIONING,
        "kfd_no_memory",
    ),
    "rocminfo_kfd_cannot-allocate-memory_is-member-of-render-group_pitcairn_AS-POSTED.txt": (
        Kind.PROVISIONING,
        "kfd_no_memory",
    ),
    "rocminfo_kfd_invalid-argument_member-of-nogroup_mi300x-container.txt": (
        Kind.PROVISIONING,
        "kfd_permission",
    ),
    "rocminfo_kfd_no-such-file_in-container_AS-POSTED.txt": (Kind.PROVISIONING, "kfd_missing"),
    "rocminfo_kfd_permission-denied_in-container_rocm-terminal.txt": (Kind.PROVISIONING, "kfd_permission"),
    "rocminfo_kfd_permission-denied_not-member-of-render-group_single-line_rocm5.x.txt": (
        Kind.PROVISIONING,
        "kfd_permission",
    ),
    "rocminfo_kfd_permission-denied_not-member-of-render-group_wrapped-3-lines.txt": (
        Kind.PROVISIONING,
        "kfd_permission",
    ),
    "rocminfo_kfd_permission-denied_not-member-of-video-group_buildah-container_EXCERPT.txt": (
        Kind.PROVISIONING,
        "kfd_permission",
    ),
    "rocminfo_sudo_segfault_apu_5600g.txt": (Kind.GPU_FAULT, "segfault"),
}


def test_every_recorded_error_is_listed() -> None:
    assert sorted(p.name for p in ERRORS.iterdir()) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_error_maps_to_kind(name: str) -> None:
    text = (ERRORS / name).read_text()
    got = diagnose(log_text=text, exit_code=1)
    want = EXPECTED[name]
    if want is None:
        # nothing recognisable: a failed exit is "other", never a guess
        assert scan_text(text) is None and got is not None and got.kind is Kind.OTHER
        return
    assert got is not None and (got.kind, got.pattern) == want
    assert got.evidence in text.replace("\r", "\n")  # the evidence is a real line of the output
    assert got.retryable is (want[0] in (Kind.OOM, Kind.GPU_RESET))
    if want[0] is Kind.GPU_FAULT:
        assert GPU_ENV_FILE in got.advice and "HSA_OVERRIDE_GFX_VERSION" in got.advice
        assert "PYTORCH_ROCM_ARCH" in got.advice and "Not retried" in got.advice
    if want[0] is Kind.PROVISIONING:
        assert "out of memory" not in got.advice.replace("out-of-memory error", "")
        assert "Not retried" in got.advice


def test_oom_message_sizes_are_parsed() -> None:
    got = scan_text((ERRORS / "hip_oom_24GB-card_total-23.98GiB_EXCERPT.txt").read_text())
    assert got is not None
    assert got.memory == {
        "tried": int(1.88 * 2**30),
        "total": int(23.98 * 2**30),
        "free": int(1.70 * 2**30),
        "allocated": int(21.65 * 2**30),
    }
    strix = scan_text((ERRORS / "hip_oom_strixhalo_gfx1151_reports-15.24GiB.txt").read_text())
    assert strix is not None and strix.memory["allocated"] == 0 and strix.memory["tried"] == 16 * 2**30


def test_cpu_allocator_oom() -> None:
    # quoted from docs/notes/llamafactory-cpu-recipe.md section 7 (a run on this machine, ulimit -v 3GB)
    line = (
        "RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
        "memory: you tried to allocate 67108864 bytes. Error code 12 (Cannot allocate memory)"
    )
    got = diagnose(log_text=f"Traceback (most recent call last):\n{line}\n", exit_code=1)
    assert got is not None and (got.kind, got.pattern) == (Kind.OOM, "cpu_alloc")
    assert got.memory == {"tried": 67108864} and "host" in got.advice


def test_console_nan_grad_norm_then_zero_loss() -> None:
    # the filtered form: loss 0.0 with grad_norm nan, as transformers prints it to the console
    text = (LF / "console_nan_grad_norm_then_zero_loss_ascend-npu_EXCERPT.txt").read_text()
    got = diagnose(log_text=text, exit_code=0)
    assert got is not None and got.kind is Kind.NAN and got.pattern == "grad_norm"
    assert got.evidence.startswith("{'loss': 1.4596, 'grad_norm': nan")  # the first bad line
    assert got.retryable


def test_clean_console_footer_is_healthy() -> None:
    text = (LF / "console_train-metrics_footer_rtx5090_NOT-AMD_EXCERPT.txt").read_text()
    assert diagnose(log_text=text, exit_code=0) is None


def test_recorded_trainer_log_is_healthy() -> None:
    reader = TrainerLogReader()
    reader.feed(
        (LF / "trainer_log_syGOAT-Mistral-v0.2-Translator_learning_rate-throughput-schema.jsonl").read_bytes()
    )
    assert diagnose(points=reader.points, exit_code=0) is None


def _points(lines: list[str]) -> list:
    reader = TrainerLogReader()
    reader.feed(("\n".join(lines) + "\n").encode())
    return reader.points


def _line(step: int, loss: str) -> str:
    return f'{{"current_steps": {step}, "total_steps": 40, "loss": {loss}, "lr": 0.005, "epoch": 0.1}}'


def test_nan_loss_in_trainer_log_names_first_step_and_safe_step() -> None:
    points = _points([_line(10, "3.1"), _line(20, "2.9"), _line(30, "NaN"), _line(40, "NaN")])
    got = diagnose(points=points, exit_code=0)
    assert got is not None and got.kind is Kind.NAN
    assert (got.step, got.safe_step, got.pattern) == (30, 20, "loss")
    inf = diagnose(points=_points([_line(10, "3.1"), _line(20, "Infinity")]))
    assert inf is not None and inf.kind is Kind.NAN and inf.step == 20


def test_grad_norm_nan_in_trainer_state_with_filtered_zero_loss() -> None:
    # trainer_state.json as json.dump writes it: the bare NaN literal (docs/notes/llamafactory-cpu-recipe.md
    # section 6)
    state = json.loads(
        '{"global_step": 4, "log_history": ['
        '{"epoch": 0.02, "grad_norm": 1.5, "learning_rate": 0.005, "loss": 8.38, "step": 1},'
        '{"epoch": 0.04, "grad_norm": NaN, "learning_rate": 0.005, "loss": 0.0, "step": 2},'
        '{"epoch": 0.06, "grad_norm": NaN, "learning_rate": 0.005, "loss": 0.0, "step": 3}]}'
    )
    points = _points([_line(1, "8.38"), _line(2, "0.0"), _line(3, "0.0")])
    assert nan_diagnosis(points) is None  # the loss alone looks fine (0.0)
    got = diagnose(points=points, trainer_state=state, exit_code=0)
    assert got is not None and got.kind is Kind.NAN
    assert (got.step, got.safe_step, got.pattern) == (2, 1, "grad_norm")


def test_killed_without_traceback_is_killed_with_traceback_is_other() -> None:
    points = _points([_line(10, "3.1"), _line(20, "2.9")])
    tail = "{'loss': 2.9, 'grad_norm': 1.2, 'learning_rate': 0.005, 'epoch': 0.1}\n 50%|#####     | 20/40\n"
    killed = diagnose(points=points, log_text=tail, exit_code=137)
    assert killed is not None and killed.kind is Kind.KILLED and killed.step == 20 and killed.retryable
    crashed = diagnose(
        log_text="Traceback (most recent call last):\nValueError: File data/x.jsonl not found.\n", exit_code=1
    )
    assert crashed is not None and crashed.kind is Kind.OTHER and not crashed.retryable
    assert crashed.evidence == "ValueError: File data/x.jsonl not found."


def test_priority_gpu_fault_over_nan_and_kfd_over_oom() -> None:
    points = _points([_line(10, "NaN")])
    fault = diagnose(
        points=points, log_text="RuntimeError: HIP error: invalid device function\n", exit_code=1
    )
    assert fault is not None and fault.kind is Kind.GPU_FAULT
    kfd = (ERRORS / "rocminfo_kfd_cannot-allocate-memory_hsa-out-of-resources_raven.txt").read_text()
    both = kfd + "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB.\n"
    assert scan_text(both).kind is Kind.PROVISIONING  # type: ignore[union-attr]


def test_pattern_names_are_unique() -> None:
    names = [p.name for p in PATTERNS]
    assert len(names) == len(set(names))

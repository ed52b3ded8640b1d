"""roles/verify: report + GPUs in -> host record and table row out; a rerun keeps the record."""

from __future__ import annotations

import json
import os
import pwd
import shlex
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from radeonlab.roles.verify import record as rec
from radeonlab.roles.verify.facts import CHECK_SCRIPT, StackCheckState, StackReport, stack_check_command
from tests.unit.test_roles_gpu_env import R9070, XTX

CPU_REPORT = {
    "torch": "2.13.0+cpu",
    "hip": None,
    "cuda": None,
    "cuda_available": False,
    "cpu_build": True,
    "error": None,
    "devices": [],
    "gpu_checks": "CPU build of torch: no GPU check possible",  # roles/verify/check_stack.py's words
    "versions": {"llamafactory": "0.9.5"},
}


def make(
    written_at: str = "2026-08-01T00:00:00+00:00",
    vram_used: int = 1,
    report: dict = CPU_REPORT,
    **extra: object,
) -> dict:
    gpu = XTX.__class__(**{**XTX.__dict__, "vram_used": vram_used})
    return rec.build_record(
        host="ws1",
        user="lab",
        home="/home/lab",
        venv="/home/lab/radeonlab/venv",
        jobs_dir="/home/lab/radeonlab/jobs",
        cpu_only=False,
        rocm={"stream": "legacy", "version": "7.2.4", "installed": "7.2.4-1"},
        report=report,
        llamafactory_version="0.9.5",
        gpus=[gpu],
        written_at=written_at,
        **extra,
    )


def test_record_follows_the_contract() -> None:
    r = make()
    assert r["schema"] == 2 and r["host"] == "ws1" and r["venv"].startswith("/")
    assert r["torch"] == {
        "version": "2.13.0+cpu",
        "hip": None,
        "cuda_available": False,
        "cpu_build": True,
        "cpu_allowed": False,
        "source": "",
    }
    assert r["gpus"][0]["gfx"] == "gfx1100" and r["gpus"][0]["index"] == 0
    # what estimates and placement use: a card's VRAM (an APU's carve-out + GTT, below)
    assert r["gpus"][0]["usable_memory"] == XTX.vram_total
    assert json.loads(rec.dumps(r)) == r


def test_rocm_build_is_not_flagged_cpu() -> None:
    report = {**CPU_REPORT, "torch": "2.13.0+rocm7.2", "hip": "7.2.53211", "cuda_available": True}
    report.pop("cpu_build", None)
    assert make(report=report)["torch"]["cpu_build"] is False


def test_only_volatile_fields_changed_means_current() -> None:
    assert rec.is_current(make(), make(written_at="2030-01-01T00:00:00+00:00", vram_used=999))
    assert not rec.is_current(make(), make(report={**CPU_REPORT, "torch": "2.12.0+cpu"}))
    assert not rec.is_current(None, make())


def test_table_row_says_a_cpu_build_was_allowed_or_failed_the_host() -> None:
    allowed = make(allow_cpu=True, problem=rec.stack_problem(CPU_REPORT, [XTX], False, True))
    row = rec.table_row(allowed, CPU_REPORT)
    assert row[0] == "ws1" and row[2] == "gfx1100" and row[5] == "7.2.4-1"
    assert (
        row[-1]
        == "CPU torch allowed by python_stack_allow_cpu_torch; CPU build of torch: no GPU check possible"
    )
    refused = make(problem=rec.stack_problem(CPU_REPORT, [XTX], False, False))
    assert refused["problem"] and not refused["torch"]["cpu_allowed"]
    assert rec.table_row(refused, CPU_REPORT)[-1] == f"FAILED: {refused['problem']}"
    assert refused["problem"].startswith("torch 2.13.0+cpu is a CPU build: it cannot use the AMD GPU(s)")


FAKE_TORCH = Path(__file__).parents[1] / "fixtures" / "fake_torch"  # SIMULATED torch packages (README there)


def check_with(fake: str) -> dict:
    """The verify role's stack check script run here with a SIMULATED torch first on the path."""
    out = subprocess.run(
        [sys.executable, "-c", CHECK_SCRIPT, "8"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(FAKE_TORCH / fake)},
    )
    report = StackReport().process(out.stdout.splitlines())
    assert report is not None and report["python"].count(".") == 2, out.stdout
    return report


def test_the_check_script_tells_a_cpu_build_a_blind_rocm_build_and_a_broken_import_apart() -> None:
    cpu = check_with("cpu")
    assert (cpu["torch"], cpu["cpu_build"], cpu["error"], cpu["devices"]) == ("2.13.0+cpu", True, None, [])
    assert cpu["gpu_checks"] == "CPU build of torch: no GPU check possible"
    blind = check_with("rocm_no_gpu")
    assert (blind["hip"], blind["cpu_build"], blind["cuda_available"]) == ("10.0.0", False, False)
    assert blind["gpu_checks"].startswith("ROCm build of torch sees no GPU")
    broken = check_with("broken")
    assert (
        broken["error"] == "import torch failed: ImportError: libamdhip64.so: cannot open shared object file"
    )
    # and what verify makes of each on a host with a card (the one line the deploy fails with)
    gpus, problem = [XTX], rec.stack_problem
    assert "is a CPU build" in problem(cpu, gpus, cpu_only=False, allow_cpu=False)
    assert problem(cpu, gpus, cpu_only=False, allow_cpu=True) is None
    assert "sees no GPU" in problem(
        blind, gpus, cpu_only=False, allow_cpu=True
    )  # the setting is for CPU builds
    assert problem(broken, gpus, cpu_only=False, allow_cpu=True).startswith("import torch failed")


# --- the saved stack check (StackCheckState): reused only when nothing it depends on changed -------------
FINGERPRINT = [
    "/home/lab/radeonlab/venv/bin/python3.11",
    "python 6843312 1764700000",
    "/home/lab/radeonlab/venv/lib/python3.11/site-packages/peft-0.17.1.dist-info/RECORD 9105 1764700100",
    "/var/lib/dpkg/status 812345 1764690000",
    "groups=lab video render",
]


def test_the_check_digest_follows_every_input_but_volatile_readings() -> None:
    base = rec.check_inputs(FINGERPRINT, CHECK_SCRIPT, 1024, [XTX])
    assert rec.check_inputs(list(FINGERPRINT), CHECK_SCRIPT, 1024, [XTX]) == base
    # a pip install rewrites a RECORD: another digest; so do another script, matrix size or card
    bumped = [*FINGERPRINT[:2], FINGERPRINT[2].replace("1764700100", "1764790000"), *FINGERPRINT[3:]]
    assert rec.check_inputs(bumped, CHECK_SCRIPT, 1024, [XTX]) != base
    assert rec.check_inputs(FINGERPRINT, CHECK_SCRIPT + "\n", 1024, [XTX]) != base
    assert rec.check_inputs(FINGERPRINT, CHECK_SCRIPT, 2048, [XTX]) != base
    assert rec.check_inputs(FINGERPRINT, CHECK_SCRIPT, 1024, [R9070]) != base
    # the VRAM in use is a reading, not an input
    assert rec.check_inputs(FINGERPRINT, CHECK_SCRIPT, 1024, [replace(XTX, vram_used=7 * 2**30)]) == base


def test_a_saved_report_is_reused_only_with_the_same_inputs_and_no_error() -> None:
    saved = {"inputs": "abc", "checked_at": "2026-12-01T10:00:00+00:00", "report": CPU_REPORT}
    assert rec.reusable_report(saved, "abc") == CPU_REPORT
    assert rec.reusable_report(saved, "abd") is None
    failed = {**saved, "report": {**CPU_REPORT, "error": "ImportError: torch"}}
    assert rec.reusable_report(failed, "abc") is None
    assert rec.reusable_report(None, "abc") is None


def test_a_reused_check_says_so_and_when_it_was_observed() -> None:
    row = rec.table_row(make(), CPU_REPORT, "2026-12-01T10:00:00+00:00")
    assert row[-1] == (
        "not re-run, inputs unchanged; at 2026-12-01T10:00:00+00:00: "
        "CPU build of torch: no GPU check possible"
    )


def test_check_state_fact_parses_the_saved_check_and_the_fingerprint() -> None:
    fact = StackCheckState()
    saved = {"inputs": "abc", "checked_at": "t", "report": CPU_REPORT}
    parsed = fact.process([f"saved={json.dumps(saved)}", *FINGERPRINT])
    assert parsed == {"fingerprint": FINGERPRINT, "saved": saved}
    assert fact.process(["saved=", *FINGERPRINT])["saved"] is None  # no check saved yet
    assert fact.process(["saved={damaged", *FINGERPRINT])["saved"] is None  # rewritten by the next check
    command = fact.command("/home/lab/v env", "/etc/radeonlab/stack-check.json", "lab", ["/dev/kfd"])
    assert "'/home/lab/v env'/lib/python*/site-packages/*.dist-info/RECORD" in command


def test_an_apu_record_carries_its_unified_memory() -> None:
    halo = XTX.__class__(
        **{**XTX.__dict__, "gfx": "gfx1151", "igpu": True, "vram_total": 2**29, "gtt_total": 64 * 2**30,
           "usable_memory": 2**29 + 64 * 2**30}
    )  # fmt: skip
    entry = rec.gpu_entry(halo)
    assert entry["usable_memory"] == 2**29 + 64 * 2**30 and entry["gtt_total"] == 64 * 2**30


def test_usable_memory_for_estimates_and_placement() -> None:
    assert rec.usable_memory({"vram_total": 512, "usable_memory": 4096}) == 4096
    assert rec.usable_memory({"vram_total": 512}) == 512  # a record from before the field


def test_the_check_runs_in_a_fresh_login_shell_of_the_training_user() -> None:
    """As jobs run: bash -l (profile.d) in a new login of the training user, started from root."""
    cmd = StackReport().command(python="/home/lab/radeonlab/venv/bin/python", user="lab", matmul_size=8)
    assert cmd.startswith("runuser -l lab -s /bin/bash -c ")
    inner = shlex.split(cmd)[-1]  # what the login shell runs: the check, unchanged
    assert inner == stack_check_command("/home/lab/radeonlab/venv/bin/python", 8)
    assert shlex.split(StackReport().command(python="/v/bin/python", user="a b"))[:3] == [
        "runuser",
        "-l",
        "a b",
    ]


def test_the_check_reports_who_ran_it_and_what_profile_d_gave_it() -> None:
    report = check_with("cpu")
    assert report["user"] == pwd.getpwuid(os.geteuid()).pw_name
    assert report["groups"] and all(isinstance(g, str) for g in report["groups"])
    assert set(report["env"]) == {
        "PYTORCH_ROCM_ARCH",
        "HSA_OVERRIDE_GFX_VERSION",
        "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL",
    }

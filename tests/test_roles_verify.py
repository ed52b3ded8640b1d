"""roles/verify: report + GPUs in -> host record and table row out; a rerun keeps the record."""

from __future__ import annotations

import json
import subprocess
import sys

from roles.verify import record as rec
from roles.verify.facts import CHECK_SCRIPT, StackReport
from tests.test_roles_gpu_env import XTX

CPU_REPORT = {
    "torch": "2.13.0+cpu",
    "hip": None,
    "cuda": None,
    "cuda_available": False,
    "error": None,
    "devices": [],
    "gpu_checks": "CPU build of torch: GPU checks not run (simulated workstation)",
    "versions": {"llamafactory": "0.9.5"},
}


def make(
    written_at: str = "2026-08-01T00:00:00+00:00", vram_used: int = 1, report: dict = CPU_REPORT
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
    )


def test_record_follows_the_contract() -> None:
    r = make()
    assert r["schema"] == 1 and r["host"] == "ws1" and r["venv"].startswith("/")
    assert r["torch"] == {
        "version": "2.13.0+cpu",
        "hip": None,
        "cuda_available": False,
        "simulated_cpu_build": True,
    }
    assert r["gpus"][0]["gfx"] == "gfx1100" and r["gpus"][0]["index"] == 0
    assert json.loads(rec.dumps(r)) == r


def test_rocm_build_is_not_flagged_simulated() -> None:
    report = {**CPU_REPORT, "torch": "2.13.0+rocm7.2", "hip": "7.2.53211", "cuda_available": True}
    assert make(report=report)["torch"]["simulated_cpu_build"] is False


def test_only_volatile_fields_changed_means_current() -> None:
    assert rec.is_current(make(), make(written_at="2030-01-01T00:00:00+00:00", vram_used=999))
    assert not rec.is_current(make(), make(report={**CPU_REPORT, "torch": "2.12.0+cpu"}))
    assert not rec.is_current(None, make())


def test_table_row_says_gpu_checks_were_not_run_on_a_cpu_build() -> None:
    row = rec.table_row(make(), CPU_REPORT)
    assert row[0] == "ws1" and row[2] == "gfx1100" and row[5] == "7.2.4-1"
    assert row[-1] == "CPU build of torch: GPU checks not run (simulated workstation)"


def test_check_script_runs_and_reports_json() -> None:
    # Runs here under this venv's python (torch may or may not be installed: either way one JSON line).
    out = subprocess.run(
        [sys.executable, "-c", CHECK_SCRIPT, "8"], capture_output=True, text=True, check=True
    )
    report = StackReport().process(out.stdout.splitlines())
    assert report is not None and report["python"].count(".") == 2
    assert report["gpu_checks"] or report["error"]

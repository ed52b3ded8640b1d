"""GPU readings from amd-smi JSON and sysfs gpu_busy_percent (jobs/host/readings.py): recorded output in ->
GpuReading out; and read_local_gpus choosing amd-smi when it answers, sysfs otherwise."""

from __future__ import annotations

import stat
from pathlib import Path

from radeonlab.jobs.host import readings
from radeonlab.sandbox import simcards

FIXTURES = Path(__file__).parents[1] / "fixtures" / "readings" / "amd-smi" / "json"
MIB = 2**20


def test_list_root_usage_only() -> None:  # W7700, `amd-smi metric -u --json` (henrygd/beszel#737)
    (r,) = readings.parse_amd_smi_json(
        (FIXTURES / "w7700_amd-smi_metric-u_list-root_EXCERPT-closed.json").read_text()
    )
    assert (r.index, r.busy_percent, r.vram_used, r.source) == (0, 42.0, None, "amd-smi")


def test_gpu_data_root() -> None:  # 2x R9700, AMD-SMI 26.2.1 (`metric --gpu 0 --json`)
    text = (FIXTURES / "r9700x2_amd-smi-26.2.1_metric_gpu_data-root_EXCERPT-closed.json").read_text()
    (r,) = readings.parse_amd_smi_json(text)
    assert r.busy_percent == 100.0 and r.temp_c is None


def test_memory_and_temperatures_in_bytes_and_celsius() -> None:  # RX 7800 XT (nathaninline/ajean#39)
    text = (FIXTURES / "rx7800xt_amd-smi_metric_gpu_data-root_mem_usage_FROM-TEST.json").read_text()
    (r,) = readings.parse_amd_smi_json("WARNING: a line amd-smi printed first\n" + text)
    assert (r.vram_used, r.vram_total) == (14569 * MIB, 16368 * MIB)
    assert (r.busy_percent, r.temp_edge_c, r.temp_junction_c) == (2.0, 45.0, 41.0)
    assert round(r.vram_fraction, 3) == 0.89


def test_na_values_are_none() -> None:
    (r,) = readings.parse_amd_smi_json('[{"gpu": 1, "usage": "N/A", "mem_usage": {"used_vram": "N/A"}}]')
    assert r.index == 1 and r.busy_percent is None and r.vram_used is None


def sysfs(tmp_path: Path, card: str) -> Path:
    simcards.write_sysclass(tmp_path / "sys" / "class", card)
    return tmp_path / "sys"


def test_sysfs_busy_percent_is_a_reading(tmp_path: Path) -> None:
    # gpu_busy_percent recorded on an RX 9070 XT (amdgpu-sysfs-rs capture): 9
    (r,) = readings.read_local_gpus(str(sysfs(tmp_path, "rx9070xt")), amd_smi="/nonexistent/amd-smi")
    assert (r.source, r.busy_percent, r.device_id) == ("sysfs", 9.0, 0x7550)


def test_amd_smi_is_preferred_and_sysfs_fills_the_gaps(tmp_path: Path) -> None:
    tool = tmp_path / "amd-smi"
    fixture = FIXTURES / "w7700_amd-smi_metric-u_list-root_EXCERPT-closed.json"
    tool.write_text(f"#!/bin/sh\n[ \"$1 $2\" = 'metric --json' ] || exit 2\ncat '{fixture}'\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    (r,) = readings.read_local_gpus(str(sysfs(tmp_path, "rx9070xt")), amd_smi=str(tool))
    assert r.source == "amd-smi" and r.busy_percent == 42.0  # amd-smi's, not sysfs' 9
    assert r.vram_total == simcards.CARDS["rx9070xt"]["vram_total"]  # amd-smi had none: sysfs'


def test_a_failing_amd_smi_falls_back_to_sysfs(tmp_path: Path) -> None:
    tool = tmp_path / "amd-smi"
    tool.write_text("#!/bin/sh\necho 'amdsmi_cli_exceptions: boom' >&2; exit 1\n")
    tool.chmod(0o755)
    (r,) = readings.read_local_gpus(str(sysfs(tmp_path, "strixhalo")), amd_smi=str(tool))
    assert r.source == "sysfs" and r.busy_percent == 3.0

"""GPU readings from recorded rocm-smi outputs and recorded amdgpu sysfs files (tests/fixtures/readings)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from radeonlab.jobs.host.probe import probe
from radeonlab.jobs.host.readings import (
    parse_rocm_smi_json,
    parse_rocm_smi_text,
    parse_sysfs_values,
    read_gpus,
)

FIX = Path(__file__).parents[1] / "fixtures" / "readings"
SMI = FIX / "rocm-smi"
RX6900XT = FIX / "sysfs/lact/rx6900xt/card0/device"  # files NUL-padded to 4096 bytes, as captured
PHOENIX = FIX / "sysfs/lact/phoenix/card1/device"  # an APU: power1_input and power1_average


def test_json_vram_only() -> None:
    (r,) = parse_rocm_smi_json(
        (SMI / "json/rx7900xt_gfx1100_showproductname_showuse_showmeminfo-vram.json").read_text()
    )
    assert (r.index, r.vram_total, r.vram_used, r.temp_c, r.power_w) == (0, 21458059264, 27856896, None, None)
    assert r.vram_fraction == pytest.approx(27856896 / 21458059264)


def test_json_full_rocm612_skips_system_block() -> None:
    readings = parse_rocm_smi_json((SMI / "json/telegraf_rx6700xt_rocm612.json").read_text())
    assert [r.index for r in readings] == [0]
    r = readings[0]
    assert (r.temp_edge_c, r.temp_junction_c, r.temp_mem_c, r.power_w) == (45.0, 47.0, 46.0, 6.0)
    assert (r.vram_total, r.vram_percent) == (12868124672, 12.0) and r.vram_used is not None


def test_json_not_available_power_is_none() -> None:
    (r,) = parse_rocm_smi_json((SMI / "json/telegraf_rx6700xt_rocm602.json").read_text())
    assert r.power_w is None and r.temp_c == 45.0  # "N/A (Secondary die)"


def test_text_showmeminfo() -> None:
    (r,) = parse_rocm_smi_text(
        (SMI / "text/apu_512MB-carveout_showmeminfo-vram_rocm5.x_docker.txt").read_text()
    )
    assert (r.vram_total, r.vram_used, r.source) == (536870912, 25616384, "rocm-smi-text")


def test_text_showallinfo_temp_and_current_power() -> None:
    (r,) = parse_rocm_smi_text(
        (SMI / "text/radeon780m_phoenix1_7840u_rocm6.1.1_showallinfo-a.txt").read_text()
    )
    assert (r.temp_edge_c, r.power_w, r.vram_total) == (55.0, 15.171, None)


@pytest.mark.parametrize(
    "name,expected",
    [
        ("rx7900xtx_rocm6.1.0_concise_no-marketing-name.txt", [(0, 30.0, 10.0, 0.0)]),
        ("rx9070xt_rocm7.13_concise_new-layout_EXCERPT.txt", [(0, 35.0, 32.0, 21.0)]),
        (
            "raphael-igpu_plus_rx7900_rocm5.x_concise_and_showhw_old-format.txt",
            [(0, 42.0, 39.02, 5.0), (1, 50.0, 89.0, 3.0)],
        ),
        ("vega10xt_rocm3.3.0_concise_old-format.txt", [(1, 25.0, 10.0, None)]),  # VRAM% N/A (ROCm 3.3 bug)
    ],
)
def test_concise_tables(name: str, expected: list[tuple]) -> None:
    got = parse_rocm_smi_text((SMI / "text" / name).read_text())
    assert [(r.index, r.temp_edge_c, r.power_w, r.vram_percent) for r in got] == expected


def _values(device: Path) -> dict[str, str]:
    out = {f.name: f.read_text() for f in device.iterdir() if f.is_file()}
    for f in device.glob("hwmon/hwmon*/*"):
        out[f"hwmon/{f.name}"] = f.read_text()
    return out


def test_sysfs_values_units_and_nul_padding() -> None:
    r = parse_sysfs_values(0, _values(RX6900XT))
    assert (r.vram_total, r.vram_used) == (17163091968, 668274688)
    assert (r.temp_edge_c, r.temp_junction_c, r.temp_mem_c) == (56.0, 59.0, 54.0)
    assert r.power_w == pytest.approx(36.0)
    apu = parse_sysfs_values(3, _values(PHOENIX))
    assert (apu.index, apu.temp_c, apu.vram_total) == (3, 25.0, 4294967296) and apu.power_w is not None


def sysfs_tree(root: Path) -> Path:
    """A /sys built from the recorded card files: the drm/kfd layout around them (renderD links, KFD
    properties with drm_render_minor) is constructed here, as the kernel lays it out, with an Intel card
    (vendor 0x8086) that must be skipped. The folder name would break any shell that interpreted it."""
    sys_root = root / "sys 'q' $(touch PWNED)"
    devices = sys_root / "devices"
    shutil.copytree(RX6900XT, devices / "rx6900xt")
    shutil.copytree(PHOENIX, devices / "phoenix")
    (devices / "intel").mkdir()
    (devices / "intel" / "vendor").write_text("0x8086\n")
    for minor, dev in ((128, "phoenix"), (129, "rx6900xt"), (130, "intel")):
        (sys_root / f"class/drm/renderD{minor}").mkdir(parents=True)
        (sys_root / f"class/drm/renderD{minor}/device").symlink_to(devices / dev)
    for node, minor in ((0, 0), (1, 129), (2, 128)):
        (sys_root / f"class/kfd/kfd/topology/nodes/{node}").mkdir(parents=True)
        (sys_root / f"class/kfd/kfd/topology/nodes/{node}/properties").write_text(
            f"cpu_cores_count 0\ndrm_render_minor {minor}\n"
        )
    return sys_root


def test_read_gpus_from_a_sysfs_tree(tmp_path: Path) -> None:
    sys_root = sysfs_tree(tmp_path)
    host_gpus = [{"index": 0, "node": 1}, {"index": 1, "node": 2}]
    readings = read_gpus(host_gpus, str(sys_root))
    assert [(r.index, r.vram_total, r.temp_c, r.source) for r in readings] == [
        (0, 17163091968, 56.0, "sysfs"),
        (1, 4294967296, 25.0, "sysfs"),
    ]
    # the record lists only the dGPU: the APU is left out
    assert [r.index for r in read_gpus(host_gpus[:1], str(sys_root))] == [0]
    # no record: every AMD card, numbered in render-minor order (phoenix is renderD128)
    assert [r.vram_total for r in read_gpus((), str(sys_root))] == [4294967296, 17163091968]
    assert not list(tmp_path.rglob("PWNED"))


def test_probe_reports_the_record_and_its_gpus_readings(tmp_path: Path) -> None:
    """The host tool `probe` (what fleet and placement read): the record as written, readings by its GPUs."""
    sys_root = sysfs_tree(tmp_path)
    record = {"host": "ws1", "jobs_dir": str(tmp_path / "none-yet"), "gpus": [{"index": 0, "node": 1}]}
    (tmp_path / "host.json").write_text(json.dumps(record))
    out = probe(str(tmp_path / "host.json"), "summary", None, str(sys_root))
    assert out["record"] == record and out["record_error"] == "" and out["jobs"] == []
    assert [(g["index"], g["vram_used"]) for g in out["gpus"]] == [(0, 668274688)]
    missing = probe(str(tmp_path / "absent.json"), "summary", None, str(sys_root))
    assert missing["record"] is None and missing["record_error"] == "no host record"
    assert len(missing["gpus"]) == 2  # no record to map by: every AMD card
    (tmp_path / "bad.json").write_text("[1, 2]")
    assert probe(str(tmp_path / "bad.json"), "none", None, str(sys_root))["record_error"] == (
        "host record unreadable (not an object)"
    )

"""`radeonlab fleet` without sandbox hosts: the probe script run locally, its parsing, and the deadline.

The deadline tests use real sockets on loopback: a closed port (connection refused) and a listening socket
that accepts TCP but never speaks SSH (it must time out at the fleet's timeout, not the transport's 15 s).
End to end on sandbox hosts: tests/test_wheel_cache.py.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.fleet.probe import (
    HostStatus,
    exit_code,
    gather,
    judge_record,
    parse_probe,
    probe_script,
)
from radeonlab.roles.verify.defaults import RECORD_SCHEMA

from radeonlab.cli import main

GIB = 1024**3


def record(jobs_dir: str, schema: int = RECORD_SCHEMA) -> dict:
    return {
        "schema": schema,
        "host": "ws1",
        "jobs_dir": jobs_dir,
        "rocm": {"stream": "legacy", "version": "7.2.4", "installed": "7.2.4.70204-1"},
        "torch": {"version": "2.13.0+cpu", "hip": None},
        "gpus": [
            {"index": 0, "node": 1, "gfx": "gfx1100", "name": "Radeon RX 7900 XTX", "vram_total": 24 * GIB}
        ],
    }


def write_job(jobs_dir: Path, name: str, state: str, pid: int | None = None) -> None:
    (jobs_dir / name).mkdir(parents=True)
    (jobs_dir / name / "state.json").write_text(json.dumps({"state": state, "pid": pid}))


def run_probe_locally(record_path: Path) -> str:
    """The probe script exactly as a host runs it (`bash -s -- <record path>`, script on stdin)."""
    done = subprocess.run(
        ["bash", "-s", "--", str(record_path)],
        input=probe_script(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_probe_script_reports_record_and_jobs(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        write_job(jobs, "live-1", "running", sleeper.pid)
        write_job(jobs, "dead-1", "running", 2**22 + 12345)  # above pid_max's default: no such process
        write_job(jobs, "q-1", "queued")
        write_job(jobs, "q-2", "queued")
        write_job(jobs, "done-1", "succeeded", 1)
        (jobs / "not-a-job").mkdir()
        path = tmp_path / "host.json"
        path.write_text(json.dumps(record(str(jobs))))
        status = parse_probe("ws1", run_probe_locally(path))
    finally:
        sleeper.kill()
        sleeper.wait()
    assert status.reachable and status.provisioned and status.error is None
    assert (status.running, status.stale, status.queued) == (["live-1"], ["dead-1"], 2)
    assert (status.rocm, status.torch) == ("7.2.4.70204-1", "2.13.0+cpu")
    # this machine has no AMD card: the record's GPU, with no live readings
    assert [(g.name, g.gfx, g.vram_total, g.temp_c) for g in status.gpus] == [
        ("Radeon RX 7900 XTX", "gfx1100", 24 * GIB, None)
    ]


def test_probe_script_without_record_is_reachable_but_not_provisioned(tmp_path: Path) -> None:
    status = parse_probe("ws1", run_probe_locally(tmp_path / "missing.json"))
    assert status.reachable and not status.provisioned
    assert status.provisioned_note == "no host record" and status.error is None and status.queued is None


def test_record_schema_mismatch_is_not_provisioned() -> None:
    rec, note = judge_record(json.dumps(record("/j", schema=RECORD_SCHEMA + 1)))
    assert rec is None and "schema" in note
    assert judge_record("{not json")[1] == "host record unreadable (not JSON)"
    assert judge_record(json.dumps(record("/j")))[0] is not None


def test_readings_fill_vram_temperature_and_power() -> None:
    out = "\n".join(
        [
            "@record",
            json.dumps(record("/nonexistent")),
            "@readings",
            "@gpu 128",
            f"mem_info_vram_total={24 * GIB}",
            f"mem_info_vram_used={3 * GIB}",
            "hwmon/temp1_input=45000",
            "hwmon/temp1_label=edge",
            "hwmon/power1_average=35000000",
            "@kfd 1 128",
            "@jobs",
            '{"running": [], "queued": 0, "stale": []}',
        ]
    )
    gpu = parse_probe("ws1", out).gpus[0]
    assert (gpu.vram_used, gpu.vram_total, gpu.temp_c, gpu.power_w) == (3 * GIB, 24 * GIB, 45.0, 35.0)


def probe_output(record_gpu: dict, device: str, revision: str) -> str:
    """A probe's output for a host whose record has `record_gpu` and whose live card has these PCI ids."""
    rec = record("/nonexistent")
    rec["gpus"] = [record_gpu]
    return "\n".join(
        [
            "@record",
            json.dumps(rec),
            "@readings",
            "@gpu 128",
            f"device={device}",
            f"revision={revision}",
            f"mem_info_vram_total={12 * GIB}",
            "@kfd 1 128",
            "@jobs",
            '{"running": [], "queued": 0, "stale": []}',
        ]
    )


XTX = {"index": 0, "node": 1, "gfx": "gfx1100", "name": "AMD Radeon RX 7900 XTX", "vram_total": 24 * GIB}


def test_a_card_swapped_since_provisioning_makes_the_host_not_provisioned() -> None:
    # recorded for a 7900 XTX (0x744c rev 0xc8); the host now holds an RX 6700 XT (0x73df rev 0xc1)
    recorded = {**XTX, "device_id": 0x744C, "revision": 0xC8}
    status = parse_probe("ws1", probe_output(recorded, "0x73df", "0xc1"))
    assert not status.provisioned
    assert status.provisioned_note == (
        "card changed since provisioning: GPU 0 was AMD Radeon RX 7900 XTX, is now AMD Radeon RX 6700 XT; "
        "re-run deploy/setup.py"
    )
    same = parse_probe("ws1", probe_output(recorded, "0x744c", "0xc8"))
    assert same.provisioned and same.provisioned_note == ""


def test_a_recorded_card_missing_from_sysfs_makes_the_host_not_provisioned() -> None:
    """amdgpu not loaded (e.g. after a kernel update without the dkms module): no card in the readings."""
    out = probe_output({**XTX, "device_id": 0x744C, "revision": 0xC8}, "0x744c", "0xc8")
    out = out.replace("@kfd 1 128", "@kfd 2 128")  # the only card sits on another node: GPU 0 has none
    status = parse_probe("ws1", out)
    assert not status.provisioned
    assert status.provisioned_note == (
        "card changed since provisioning: GPU 0 AMD Radeon RX 7900 XTX is not in sysfs (card removed, or "
        "amdgpu not loaded); re-run deploy/setup.py"
    )


def test_a_record_without_device_ids_is_not_judged_by_them() -> None:
    """Records written before device ids were recorded stay valid: no id, nothing to compare."""
    assert parse_probe("ws1", probe_output(XTX, "0x73df", "0xc1")).provisioned


def test_exit_code_is_one_when_any_host_is_unreachable() -> None:
    assert exit_code([HostStatus("a", True), HostStatus("b", True)]) == 0
    assert exit_code([HostStatus("a", True), HostStatus("b", False, "refused")]) == 1


# --- the deadline, against real sockets ----------------------------------------------------------------
@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts TCP connections and never sends a byte (no SSH banner)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield server.getsockname()[1]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed on return: connecting is refused


def target(name: str, port: int, tmp_path: Path) -> HostTarget:
    key = str(tmp_path / "id_unused")  # never read: neither host gets as far as authentication
    return HostTarget(name, "127.0.0.1", port, key_filename=key, known_hosts_file=str(tmp_path / "kh"))


def test_silent_and_refused_hosts_do_not_stall_the_others(tmp_path: Path, silent_port: int) -> None:
    targets = [target("silent", silent_port, tmp_path), target("refused", closed_port(), tmp_path)]
    start = time.monotonic()
    statuses = gather(targets, timeout=1.5)
    elapsed = time.monotonic() - start
    assert 1.4 < elapsed < 3.0, elapsed  # the fleet's timeout, not the transport's 15 s
    silent, refused = statuses
    assert not silent.reachable and silent.error == "no answer within 1.5 s"
    assert not refused.reachable and "refused" in refused.error.lower()
    assert exit_code(statuses) == 1


def test_cli_json_and_exit_code(tmp_path: Path, silent_port: int) -> None:
    inventory = tmp_path / "inv.py"
    hosts = [("silent", silent_port), ("refused", closed_port())]
    entries = [(n, {"ssh_hostname": "127.0.0.1", "ssh_port": p, "ssh_key": "k"}) for n, p in hosts]
    inventory.write_text(f"hosts = {entries!r}\n")
    result = CliRunner().invoke(main, ["fleet", "-i", str(inventory), "--timeout", "1", "--json"])
    assert result.exit_code == 1, result.output
    rows = json.loads(result.stdout)
    assert [(r["host"], r["reachable"]) for r in rows] == [("silent", False), ("refused", False)]
    assert rows[0]["error"] == "no answer within 1 s"

    table = CliRunner().invoke(main, ["fleet", "-i", str(inventory), "--timeout", "1", "--limit", "refused"])
    assert table.exit_code == 1 and "refused" in table.output and "silent" not in table.output

    bad = CliRunner().invoke(main, ["fleet", "-i", str(inventory), "--limit", "nope"])
    assert bad.exit_code == 2 and "no host or group matches 'nope'" in bad.output

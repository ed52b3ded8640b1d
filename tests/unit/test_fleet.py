"""`radeonlab fleet` without sandbox hosts: the host's probe tool run here from the shipped code, its parsing
into a HostView, and the deadline.

The deadline tests use real sockets on loopback: a closed port (connection refused) and a listening socket
that accepts TCP but never speaks SSH (it must end at the fleet's deadline, not the transport's 15 s: the
error then says "no answer within N s"). End to end on sandbox hosts: tests/e2e/test_wheel_cache.py.
"""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from radeonlab.cli import main
from radeonlab.cli.views import fleet_table
from radeonlab.contract.records import GIB, HOST_RECORD_SCHEMA
from radeonlab.contract.state import JobState
from radeonlab.errors import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, NotProvisionedError
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.fleet.probe import HostView, parse_probe, probe_hosts, require_record
from radeonlab.jobs.host import probe as probe_tool
from radeonlab.sandbox.simcards import CARDS, write_sysclass
from tests.support.laptop_doubles import gpu, host_record, run_host_tool, ship_code

XTX = CARDS["rx7900xtx"]


def record(jobs_dir: str, schema: int = HOST_RECORD_SCHEMA, pci_ids: bool = True) -> dict:
    """A schema-2 host record of a workstation with one RX 7900 XTX (as roles/verify/record.py writes it).

    pci_ids=False: this machine has no AMD card, so a probe here reads none; without the card's PCI ids in
    the record the missing card is not judged (as for records written before the ids were recorded)."""
    card = gpu("rx7900xtx") if pci_ids else gpu("rx7900xtx", device_id=None, revision=None)
    return host_record("ws1", [card], jobs_dir=jobs_dir, schema=schema).to_dict()


def write_job(
    jobs_dir: Path, job_id: str, state: str, pid: int | None = None, gpus: list | None = None
) -> None:
    folder = jobs_dir / job_id
    folder.mkdir(parents=True)
    job = {
        "id": job_id,
        "name": job_id,
        "created_at": "2026-12-01T00:00:00Z",
        "gpus": [0] if gpus is None else gpus,
    }
    (folder / "job.json").write_text(json.dumps(job))
    (folder / "state.json").write_text(json.dumps({"state": state, "pid": pid}))


def run_probe(tmp_path: Path, record_path: Path, *args: str) -> dict:
    """The probe tool exactly as a host runs it: `python3 -m radeonlab.jobs.host.probe`, shipped code only."""
    done = run_host_tool(ship_code(tmp_path / "code"), "probe", "--record", str(record_path), *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen]]:
    """Live processes to stand for a job's launcher (their pids go into state.json)."""
    procs: list[subprocess.Popen] = []
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def test_probe_tool_reports_record_and_jobs(tmp_path: Path, sleepers: list) -> None:
    jobs = tmp_path / "jobs"
    sleepers += [subprocess.Popen(["sleep", "60"]) for _ in range(3)]
    dead = 2**22 + 12345  # above the largest pid_max: no such process
    write_job(jobs, "live-1", "running", sleepers[0].pid)
    write_job(jobs, "dead-1", "running", dead)
    write_job(jobs, "q-1", "queued", sleepers[1].pid)  # a launcher waiting in line for the GPU
    write_job(jobs, "q-2", "queued", sleepers[2].pid, gpus=[])  # ... for the CPU
    write_job(jobs, "q-gone", "queued", dead)  # its launcher died while waiting: not in the queue
    write_job(jobs, "done-1", "succeeded", 1)
    (jobs / "not-a-job").mkdir()  # no job.json: not a job folder
    path = tmp_path / "host.json"
    path.write_text(json.dumps(record(str(jobs), pci_ids=False)))
    view = parse_probe("ws1", run_probe(tmp_path, path))
    assert view.reachable and view.provisioned and view.error is None and view.note == ""
    assert [j.id for j in view.jobs] == ["dead-1", "done-1", "live-1", "q-1", "q-2", "q-gone"]
    assert [j.id for j in view.live_jobs(JobState.RUNNING)] == ["live-1"]
    assert [j.id for j in view.live_jobs(JobState.QUEUED)] == ["q-1", "q-2"]
    assert view.stale == ["dead-1"]
    assert view.queue() == {"0": 2, "cpu": 1}  # live-1 + q-1 on GPU 0, q-2 on the CPU
    shown = view.to_dict()
    assert (shown["rocm"], shown["torch"]) == ("7.2.4.70204-1", "2.13.0+rocm7.2")
    assert (shown["running"], shown["queued"], shown["stale"]) == (["live-1"], ["q-1", "q-2"], ["dead-1"])
    # in a Slurm lab, a folder staged for a job Slurm holds pending has no launcher yet and still waits here
    view.scheduler_pending = frozenset({"q-gone"})
    assert view.to_dict()["queued"] == ["q-1", "q-2", "q-gone"]
    # this machine has no AMD card: the record's GPU is known, with no live readings
    assert view.record is not None and [g.name for g in view.record.gpus] == [XTX["name"]]
    assert view.gpus == [] and shown["gpus"] == []


def test_probe_tool_without_record_is_reachable_but_not_provisioned(tmp_path: Path) -> None:
    view = parse_probe("ws1", run_probe(tmp_path, tmp_path / "missing.json"))
    assert view.reachable and not view.provisioned and view.error is None
    assert view.note == "no host record" and view.jobs == [] and view.queue() == {}


def test_record_of_another_schema_or_unreadable_is_not_provisioned(tmp_path: Path) -> None:
    path = tmp_path / "host.json"
    path.write_text(json.dumps(record("/j", schema=HOST_RECORD_SCHEMA + 1)))
    newer = parse_probe("ws1", run_probe(tmp_path, path, "--jobs", "none"))
    assert not newer.provisioned
    assert newer.note == f"host record schema {HOST_RECORD_SCHEMA + 1}, this radeonlab reads schema 2"
    path.write_text("{not json")
    broken = parse_probe("ws1", run_probe(tmp_path, path, "--jobs", "none"))
    assert not broken.provisioned and broken.note == "host record unreadable (JSONDecodeError)"
    path.write_text(json.dumps(record("/j", pci_ids=False)))
    assert parse_probe("ws1", run_probe(tmp_path, path, "--jobs", "none")).provisioned


def test_readings_fill_vram_temperature_and_power(tmp_path: Path) -> None:
    """The probe's readings from a SIMULATED card's sysfs tree (recorded RX 7900 XTX values), mapped onto
    the record's GPU index through the KFD node. Busy % and power: an idle 7900 XTX's rocm-smi recording
    (0%, 10.0 W); the card had no gpu_busy_percent file before, and `fleet` showed busy as "?"."""
    sysfs = tmp_path / "sys"
    write_sysclass(sysfs / "class", "rx7900xtx")
    hwmon = sysfs / "class/drm/card0/device/hwmon/hwmon0"
    path = tmp_path / "host.json"
    path.write_text(json.dumps(record(str(tmp_path / "jobs"))))
    data = probe_tool.probe(str(path), "none", None, str(sysfs))
    reading = parse_probe("ws1", data).reading(0)
    assert reading is not None, data
    recorded_temp = int((hwmon / "temp1_input").read_text()) / 1000
    assert (reading.vram_used, reading.vram_total) == (XTX["vram_used"], XTX["vram_total"])
    assert (reading.temp_c, reading.power_w, reading.busy_percent) == (recorded_temp, 10.0, 0.0)
    assert (reading.device_id, reading.revision) == (0x744C, 0xC8)


def probe_data(recorded_gpu: dict, reading: dict | None) -> dict:
    """The probe's JSON for a host whose record has `recorded_gpu` and whose live card reads `reading`."""
    rec = record("/nonexistent")
    rec["gpus"] = [recorded_gpu]
    return {"record": rec, "record_error": "", "gpus": [reading] if reading else [], "jobs": []}


RECORDED_XTX = asdict(gpu("rx7900xtx"))


def test_a_card_swapped_since_provisioning_makes_the_host_not_provisioned() -> None:
    # recorded for a 7900 XTX (0x744c rev 0xc8); the host now holds an RX 6700 XT (0x73df rev 0xc1)
    swapped = parse_probe(
        "ws1", probe_data(RECORDED_XTX, {"index": 0, "device_id": 0x73DF, "revision": 0xC1})
    )
    assert not swapped.provisioned
    assert swapped.note == (
        "card changed since provisioning: GPU 0 was AMD Radeon RX 7900 XTX, is now AMD Radeon RX 6700 XT; "
        "re-run deploy/setup.py"
    )
    same = parse_probe("ws1", probe_data(RECORDED_XTX, {"index": 0, "device_id": 0x744C, "revision": 0xC8}))
    assert same.provisioned and same.note == ""


def test_a_recorded_card_missing_from_sysfs_makes_the_host_not_provisioned() -> None:
    """amdgpu not loaded (e.g. after a kernel update without the dkms module): no card in the readings."""
    view = parse_probe("ws1", probe_data(RECORDED_XTX, None))
    assert not view.provisioned
    assert view.note == (
        "card changed since provisioning: GPU 0 AMD Radeon RX 7900 XTX is not in sysfs (card removed, or "
        "amdgpu not loaded); re-run deploy/setup.py"
    )


def test_a_record_without_device_ids_is_not_judged_by_them() -> None:
    """Records written before device ids were recorded stay valid: no id, nothing to compare."""
    old = {**RECORDED_XTX, "device_id": None, "revision": None}
    assert parse_probe(
        "ws1", probe_data(old, {"index": 0, "device_id": 0x73DF, "revision": 0xC1})
    ).provisioned
    assert parse_probe("ws1", probe_data(old, None)).provisioned


def test_fleet_json_lists_gpus_with_their_readings() -> None:
    data = probe_data(
        RECORDED_XTX, {"index": 0, "vram_used": 3 * GIB, "vram_total": 24 * GIB, "temp_edge_c": 45.0}
    )
    shown = parse_probe("ws1", data).to_dict()
    assert [(g["name"], g["gfx"], g["vram_used"], g["temp_c"]) for g in shown["gpus"]] == [
        (XTX["name"], "gfx1100", 3 * GIB, 45.0)
    ]


def fleet_cells(views: list[HostView]) -> list[dict[str, str]]:
    """`fleet`'s table as printed, one {column: cell} per host row (cells cut at the headers' positions)."""
    from rich.console import Console

    console = Console(width=250, record=True)
    table = fleet_table(views)
    console.print(table)
    header, _, *rows = [line for line in console.export_text().splitlines() if line.strip()]
    names = [str(c.header) for c in table.columns]
    starts = [header.index(f" {n} ") + 1 for n in names]
    cut = list(zip(starts, [*starts[1:], None], strict=True))
    return [{n: row[a:b].strip() for n, (a, b) in zip(names, cut, strict=True)} for row in rows]


@pytest.mark.parametrize(
    ("card", "busy", "power"),
    [("rx7900xtx", "0%", "10 W"), ("rx6700xt", "0%", "6 W"), ("rx9070xt", "9%", "32 W"),
     ("strixhalo", "3%", "unknown")],
)  # fmt: skip
def test_the_fleet_table_shows_busy_and_power_of_every_simulated_card_or_says_unknown(
    tmp_path: Path, card: str, busy: str, power: str
) -> None:
    """Every SIMULATED card's busy % and power come through the probe into `fleet`'s table (busy: the
    recorded sysfs file or rocm-smi's "GPU%"; power: rocm-smi's average power). A reading no recording
    holds (the Strix Halo's power) is the word "unknown", never "?"."""
    write_sysclass(tmp_path / "sys" / "class", card)
    data = probe_tool.probe(str(tmp_path / "no-record.json"), "none", None, str(tmp_path / "sys"))
    [row] = fleet_cells([parse_probe("ws1", data)])
    assert (row["busy"], row["power"]) == (busy, power)
    assert parse_probe("ws1", data).to_dict()["gpus"][0]["power_w"] == (None if power == "unknown" else
                                                                        float(power.split()[0]))  # fmt: skip


def test_the_fleet_table_says_unknown_in_words_for_readings_a_host_did_not_report() -> None:
    [row] = fleet_cells([parse_probe("ws1", probe_data(RECORDED_XTX, {"index": 0, "device_id": 0x744C}))])
    assert [row[c] for c in ("VRAM used/total", "temp", "busy", "power")] == ["unknown"] * 4
    assert row["GPU(s)"] == f"{XTX['name']} (gfx1100)"


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
    silent, refused = probe_hosts(targets, timeout=1.5)
    # the fleet's deadline ended the silent host (the transport's own 15 s timeout says something else)
    assert not silent.reachable and silent.error == "no answer within 1.5 s"
    assert not refused.reachable and "refused" in (refused.error or "").lower()
    assert refused.error.startswith("cannot reach refused (127.0.0.1:")  # one line, named, no traceback


def test_cli_json_and_exit_code(tmp_path: Path, silent_port: int) -> None:
    inventory = tmp_path / "inv.py"
    hosts = [("silent", silent_port), ("refused", closed_port())]
    entries = [(n, {"ssh_hostname": "127.0.0.1", "ssh_port": p, "ssh_key": "k"}) for n, p in hosts]
    inventory.write_text(f"hosts = {entries!r}\n")
    result = CliRunner().invoke(main, ["fleet", "-i", str(inventory), "--timeout", "1", "--json"])
    assert result.exit_code == EXIT_FAILURE, result.output  # any host unreachable: 1
    rows = json.loads(result.stdout)
    assert [(r["host"], r["reachable"]) for r in rows] == [("silent", False), ("refused", False)]
    assert rows[0]["error"] == "no answer within 1 s"

    table = CliRunner().invoke(main, ["fleet", "-i", str(inventory), "--timeout", "1", "--limit", "refused"])
    assert table.exit_code == EXIT_FAILURE and "refused" in table.output and "silent" not in table.output

    bad = CliRunner().invoke(main, ["fleet", "-i", str(inventory), "--limit", "nope"])
    assert bad.exit_code == EXIT_USAGE, bad.output
    assert len(bad.stderr.strip().splitlines()) == 1
    assert bad.stderr.startswith(
        "radeonlab: error: no host or group matches 'nope'; known hosts: silent, refused"
    )


def test_cli_exit_zero_when_every_host_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Exit 0 needs every host reachable: a view of one reachable host stands in for SSH here."""
    from radeonlab.jobs.fleet import probe

    inventory = tmp_path / "inv.py"
    inventory.write_text('hosts = ["ws1"]\n')
    monkeypatch.setattr(probe, "probe_hosts", lambda targets, timeout: [HostView("ws1")])
    result = CliRunner().invoke(main, ["fleet", "-i", str(inventory), "--json"])
    assert result.exit_code == EXIT_OK, result.output
    assert json.loads(result.stdout)[0]["host"] == "ws1"


def test_a_container_runtime_host_takes_jobs_once_its_record_says_how_to_start_the_image() -> None:
    """A host provisioned with radeonlab_runtime: container (issue 29) takes jobs when its record names the
    image and the container command; a record from before jobs ran in containers (no command) asks for the
    deploy again; a runtime this radeonlab does not know takes no job and says so in one line."""
    rec = record("/nonexistent", pci_ids=False)  # the probe here reads no card
    rec.update(runtime="container", image="rocm/pytorch:x", image_digest="sha256:" + "0" * 64)
    older = parse_probe("ws1", {"record": rec, "record_error": "", "gpus": [], "jobs": []})
    assert not older.provisioned and older.reachable
    assert older.note == "host record of a container host names no image or container command"
    with pytest.raises(NotProvisionedError) as err:
        require_record(older, "inventories/home.py")
    assert "provision it first: pyinfra -y --limit ws1 inventories/home.py" in str(err.value)

    rec.update(container_command=["podman", "run", "--device=/dev/kfd"], container_sudo=True)
    view = parse_probe("ws1", {"record": rec, "record_error": "", "gpus": [], "jobs": []})
    assert view.provisioned and view.note == ""
    assert require_record(view, "inventories/home.py").container_command[:2] == ["podman", "run"]

    newer = parse_probe(
        "ws1", {"record": {**rec, "runtime": "nspawn"}, "record_error": "", "gpus": [], "jobs": []}
    )
    assert (
        newer.note
        == "provisioned with radeonlab_runtime: nspawn: this radeonlab runs jobs in venv or container"
    )
    with pytest.raises(NotProvisionedError) as err:
        require_record(newer, "inventories/home.py")
    assert str(err.value) == f"ws1 runs no job: {newer.note}; choose another host"


def test_the_probe_job_summary_keys_are_the_contract_fields() -> None:
    """jobs/host/probe.py writes a job summary by hand (stdlib, host side); contract/messages.py ProbeJob
    reads it on the laptop: the same keys, for `summary` and `full`."""
    from dataclasses import fields

    from radeonlab.contract.messages import ProbeJob
    from radeonlab.jobs.host.probe import job_summary

    job = {"id": "a-1", "name": "a", "spec_file": "a.yaml", "created_at": "t", "host": "ws1", "gpus": [0]}
    item = {"id": "a-1", "job": job, "state": {"state": "queued"}}
    item["alive"] = True
    summary, full = job_summary(item, False), job_summary(item, True, "/x")
    names = {f.name for f in fields(ProbeJob)}
    assert set(full) == names and set(summary) == names - {"job", "progress", "duration_s"}
    parsed = ProbeJob.from_dict(full)
    assert parsed.job is not None and parsed.job.name == "a"
    assert parsed.gpus == [0] and parsed.progress is None


def test_a_job_summary_this_laptop_cannot_read_is_left_out_not_the_host() -> None:
    """A state.json a newer radeonlab wrote (an unknown state) costs that job its row, not the host."""
    good = {"id": "a-1", "state": {"state": "running"}, "alive": True, "gpus": [0]}
    newer = {"id": "b-2", "state": {"state": "hibernating"}, "alive": True, "gpus": [0]}
    view = parse_probe("ws1", {"record": None, "jobs": [good, newer]})
    assert [j.id for j in view.jobs] == ["a-1"] and view.queue() == {"0": 1}

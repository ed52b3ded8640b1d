"""The job runner's CLI and helpers without a host: errors are one line, checks run before anything else,
the host record is judged, the demo's loss curve is drawn. (End to end on a sandbox host:
tests/test_jobs_e2e.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from radeonlab.jobs.apply import submit as runner
from radeonlab.jobs.fleet.hostrecord import blobs_dir, read_host_record
from radeonlab.jobs.fleet.inventory import HostTarget, InventoryError, load_inventory
from radeonlab.jobs.spec import load as spec_module
from radeonlab.jobs.ssh.connection import RunResult

from radeonlab.cli import main
from radeonlab.errors import NotProvisionedError, RadeonlabError
from radeonlab.sandbox import demodata
from radeonlab.sandbox.demo import sparkline, write_spec

REPO = Path(__file__).resolve().parent.parent
SEED = REPO / "jobs/examples/seed.yaml"


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def test_a_missing_inventory_is_one_line_without_traceback(tmp_path: Path) -> None:
    result = invoke("status", "demo-20260101-000000-abcd", "-i", str(tmp_path / "nope.py"))
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        f"radeonlab: error: {tmp_path / 'nope.py'}: no such inventory file"
    ]
    assert "Traceback" not in result.output


def test_inventory_defaults_to_the_environment_variable(tmp_path: Path) -> None:
    missing = tmp_path / "from-env.py"
    result = invoke("list", env={"RADEONLAB_INVENTORY": str(missing)})
    assert result.exit_code == 1
    assert str(missing) in result.stderr


def test_submit_checks_the_spec_before_it_reads_the_inventory(tmp_path: Path) -> None:
    # the inventory does not even exist: the checks must refuse first, naming each invalid key and its fix
    result = invoke("submit", str(SEED), "-i", str(tmp_path / "nope.py"), "--host", "ws1")
    assert result.exit_code == 1
    assert "no such inventory" not in result.stderr
    for key, fix in (("compute_type", "bf16: true"), ("disable_flash_attn", "flash_attn: disabled")):
        assert any(key in line and fix in line for line in result.stderr.splitlines()), (key, result.stderr)
    assert any("ddp_backend" in line for line in result.stderr.splitlines())
    assert result.stderr.strip().splitlines()[-1].startswith("radeonlab: error: ")
    assert "nothing uploaded" in result.stderr


class FakeRemote:
    """A Remote stand-in answering `cat /etc/radeonlab/host.json` with canned text (no SSH)."""

    def __init__(self, text: str | None) -> None:
        self.text = text
        self.target = HostTarget(name="ws9", hostname="127.0.0.1")

    def run(self, argv, check=True, **_kw):  # noqa: ANN001, ANN003, ANN201 - mirrors Remote.run
        if self.text is None:
            return RunResult("", "cat: /etc/radeonlab/host.json: No such file or directory", 1)
        return RunResult(self.text, "", 0)


def test_an_unprovisioned_host_names_the_deploy_command() -> None:
    with pytest.raises(NotProvisionedError) as err:
        read_host_record(FakeRemote(None), "inventories/home.py")  # type: ignore[arg-type]
    message = str(err.value)
    assert "ws9 is not provisioned" in message
    assert "pyinfra -y --limit ws9 inventories/home.py deploy/setup.py" in message
    assert "\n" not in message


def test_an_old_host_record_is_not_current() -> None:
    with pytest.raises(NotProvisionedError, match="schema 0"):
        read_host_record(FakeRemote(json.dumps({"schema": 0})), "inv.py")  # type: ignore[arg-type]


def test_a_current_host_record_is_read() -> None:
    record = {
        "schema": 1,
        "host": "ws9",
        "user": "lab",
        "venv": "/v",
        "jobs_dir": "/h/radeonlab/jobs",
        "gpus": [],
    }
    got = read_host_record(FakeRemote(json.dumps(record)), "inv.py")  # type: ignore[arg-type]
    assert got == record
    assert blobs_dir(got) == "/h/radeonlab/blobs"


CLOSED_HOSTS = (
    'hosts = [("a", {"ssh_hostname": "127.0.77.250", "ssh_port": 1, "ssh_user": "lab"}),\n'
    '         ("b", {"ssh_hostname": "127.0.77.251", "ssh_port": 1, "ssh_user": "lab"})]\n'
)  # two hosts that listen nowhere: what submit does is visible in which one it tries to reach


def test_submit_places_among_several_hosts_unless_one_is_named(tmp_path: Path) -> None:
    """The real path (runner.choose_host): --host goes to that host only; without it placement judges
    every host, one line each, and names why none fits."""
    spec = write_spec(tmp_path, {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "max_steps": 5})
    demodata.write_dataset(tmp_path / "data")
    inventory = tmp_path / "two.py"
    inventory.write_text(CLOSED_HOSTS)
    named = invoke("submit", str(spec), "-i", str(inventory), "--host", "b")
    assert named.exit_code == 1
    assert named.stderr.strip().splitlines() == [
        "radeonlab: error: cannot reach b (127.0.77.251:1): Connection refused"
    ]
    placed = invoke("submit", str(spec), "-i", str(inventory))
    lines = placed.stderr.strip().splitlines()
    assert placed.exit_code == 1
    assert [ln.split(":")[1].strip() for ln in lines[:2]] == ["a", "b"]  # each host judged
    assert lines[-1].startswith("radeonlab: error: no host fits this job: a: rejected: unreachable"), lines
    with pytest.raises(InventoryError, match="unknown host 'c'"):
        runner.choose_host(load_inventory(inventory), "c", spec_module.load(spec), print)


def test_dataset_files_are_the_ones_the_spec_trains_on(tmp_path: Path) -> None:
    from radeonlab.jobs.plan.render import render
    from radeonlab.jobs.spec import load as spec_module

    from radeonlab.contract.records import JobPaths

    spec_path = write_spec(tmp_path, {})
    demodata.write_dataset(tmp_path / "data")
    (tmp_path / "data" / "unused.jsonl").write_text("{}\n")
    spec = spec_module.load(spec_path)
    host = {"host": "ws9", "gpus": [], "torch": {"simulated_cpu_build": True}}
    rendered = render(
        spec,
        host,
        JobPaths.for_job("/j", "x"),
        base_dataset_info=json.loads((tmp_path / "data/dataset_info.json").read_text()),
    )
    assert runner.dataset_files(spec, rendered) == [tmp_path / "data" / demodata.FILE_NAME]


def test_placement_refuses_a_card_with_too_little_vram(tmp_path: Path) -> None:
    from radeonlab.jobs.spec import load as spec_module

    spec = spec_module.parse_text(
        "stage: sft\nradeonlab:\n  placement: {min_vram_gb: 24}\n", tmp_path / "s.yaml"
    )
    small = {"host": "ws9", "gpus": [{"index": 0, "name": "RX 6700 XT", "vram_total": 12 * 1024**3}]}
    with pytest.raises(RadeonlabError, match="min_vram_gb is 24 GB"):
        runner.check_placement(spec, small)
    runner.check_placement(spec, {"host": "ws9", "gpus": [{"index": 0, "vram_total": 24 * 1024**3}]})


def test_sparkline_goes_down_with_the_loss() -> None:
    line = sparkline([8.0, 6.0, 4.0, 2.0, 1.0], 60)
    assert line[0] == "█" and line[-1] == "▁" and len(line) == 5

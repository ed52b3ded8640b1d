"""The job runner's CLI and helpers without a host: errors are one line, checks run before anything else,
the host record is judged, the loss curve is drawn. (End to end on a sandbox host: tests/e2e/test_jobs_e2e.py;
the CLI's own conventions: tests/unit/test_cli.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from radeonlab.cli import main
from radeonlab.cli.views import sparkline as cli_sparkline
from radeonlab.contract.records import HostRecord
from radeonlab.errors import EXIT_FAILURE, EXIT_USAGE, InventoryError, NotProvisionedError
from radeonlab.jobs.fleet import store
from radeonlab.jobs.fleet.inventory import load_inventory
from radeonlab.jobs.fleet.probe import parse_probe, require_record
from radeonlab.jobs.plan.placement import Asks
from radeonlab.jobs.plan.plan import choose_targets
from radeonlab.sandbox import demodata
from radeonlab.sandbox.demo import sparkline, write_spec
from tests.support.laptop_doubles import CLOSED_HUB, host_record

REPO = Path(__file__).resolve().parents[2]
SEED = REPO / "src/radeonlab/jobs/examples/seed.yaml"


@pytest.fixture(autouse=True)
def laptop_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The laptop's job cache in this test's folder: verbs that resolve a job id open it first."""
    monkeypatch.setenv(store.HOME_ENV, str(tmp_path / "laptop-home"))


def invoke(*args: str, env: dict[str, str] | None = None):  # noqa: ANN201
    """`radeonlab ARGS`; a Hub model is asked of a Hub endpoint where nothing listens (never the Internet)."""
    return CliRunner().invoke(
        main, list(args), env={"HF_ENDPOINT": CLOSED_HUB, **(env or {})}, catch_exceptions=False
    )


def test_a_missing_inventory_is_one_line_without_traceback(tmp_path: Path) -> None:
    result = invoke("status", "demo-20260101-000000-abcd", "-i", str(tmp_path / "nope.py"))
    assert result.exit_code == EXIT_USAGE, result.output
    assert result.stderr.strip().splitlines() == [
        f"radeonlab: error: {tmp_path / 'nope.py'}: no such inventory file"
    ]
    assert "Traceback" not in result.output


def test_inventory_defaults_to_the_environment_variable(tmp_path: Path) -> None:
    missing = tmp_path / "from-env.py"
    result = invoke("list", env={"RADEONLAB_INVENTORY": str(missing), "RADEONLAB_HOME": str(tmp_path)})
    assert result.exit_code == EXIT_USAGE, result.output
    assert result.stderr.strip().splitlines() == [f"radeonlab: error: {missing}: no such inventory file"]


def test_submit_checks_the_spec_before_it_reads_the_inventory(tmp_path: Path) -> None:
    # the inventory does not even exist: the checks must refuse first, naming each invalid key and its fix
    result = invoke("submit", str(SEED), "-i", str(tmp_path / "nope.py"), "--host", "ws1")
    assert result.exit_code == EXIT_USAGE
    assert "no such inventory" not in result.stderr
    for key, fix in (("compute_type", "bf16: true"), ("disable_flash_attn", "flash_attn: disabled")):
        assert any(key in line and fix in line for line in result.stderr.splitlines()), (key, result.stderr)
    assert any("ddp_backend" in line for line in result.stderr.splitlines())
    assert result.stderr.strip().splitlines()[-1].startswith("radeonlab: error: ")
    assert "nothing uploaded" in result.stderr


def test_an_unprovisioned_host_names_the_deploy_command() -> None:
    view = parse_probe("ws9", {"record": None, "record_error": "no host record"})
    with pytest.raises(NotProvisionedError) as err:
        require_record(view, "inventories/home.py")
    message = str(err.value)
    assert message.startswith("ws9 is not provisioned (no /etc/radeonlab/host.json): provision it first: ")
    assert "pyinfra -y --limit ws9 inventories/home.py deploy/setup.py" in message
    assert "\n" not in message and err.value.exit_code == EXIT_FAILURE


@pytest.mark.parametrize(
    "record",
    [
        {"schema": 0},  # whatever an older radeonlab wrote, it is named by its schema
        # the previous radeonlab's record (schema 1): every field this one requires is there
        {"schema": 1, "host": "ws9", "user": "lab", "venv": "/v", "jobs_dir": "/j", "gpus": []},
        {"schema": 3, "host": "ws9", "user": "lab", "venv_path": "/v", "jobs_dir": "/j"},  # a newer one
    ],
)
def test_a_host_record_of_another_schema_is_not_current(record: dict) -> None:
    view = parse_probe("ws9", {"record": record, "record_error": ""})
    assert not view.provisioned
    assert view.note == f"host record schema {record['schema']}, this radeonlab reads schema 2"
    with pytest.raises(
        NotProvisionedError, match=rf"\(host record schema {record['schema']}, .*deploy/setup.py"
    ):
        require_record(view, "inv.py")


def test_a_failed_verification_is_named() -> None:
    failed = host_record("ws9", problem="ROCm torch 2.13.0 sees no GPU: check ...").to_dict()
    view = parse_probe("ws9", {"record": failed, "record_error": ""})
    with pytest.raises(
        NotProvisionedError, match=r"^ws9 is not provisioned \(verification failed: ROCm torch"
    ) as refused:
        require_record(view, "inv.py")
    # provisioning again alone would not help: the reason's own fix comes first
    assert "provision it first" not in str(refused.value) and "fix that" in str(refused.value)


def test_a_current_host_record_is_read() -> None:
    record = host_record("ws9", jobs_dir="/h/radeonlab/jobs")
    got = require_record(parse_probe("ws9", {"record": record.to_dict(), "record_error": ""}), "inv.py")
    assert got == record and isinstance(got, HostRecord)
    assert got.blobs_dir == "/h/radeonlab/blobs"
    assert (
        got.job_dir("x-20250101-000000-abcd").state == "/h/radeonlab/jobs/x-20250101-000000-abcd/state.json"
    )


CLOSED_HOSTS = (
    'hosts = [("a", {"ssh_hostname": "127.0.77.250", "ssh_port": 1, "ssh_user": "lab"}),\n'
    '         ("b", {"ssh_hostname": "127.0.77.251", "ssh_port": 1, "ssh_user": "lab"})]\n'
)  # two hosts that listen nowhere: what submit does is visible in which one it tries to reach


def test_submit_places_among_several_hosts_unless_one_is_named(tmp_path: Path) -> None:
    """The real path (plan.choose_targets): --host goes to that host only; without it placement judges
    every host, one line each, and names why none fits."""
    spec = write_spec(tmp_path, {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "max_steps": 5})
    demodata.write_dataset(tmp_path / "data")
    inventory = tmp_path / "two.py"
    inventory.write_text(CLOSED_HOSTS)
    named = invoke("submit", str(spec), "-i", str(inventory), "--host", "b")
    assert named.exit_code == EXIT_FAILURE
    assert named.stderr.strip().splitlines() == [
        "radeonlab: error: cannot reach b (127.0.77.251:1): Connection refused"
    ]
    placed = invoke("submit", str(spec), "-i", str(inventory))
    lines = placed.stderr.strip().splitlines()
    assert placed.exit_code == EXIT_FAILURE
    assert [ln.split(":")[1].strip() for ln in lines[:2]] == ["a", "b"]  # each host judged
    assert lines[-1].startswith("radeonlab: error: no host fits this job: a: rejected: unreachable"), lines
    with pytest.raises(InventoryError, match="unknown host 'c'"):
        choose_targets(load_inventory(inventory), "c", Asks(), 1, {}, print)


def test_submit_loads_the_inventory_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each load is a Python start-up in a child process (about 0.5 s of every submit): the Slurm question and
    the plan share one."""
    from radeonlab.jobs.fleet import context as context_module
    from radeonlab.jobs.fleet import inventory as inventory_module

    loads: list[str] = []

    def counted(path: str | Path) -> dict:
        loads.append(str(path))
        return load_inventory(path)

    monkeypatch.setattr(inventory_module, "load_inventory", counted)
    monkeypatch.setattr(context_module, "load_inventory", counted)
    spec = write_spec(tmp_path, {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "max_steps": 5})
    demodata.write_dataset(tmp_path / "data")
    inventory = tmp_path / "two.py"
    inventory.write_text(CLOSED_HOSTS)
    named = invoke("submit", str(spec), "-i", str(inventory), "--host", "b")
    assert "cannot reach b" in named.stderr and loads == [str(inventory)]


def test_sparkline_goes_down_with_the_loss() -> None:
    for draw in (sparkline, cli_sparkline):  # the demo's and the CLI's (status, watch)
        line = draw([8.0, 6.0, 4.0, 2.0, 1.0], 60)
        assert line[0] == "█" and line[-1] == "▁" and len(line) == 5
    assert cli_sparkline([3.0, float("nan"), 1.0], 10) == "█▁"  # a NaN loss is skipped, not drawn

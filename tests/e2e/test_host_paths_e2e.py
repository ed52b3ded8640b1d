"""A model folder that lives on the workstation (issue 26 item 5), end to end on the session's shared
provisioned SIMULATED workstation (radeonlab.sandbox.provision.shared_trainer, as tests/e2e/test_jobs_e2e.py):
`check SPEC --host H` finds it there over SSH (the host's probe, jobs/host/probe.py --path), submit trains on
it where it is and uploads no model, and a folder the host does not have is refused in one line naming the
host and the path, before anything is sent.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from radeonlab.cli import main
from radeonlab.errors import EXIT_USAGE
from radeonlab.sandbox import demodata, tinymodel
from radeonlab.sandbox.demo import write_spec
from radeonlab.sandbox.hosts import Sandbox, SandboxHost
from radeonlab.sandbox.provision import SHARED_TRAINER, shared_trainer

pytestmark = [pytest.mark.sandbox]

REPO = Path(__file__).resolve().parents[2]
INVENTORY = str(REPO / "inventories/sandbox.py")
HOST = SHARED_TRAINER
ON_HOST = "/data/models/tiny-llama"  # where configs users post keep their models: only on the workstation
JOBS_DIR = "/home/lab/radeonlab/jobs"


@dataclass
class Lab:
    host: SandboxHost
    work: Path
    env: dict[str, str]

    def cli(self, *args: str) -> Result:
        return CliRunner().invoke(main, list(args), env=self.env, catch_exceptions=False)


@pytest.fixture(scope="module")
def lab(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    host = shared_trainer(sandbox).host
    work = tmp_path_factory.mktemp("host-paths")
    data = demodata.write_dataset(work / "data")
    built = tinymodel.build_model(work / "built" / "tiny-llama", data)  # then moved: not on the laptop
    target = host.root / ON_HOST.lstrip("/")
    shutil.copytree(built, target)
    shutil.rmtree(built)
    host.exec(f"chown -R {host.user} /data && chmod -R a+rX /data")
    env = {"RADEONLAB_SANDBOX_DIR": str(sandbox.state_dir), "RADEONLAB_HOME": str(work / "laptop")}
    try:
        yield Lab(host, work, env)
    finally:
        host.exec("rm -rf /data")  # the shared host as this module found it


def jobs_on_host(host: SandboxHost) -> list[str]:
    return host.exec(f"ls {JOBS_DIR} 2>/dev/null", check=False).stdout.split()


def test_check_host_finds_the_folder_and_submit_trains_on_it_uploading_no_model(lab: Lab) -> None:
    spec = write_spec(lab.work, {"model_name_or_path": ON_HOST, "max_steps": 3})
    assert not Path(ON_HOST).exists()  # on the workstation only

    alone = lab.cli("check", str(spec))  # no host: where it will be looked for, and the fix
    assert alone.exit_code == 0 and "is not on this laptop: submit looks for it" in alone.output, alone.output

    checked = lab.cli("check", str(spec), "--host", HOST, "-i", INVENTORY)
    assert checked.exit_code == 0, checked.output
    assert f"info: model folder {ON_HOST} found on {HOST} (" in checked.output, checked.output
    assert " warning: " not in checked.output and " error: " not in checked.output, checked.output

    planned = lab.cli("submit", str(spec), "-i", INVENTORY, "--host", HOST, "--dry-run", "--json")
    assert planned.exit_code == 0, planned.output
    plan = json.loads(planned.stdout)
    (node,) = plan["nodes"]
    dests = [u["dest"] for u in node["uploads"]]
    assert dests and not [d for d in dests if d.startswith("model/")], dests  # the data only
    assert "model_name_or_path" not in node["changes"], node["changes"]  # rendered as written
    assert plan["model"]["host_dir"] == ON_HOST and plan["model"]["local"] is True, plan["model"]

    submitted = lab.cli("submit", str(spec), "-i", INVENTORY, "--host", HOST, "--watch")
    assert submitted.exit_code == 0, submitted.output
    assert f"model folder {ON_HOST} found on {HOST}" in submitted.output
    job_id = re.search(r"submitted (\S+) to", submitted.stdout).group(1)  # type: ignore[union-attr]
    job = f"{JOBS_DIR}/{job_id}"
    assert lab.host.exec(f"ls {job}/model 2>/dev/null | wc -l", check=False).stdout.strip() == "0"
    config = lab.host.exec(["cat", f"{job}/config.yaml"]).stdout
    assert f"model_name_or_path: {ON_HOST}\n" in config, config
    state = json.loads(lab.host.exec(["cat", f"{job}/state.json"]).stdout)
    assert state["state"] == "succeeded", state


def test_a_folder_the_host_does_not_have_is_one_line_and_nothing_is_sent(lab: Lab) -> None:
    missing = "/data/models/not-there"
    spec = write_spec(lab.work / "missing", {"model_name_or_path": missing, "max_steps": 3})
    demodata.write_dataset(lab.work / "missing" / "data")
    checked = lab.cli("check", str(spec), "--host", HOST, "-i", INVENTORY)
    assert checked.exit_code == 1, checked.output
    errors = [line for line in checked.output.splitlines() if ": error: " in line]
    assert errors == [
        f"{spec}:9: error: {HOST} has no {missing} (`model_name_or_path`; not on this laptop either)"
    ], checked.output

    before = jobs_on_host(lab.host)
    result = lab.cli("submit", str(spec), "-i", INVENTORY, "--host", HOST)
    assert result.exit_code == EXIT_USAGE, result.output
    assert result.stderr.strip().splitlines() == [
        f"radeonlab: error: {HOST} has no {missing} (`model_name_or_path`; not on this laptop either); "
        "nothing uploaded"
    ], result.stderr
    assert jobs_on_host(lab.host) == before

    lab.host.exec(f"mkdir -p {missing} && touch {missing}/README.md")  # a folder, but not a model
    try:
        not_a_model = lab.cli("check", str(spec), "--host", HOST, "-i", INVENTORY)
    finally:
        lab.host.exec(f"rm -rf {missing}")
    assert not_a_model.exit_code == 1, not_a_model.output
    said = not_a_model.output
    assert f"error: {HOST}: {missing} is not a model folder: no config.json and no weights" in said, said

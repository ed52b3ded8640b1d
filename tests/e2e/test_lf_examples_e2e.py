"""LLaMA-Factory 0.9.5's own example configs run on a SIMULATED workstation (CPU torch, the tiny local model).

docs/reference/needs.md's examples table says, per example, whether the sandbox has everything it needs
("the sandbox has it all": yes). Each of those is submitted here through the `radeonlab` CLI to the session's
shared trainer and must train to the end: stage (sft, pt, rm, dpo, kto), finetuning type (lora, full, freeze,
oft) and method (LLaMA Pro, LoRA+, PiSSA, DFT, EAFT, Muon, a tokenized dataset saved to disk)
as LLaMA-Factory's example sets them. The rows come from tests/support/examples_table.py,
so a row that turns to "yes" is run here too.

What the test changes in each example, and why (nothing else):
- `model_name_or_path` and `template`: the tiny model stands in for the 0.5B-8B models the examples name (no
  Hub here) and is used with its own chat template;
- `freeze_trainable_layers`: LLaMA Pro trains every n-th of the model's layers, which must divide the layer
  count (8 of Llama-3-8B's 32; the tiny model has 2);
- size only: `max_steps: 2`, `max_samples: 16`, `cutoff_len: 64`, batch 1 without accumulation, no saving
  mid-run, one worker: the examples' own sizes would take hours on two CPU cores.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from radeonlab.cli import main
from radeonlab.sandbox import demodata, tinymodel
from radeonlab.sandbox.hosts import Sandbox, SandboxHost
from radeonlab.sandbox.provision import SHARED_TRAINER, shared_trainer
from tests.support import examples_table

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
INVENTORY = str(REPO / "inventories/sandbox.py")
JOBS_DIR = "/home/lab/radeonlab/jobs"
SIZE = {
    "max_steps": 2,
    "max_samples": 16,
    "cutoff_len": 64,
    "per_device_train_batch_size": 1,
    "gradient_accumulation_steps": 1,
    "save_steps": 1000,
    "logging_steps": 1,
    "preprocessing_num_workers": 1,
    "dataloader_num_workers": 0,
}


def runnable() -> list[str]:
    """The examples docs/reference/needs.md's table marks as runnable in the sandbox."""
    with tempfile.TemporaryDirectory() as tmp:
        data = examples_table.data_dir(Path(tmp) / "data")
        rows = [examples_table.row(e, data) for e in examples_table.examples()]
    return [r.example for r in rows if r.sandbox == "yes"]


RUNNABLE = runnable()


@dataclass
class Lab:
    host: SandboxHost
    env: dict[str, str]
    jobs: dict[str, str]


def cli(lab_env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "-i", INVENTORY], env=lab_env, catch_exceptions=False)


def spec_for(example: str, work: Path) -> Path:
    """The example with the model swapped for the tiny one and its sizes cut (module docstring)."""
    values = yaml.safe_load((examples_table.LF / "examples" / example).read_text())
    values.update(SIZE, model_name_or_path="tiny-llama", template="default", dataset_dir="data")
    if values.get("use_llama_pro"):
        values["freeze_trainable_layers"] = 1
    path = work / (example.replace("/", "__"))
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def lab(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """Every runnable example submitted at once: they queue on the host's GPU and run one after another."""
    provisioned = shared_trainer(sandbox)
    work = tmp_path_factory.mktemp("lf-examples")
    examples_table.data_dir(work / "data")
    tinymodel.build_model(work / "tiny-llama", demodata.write_dataset(work / "demo-data"))
    env = {"RADEONLAB_SANDBOX_DIR": str(sandbox.state_dir), "RADEONLAB_HOME": str(work / "laptop")}
    jobs = {}
    for example in RUNNABLE:
        result = cli(env, "submit", str(spec_for(example, work)), "--host", SHARED_TRAINER)
        assert result.exit_code == 0, f"{example}: {result.output}"
        (jobs[example],) = re.findall(r"submitted (\S+) to", result.stdout)
    yield Lab(provisioned.host, env, jobs)


def test_the_table_marks_every_kind_of_training_runnable() -> None:
    # A table bug that marked nothing runnable would make the test below vacuous.
    kinds = {yaml.safe_load((examples_table.LF / "examples" / e).read_text())["stage"] for e in RUNNABLE}
    assert len(RUNNABLE) >= 13 and kinds == {"sft", "pt", "rm", "dpo", "kto"}


@pytest.mark.parametrize("example", RUNNABLE)
def test_the_example_trains_to_the_end(lab: Lab, example: str, tmp_path: Path) -> None:
    job_id = lab.jobs[example]
    watched = cli(lab.env, "watch", job_id, "--json")
    assert watched.exit_code == 0, f"{example}: {watched.output[-3000:]}"
    status = json.loads(cli(lab.env, "status", job_id, "--json").stdout)
    assert status["state"] == "succeeded", status
    log = lab.host.exec(["cat", f"{JOBS_DIR}/{job_id}/output/trainer_log.jsonl"]).stdout
    steps = [json.loads(line)["current_steps"] for line in log.splitlines() if '"loss"' in line]
    assert steps == [1, 2], f"{example}: logged steps {steps}"
    # fetch brings the result: the adapter, or a full/freeze fine-tune's model
    fetched = cli(lab.env, "fetch", job_id, "--to", str(tmp_path), "--json")
    assert fetched.exit_code == 0, f"{example}: {fetched.output[-2000:]}"
    kind = yaml.safe_load((examples_table.LF / "examples" / example).read_text())["finetuning_type"]
    result = "model.safetensors" if kind in ("full", "freeze") else "adapter_model.safetensors"
    assert (tmp_path / job_id / "output" / result).stat().st_size > 0, f"{example}: no {result} fetched"

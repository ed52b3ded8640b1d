"""Paths as users write them (issue 26 item 5), through the CLI as typed: `~` alike for every path key, a Hub
cache folder mapped to its Hub id, a workstation folder that is not on the laptop, and a spec inside an
LLaMA-Factory checkout. The host side (`check --host`, submit looking on the host) is tests/
test_host_paths_e2e.py, on a SIMULATED workstation.

Like tests/unit/test_bad_inputs.py, submit runs against an inventory whose only host listens nowhere: "cannot
reach ws1" proves an input was accepted as far as SSH, a `radeonlab: error:` line that it was refused before.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from radeonlab.cli import main
from radeonlab.errors import EXIT_FAILURE, EXIT_USAGE
from radeonlab.jobs.fleet import store
from radeonlab.jobs.spec.paths import hub_cache_id, local_path
from radeonlab.sandbox import demodata
from radeonlab.sandbox.demo import write_spec
from radeonlab.sandbox.tinymodel import MODEL_CONFIG
from tests.unit.test_bad_inputs import CLOSED_INVENTORY, HUB_ENV, HUB_MODEL

SHA = "060db6499f32faf8b98477b0a26969ef7d8b9987"
CACHE_FOLDER = f"/home/ml/.cache/huggingface/hub/models--Qwen--Qwen2.5-0.5B/snapshots/{SHA}/"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The laptop user's home for `~`, and radeonlab's data folder inside this test's folder."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv(store.HOME_ENV, str(tmp_path / "laptop-home"))
    return tmp_path / "home"


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), env=HUB_ENV, catch_exceptions=False)


def submit(spec: Path, tmp_path: Path) -> Result:
    inventory = tmp_path / "closed.py"
    inventory.write_text(CLOSED_INVENTORY)
    return run("submit", str(spec), "-i", str(inventory))


def reached_ssh(result: Result) -> None:
    assert result.exit_code == EXIT_FAILURE and "cannot reach ws1" in result.stderr, result.output


def model_folder(folder: Path) -> Path:
    """A folder that is a model by radeonlab's rule (config.json and weights); never trained on here."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(MODEL_CONFIG))
    (folder / "model.safetensors").write_bytes(b"weights")
    return folder


def test_tilde_is_the_laptop_home_for_the_model_as_for_adapters(home: Path, tmp_path: Path) -> None:
    """Before: `~` was expanded for adapter_name_or_path but not for model_name_or_path ("no such local
    folder <spec folder>/~/models/tiny")."""
    model = model_folder(home / "models/tiny")
    adapter = home / "adapters/a1"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text("{}")
    spec = write_spec(tmp_path / "job", {"model_name_or_path": "~/models/tiny"})
    spec.write_text(spec.read_text() + "adapter_name_or_path: ~/adapters/a1\n")
    demodata.write_dataset(tmp_path / "job/data")
    checked = run("check", str(spec))
    assert checked.exit_code == 0, checked.output
    assert f"info: local model folder {model} (outside the spec's folder): 2 file(s)" in checked.output
    assert " error: " not in checked.output and " warning: " not in checked.output, checked.output
    reached_ssh(submit(spec, tmp_path))
    assert local_path(tmp_path, "~/models/tiny") == model  # the one helper every path key uses


def test_tilde_model_that_is_not_in_the_home_names_the_expanded_folder(home: Path, tmp_path: Path) -> None:
    spec = write_spec(tmp_path, {"model_name_or_path": "~/models/none", "max_steps": 5})
    demodata.write_dataset(tmp_path / "data")
    checked = run("check", str(spec))
    assert checked.exit_code == 1, checked.output
    assert f"error: ~/models/none: no such local folder ({home}/models/none)" in checked.output


def test_an_absolute_hub_cache_folder_gets_its_hub_id_as_the_fix(home: Path, tmp_path: Path) -> None:
    spec = write_spec(tmp_path, {"model_name_or_path": CACHE_FOLDER, "max_steps": 5})
    demodata.write_dataset(tmp_path / "data")
    for hub in ((), ("--no-hub",)):
        checked = run("check", str(spec), *hub)
        assert checked.exit_code == 0, checked.output  # a warning: the workstation may hold it (submit looks)
        (line,) = [x for x in checked.output.splitlines() if ": warning: " in x]
        head = f"{spec}:9: warning: `model_name_or_path: {CACHE_FOLDER}` is not on this laptop: "
        assert line.startswith(head + "a Hugging Face cache folder; name the model by its Hub id"), line
        assert line.endswith(f"(fix: model_name_or_path: Qwen/Qwen2.5-0.5B and model_revision: {SHA})"), line
    reached_ssh(submit(spec, tmp_path))  # looked up on the host: here, the closed one


def test_a_relative_hub_cache_folder_is_refused_with_its_hub_id(home: Path, tmp_path: Path) -> None:
    value = "hub/models--Qwen--Qwen2.5-0.5B/snapshots/main"
    spec = write_spec(tmp_path, {"model_name_or_path": value, "max_steps": 5})
    demodata.write_dataset(tmp_path / "data")
    checked = run("check", str(spec))
    assert checked.exit_code == 1, checked.output
    (line,) = [x for x in checked.output.splitlines() if ": error: " in x]  # once, though the Hub is asked
    assert "is a Hugging Face cache folder not found here" in line, line
    assert line.endswith("(fix: model_name_or_path: Qwen/Qwen2.5-0.5B and model_revision: main)"), line
    result = submit(spec, tmp_path)
    assert result.exit_code == EXIT_USAGE and "nothing uploaded" in result.stderr, result.output
    assert "(fix: model_name_or_path: Qwen/Qwen2.5-0.5B and model_revision: main)" in result.stderr


@pytest.mark.parametrize(
    ("value", "want"),
    [
        (CACHE_FOLDER, ("Qwen/Qwen2.5-0.5B", SHA)),
        ("models--gpt2/snapshots/abc", ("gpt2", "abc")),
        ("/data/models--x/other/abc", None),
        ("/data/llama-3-8b", None),
    ],
)
def test_hub_cache_id(value: str, want: tuple[str, str] | None) -> None:
    assert hub_cache_id(value) == want


def test_a_workstation_model_folder_is_a_warning_with_the_host_fix(home: Path, tmp_path: Path) -> None:
    """Before: `no such local folder` and no fix; now check says where it will be looked for, and submit
    looks on the host (here the closed one: it got as far as SSH)."""
    spec = write_spec(tmp_path, {"model_name_or_path": "/data/models/llama-3-8b", "max_steps": 5})
    demodata.write_dataset(tmp_path / "data")
    checked = run("check", str(spec))
    assert checked.exit_code == 0, checked.output
    assert (
        f"{spec}:9: warning: `model_name_or_path: /data/models/llama-3-8b` is not on this laptop: submit "
        "looks for it on the workstation (and uses it there, uploading nothing) (fix: `radeonlab check "
        "demo.yaml --host H` looks for it on host H now)"
    ) in checked.output
    assert "no such local folder" not in checked.output
    reached_ssh(submit(spec, tmp_path))


def test_a_workstation_adapter_folder_is_not_refused_as_missing(home: Path, tmp_path: Path) -> None:
    spec = write_spec(tmp_path, {"model_name_or_path": HUB_MODEL, "max_steps": 5})
    spec.write_text(spec.read_text() + "adapter_name_or_path: /workspace/runs/sft-1\n")
    demodata.write_dataset(tmp_path / "data")
    checked = run("check", str(spec), "--no-hub")
    assert checked.exit_code == 0, checked.output
    assert "warning: `adapter_name_or_path: /workspace/runs/sft-1` is not on this laptop" in checked.output


def test_check_host_reports_an_unreachable_host_in_one_line(home: Path, tmp_path: Path) -> None:
    spec = write_spec(tmp_path, {"model_name_or_path": "/data/models/llama-3-8b", "max_steps": 5})
    demodata.write_dataset(tmp_path / "data")
    inventory = tmp_path / "closed.py"
    inventory.write_text(CLOSED_INVENTORY)
    result = run("check", str(spec), "--host", "ws1", "-i", str(inventory))
    assert result.exit_code == EXIT_FAILURE, result.output
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("radeonlab: error: cannot reach ws1"), result.output


def checkout(root: Path, dataset_dir: str | None) -> Path:
    """An LLaMA-Factory checkout's shape: data/dataset_info.json at its root, the spec in examples/."""
    demodata.write_dataset(root / "data")
    spec = write_spec(root / "examples/train_lora", {"model_name_or_path": HUB_MODEL, "max_steps": 5})
    line = f"dataset_dir: {dataset_dir}\n" if dataset_dir else ""
    spec.write_text(spec.read_text().replace("dataset_dir: data\n", line))
    return spec


@pytest.mark.parametrize("dataset_dir", ["data", None])  # written as LLaMA-Factory's examples, or its default
def test_a_spec_in_an_llamafactory_checkout_gets_the_spec_relative_dataset_dir(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dataset_dir: str | None
) -> None:
    root = tmp_path / "LLaMA-Factory"
    spec = checkout(root, dataset_dir)
    monkeypatch.chdir(tmp_path)  # not the checkout's root: found from the spec's folders above
    checked = run("check", str(spec), "--no-hub")
    assert checked.exit_code == 1, checked.output
    (line,) = [x for x in checked.output.splitlines() if ": error: " in x]
    assert f"LLaMA-Factory, run from its checkout, reads {root}/data/dataset_info.json" in line, line
    assert line.endswith("(fix: dataset_dir: ../../data)"), line
    assert "cannot resolve" not in checked.output
    result = submit(spec, tmp_path)
    assert result.exit_code == EXIT_USAGE and "(fix: dataset_dir: ../../data)" in result.stderr, result.output
    # the fix as given makes it pass, as deepspeed's spec-relative fix does
    text = spec.read_text()
    fixed = text.replace("dataset_dir: data\n", "") + "dataset_dir: ../../data\n"
    spec.write_text(fixed)
    assert run("check", str(spec), "--no-hub").exit_code == 0
    reached_ssh(submit(spec, tmp_path))


def test_the_deepspeed_fix_is_found_from_the_checkout_root_above_the_spec(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same lookup for deepspeed (before: only from the current directory)."""
    root = tmp_path / "LLaMA-Factory"
    spec = checkout(root, "../../data")
    (root / "examples/deepspeed").mkdir()
    (root / "examples/deepspeed/ds_z0_config.json").write_text("{}")
    spec.write_text(spec.read_text() + "deepspeed: examples/deepspeed/ds_z0_config.json\n")
    monkeypatch.chdir(tmp_path)
    checked = run("check", str(spec), "--no-hub")
    assert checked.exit_code == 1 and "(fix: deepspeed: ../deepspeed/ds_z0_config.json)" in checked.output


def test_the_host_probe_lists_a_folder_and_the_laptop_judges_it(tmp_path: Path) -> None:
    """jobs/host/probe.py --path (run on the host) and OnHost (on the laptop), without SSH."""
    from radeonlab.jobs.host.probe import probe
    from radeonlab.jobs.spec.paths import ADAPTER, MODEL, HostPath, OnHost

    model = model_folder(tmp_path / "m")
    (tmp_path / "a").mkdir()
    (tmp_path / "a/adapter_config.json").write_text("{}")  # no adapter weights
    (tmp_path / "f").write_text("x")
    asked = [str(model), str(tmp_path / "a"), str(tmp_path / "none"), str(tmp_path / "f")]
    answers = probe(str(tmp_path / "no-record.json"), "none", None, str(tmp_path), paths=asked)["paths"]
    assert answers[str(model)] == {"kind": "folder", "names": ["config.json", "model.safetensors"]}
    on, t, key = OnHost("ws1", answers), tmp_path, "model_name_or_path"
    assert on.problem(HostPath(key, str(model), MODEL)) == (
        "info", f"model folder {model} found on ws1 (2 files): used there, nothing of it uploaded"
    )  # fmt: skip
    assert on.problem(HostPath("adapter_name_or_path", f"{t}/a", ADAPTER)) == (
        "error", f"ws1: {t}/a is not an adapter folder: no weights (adapter_model.safetensors, "
        "adapter_model.bin) (`adapter_name_or_path`)"
    )  # fmt: skip
    assert on.problem(HostPath(key, f"{t}/none", MODEL)) == (
        "error", f"ws1 has no {t}/none (`model_name_or_path`; not on this laptop either)"
    )  # fmt: skip
    assert on.problem(HostPath(key, f"{t}/f", MODEL)) == (
        "error", f"ws1: {t}/f (`model_name_or_path`) is a file, not a folder"
    )  # fmt: skip

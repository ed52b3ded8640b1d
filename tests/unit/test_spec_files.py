"""Files a spec's keys point at: refused when missing (file:line), listed for upload, rewritten for the host;
export configs told apart from training configs."""

from __future__ import annotations

from pathlib import Path

from radeonlab.jobs.spec.checks import check_path
from radeonlab.jobs.spec.files import LocalFile, file_problems, host_values, local_files
from radeonlab.jobs.spec.kinds import EXPORT, INFERENCE, TRAIN, export_problems, kind
from radeonlab.jobs.spec.load import load
from radeonlab.jobs.spec.problems import ERROR, INFO

HERE = Path(__file__).parents[1]
EXAMPLES = HERE / "fixtures" / "llamafactory-v0.9.5" / "examples"


def spec(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text("model_name_or_path: m\ndo_train: false\n" + body)  # trains nothing: no dataset needed
    return path


def test_deepspeed_file_found_listed_and_rewritten(tmp_path: Path) -> None:
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "z2.json").write_text('{"zero_optimization": {"stage": 2}}')
    loaded = load(spec(tmp_path, "deepspeed: ds/z2.json\n"))
    assert file_problems(loaded) == []
    assert local_files(loaded) == [
        LocalFile("deepspeed", (tmp_path / "ds/z2.json").resolve(), "inputs/deepspeed/z2.json")
    ]
    assert host_values(loaded, "/home/lab/jobs/j1") == {
        "deepspeed": "/home/lab/jobs/j1/inputs/deepspeed/z2.json"
    }


def test_missing_deepspeed_file_refused_with_line(tmp_path: Path) -> None:
    problems = check_path(spec(tmp_path, "learning_rate: 1.0e-4\ndeepspeed: ds/z3.json\n"))
    errors = [p for p in problems if p.severity == ERROR]
    assert [(p.line, p.file) for p in errors] == [(4, str(tmp_path / "job.yaml"))]
    assert "`deepspeed: ds/z3.json`: not found" in errors[0].message


def test_llamafactory_root_relative_path_gets_the_spec_relative_fix(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "examples/deepspeed").mkdir(parents=True)
    (tmp_path / "examples/deepspeed/ds_z3_config.json").write_text("{}")
    (tmp_path / "examples/train_lora").mkdir()
    path = tmp_path / "examples/train_lora/x.yaml"
    path.write_text(
        "model_name_or_path: m\ndo_train: true\ndeepspeed: examples/deepspeed/ds_z3_config.json\n"
    )
    monkeypatch.chdir(tmp_path)  # where LLaMA-Factory's own examples are run from
    problems = file_problems(load(path))
    assert len(problems) == 1 and problems[0].fix == "deepspeed: ../deepspeed/ds_z3_config.json"


def test_inline_deepspeed_dict_and_hub_adapters_need_no_files(tmp_path: Path) -> None:
    loaded = load(
        spec(tmp_path, "deepspeed: {zero_optimization: {stage: 0}}\nadapter_name_or_path: org/adapter\n")
    )
    assert file_problems(loaded) == [] and local_files(loaded) == [] and host_values(loaded, "/j") == {}


def test_adapter_folders_uploaded_file_by_file(tmp_path: Path) -> None:
    for name in ("a1", "a2"):
        (tmp_path / "runs" / name / "sub").mkdir(parents=True)
        (tmp_path / "runs" / name / "adapter_model.safetensors").write_bytes(b"x")
        (tmp_path / "runs" / name / "sub" / "extra.json").write_text("{}")
    loaded = load(spec(tmp_path, "adapter_name_or_path: runs/a1, runs/a2,org/hub-adapter\n"))
    assert file_problems(loaded) == []
    remote = [f.remote for f in local_files(loaded)]
    assert remote == [
        "inputs/adapter_name_or_path/a1/adapter_model.safetensors",
        "inputs/adapter_name_or_path/a1/sub/extra.json",
        "inputs/adapter_name_or_path/a2/adapter_model.safetensors",
        "inputs/adapter_name_or_path/a2/sub/extra.json",
    ]
    inputs = "/j/inputs/adapter_name_or_path"
    assert host_values(loaded, "/j") == {"adapter_name_or_path": f"{inputs}/a1,{inputs}/a2,org/hub-adapter"}


def test_path_like_adapter_that_is_missing_is_refused(tmp_path: Path) -> None:
    problems = file_problems(load(spec(tmp_path, "adapter_name_or_path: saves/qwen3-4b/lora/sft\n")))
    assert len(problems) == 1 and problems[0].line == 3 and "not found" in problems[0].message


def test_tokenized_path_is_input_when_present_output_when_not(tmp_path: Path) -> None:
    loaded = load(spec(tmp_path, "tokenized_path: tok\n"))
    assert file_problems(loaded) == [] and local_files(loaded) == []
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "dataset_dict.json").write_text("{}")
    loaded = load(spec(tmp_path, "tokenized_path: tok\n"))
    assert [f.remote for f in local_files(loaded)] == ["inputs/tokenized_path/tok/dataset_dict.json"]


def test_file_where_a_folder_belongs(tmp_path: Path) -> None:
    (tmp_path / "media").write_text("x")
    problems = file_problems(load(spec(tmp_path, "media_dir: media\n")))
    assert len(problems) == 1 and "is a file" in problems[0].message


def test_export_config_info_for_check_error_for_submit() -> None:
    merge = load(EXAMPLES / "merge_lora/qwen3_lora_sft.yaml")
    assert kind(merge) == EXPORT
    info = export_problems(merge, submitting=False)
    refuse = export_problems(merge, submitting=True)
    assert [p.severity for p in info] == [INFO] and [p.severity for p in refuse] == [ERROR]
    assert refuse[0].line == 10 and "radeonlab export" in (refuse[0].fix or "")
    assert kind(load(EXAMPLES / "train_lora/qwen3_lora_sft.yaml")) == TRAIN
    assert export_problems(load(EXAMPLES / "train_lora/qwen3_lora_sft.yaml"), submitting=True) == []
    assert kind(load(EXAMPLES / "inference/qwen3.yaml")) == INFERENCE

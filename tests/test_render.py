"""render(): precision per card, refusals, remote paths and dataset_info, on CONTRACTS.md host records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from radeonlab.jobs.plan.render import CPU_NOTE, RenderError, local_model_dir, render
from radeonlab.jobs.spec.load import parse_text

from radeonlab.contract.records import JobPaths

JOB = "demo-20250101-120000-beef"
PATHS = JobPaths.for_job("/home/lab/radeonlab/jobs", JOB)

SPEC_TEXT = """\
model_name_or_path: tiny-llama
stage: sft
do_train: true
finetuning_type: lora
dataset_dir: data
template: default
output_dir: output
overwrite_output_dir: true
learning_rate: 5.0e-3
max_steps: 40
radeonlab:
  datasets:
    - data/demo.jsonl
    - {file: data/chat.json, name: chat, formatting: sharegpt, columns: {messages: conversations}}
"""

GPUS: dict[str, dict[str, Any]] = {
    "7900xtx": {
        "index": 0,
        "node": 1,
        "gfx": "gfx1100",
        "name": "Radeon RX 7900 XTX",
        "family": "RDNA3",
        "vram_total": 25753026560,
        "vram_used": 123,
        "bf16": True,
        "override": None,
        "igpu": False,
    },
    "6700xt": {
        "index": 0,
        "node": 1,
        "gfx": "gfx1031",
        "name": "Radeon RX 6700 XT",
        "family": "RDNA2",
        "vram_total": 12868124672,
        "vram_used": 0,
        "bf16": False,
        "override": "10.3.0",
        "igpu": False,
    },
    "9070xt": {
        "index": 0,
        "node": 1,
        "gfx": "gfx1201",
        "name": "Radeon RX 9070 XT",
        "family": "RDNA4",
        "vram_total": 17095983104,
        "vram_used": 0,
        "bf16": True,
        "override": None,
        "igpu": False,
    },
}


def host_record(name: str, gpus: list[dict[str, Any]], simulated: bool = False) -> dict[str, Any]:
    """A host record shaped as CONTRACTS.md says (schema 1)."""
    return {
        "schema": 1,
        "host": name,
        "written_at": "2025-01-01T00:00:00Z",
        "radeonlab_version": "0.1.0",
        "user": "lab",
        "home": "/home/lab",
        "venv": "/home/lab/radeonlab/venv",
        "jobs_dir": "/home/lab/radeonlab/jobs",
        "cpu_only": False,
        "rocm": {"stream": "legacy", "version": "7.2.4", "installed": None if simulated else "7.2.4-1"},
        "torch": {
            "version": "2.13.0+cpu" if simulated else "2.9.1+rocm7.2",
            "hip": None if simulated else "7.2.1",
            "cuda_available": not simulated,
            "simulated_cpu_build": simulated,
        },
        "llamafactory_version": "0.9.5",
        "gpus": gpus,
    }


def spec(extra: str = "") -> Any:
    return parse_text(SPEC_TEXT + extra, Path("/laptop/proj/job.yaml"))


def test_7900xtx_gets_bf16_and_remote_paths() -> None:
    out = render(spec(), host_record("ws1", [GPUS["7900xtx"]]), PATHS, job_id=JOB, model_local=True)
    cfg = out.config
    assert out.precision == "bf16" and cfg["bf16"] is True and "fp16" not in cfg
    assert cfg["dataset_dir"] == f"/home/lab/radeonlab/jobs/{JOB}/data"
    assert cfg["model_name_or_path"] == f"/home/lab/radeonlab/jobs/{JOB}/model"
    assert cfg["output_dir"] == f"/home/lab/radeonlab/jobs/{JOB}/output"
    assert cfg["logging_nan_inf_filter"] is False and cfg["overwrite_output_dir"] is False
    assert cfg["plot_loss"] is True and cfg["report_to"] == "none" and cfg["dataset"] == "demo,chat"
    assert cfg["learning_rate"] == 0.005 and "radeonlab" not in cfg
    assert yaml.safe_load(out.yaml_text) == cfg  # the header is only comments
    head = out.yaml_text.splitlines()[:3]
    assert JOB in head[0] and "ws1" in head[0] and "Radeon RX 7900 XTX (gfx1100, RDNA3)" in head[0]
    assert head[1] == "# bf16: every GPU this job uses has bf16"
    assert "overwrite_output_dir: True -> False" in out.yaml_text


def test_dataset_info_from_block_and_base() -> None:
    base = {"alpaca_en": {"hf_hub_url": "llamafactory/alpaca_en"}}
    out = render(spec(), host_record("ws1", [GPUS["7900xtx"]]), PATHS, base_dataset_info=base)
    assert out.dataset_info == {
        "alpaca_en": {"hf_hub_url": "llamafactory/alpaca_en"},
        "demo": {"file_name": "demo.jsonl", "formatting": "alpaca"},
        "chat": {
            "file_name": "chat.json",
            "formatting": "sharegpt",
            "columns": {"messages": "conversations"},
        },
    }
    assert '"file_name": "chat.json"' in out.dataset_info_text


def test_hub_model_keeps_its_id() -> None:
    out = render(spec(), host_record("ws1", [GPUS["7900xtx"]]), PATHS, model_local=False)
    assert out.config["model_name_or_path"] == "tiny-llama"


def test_6700xt_falls_back_to_fp16() -> None:
    out = render(spec(), host_record("ws2", [GPUS["6700xt"]]), PATHS, job_id=JOB)
    assert out.precision == "fp16" and out.config["fp16"] is True and "bf16" not in out.config
    assert "# fp16: GPU 0 Radeon RX 6700 XT (gfx1031, RDNA2) has no bf16" in out.yaml_text


@pytest.mark.parametrize("key", ["bf16", "pure_bf16"])
def test_forcing_bf16_on_rdna2_is_refused_naming_the_card(key: str) -> None:
    with pytest.raises(RenderError) as err:
        render(spec(f"{key}: true\n"), host_record("ws2", [GPUS["6700xt"]]), PATHS)
    msg = str(err.value)
    assert "\n" not in msg and "bf16 refused" in msg and "Radeon RX 6700 XT (gfx1031, RDNA2)" in msg


def test_9070xt_bf16_and_spec_fp16_choice_kept() -> None:
    host = host_record("ws3", [GPUS["9070xt"]])
    assert render(spec(), host, PATHS).precision == "bf16"
    out = render(spec("fp16: true\nbf16: false\n"), host, PATHS)
    assert out.precision == "fp16" and out.config["fp16"] is True and "bf16" not in out.config


def test_mixed_cards_use_fp16_when_one_lacks_bf16() -> None:
    second = {**GPUS["6700xt"], "index": 1, "node": 2}
    host = host_record("ws4", [GPUS["7900xtx"], second])
    assert render(spec(), host, PATHS, gpus=[0]).precision == "bf16"
    assert render(spec(), host, PATHS, gpus=[0, 1]).precision == "fp16"
    with pytest.raises(RenderError, match="no GPU index 7"):
        render(spec(), host, PATHS, gpus=[7])


def test_default_gpu_skips_the_igpu() -> None:
    igpu = {
        "index": 0,
        "node": 1,
        "gfx": "gfx1036",
        "name": "AMD Radeon Graphics",
        "family": "RDNA2",
        "bf16": False,
        "igpu": True,
    }
    host = host_record("ws5", [igpu, {**GPUS["7900xtx"], "index": 1}])
    assert render(spec(), host, PATHS).precision == "bf16"


def test_simulated_cpu_host_drops_precision_flags_and_says_so() -> None:
    host = host_record("sandbox1", [GPUS["7900xtx"]], simulated=True)
    out = render(spec("bf16: true\nfp16: true\n"), host, PATHS, job_id=JOB)
    assert out.precision == "fp32"
    assert not {"bf16", "fp16", "pure_bf16"} & set(out.config)
    assert f"# {CPU_NOTE}" in out.yaml_text.splitlines()


def test_local_model_dir_reads_the_filesystem(tmp_path: Path) -> None:
    (tmp_path / "tiny-llama").mkdir()
    s = parse_text(SPEC_TEXT, tmp_path / "job.yaml")
    assert local_model_dir(s) == str(tmp_path / "tiny-llama")
    hub = parse_text(SPEC_TEXT.replace("tiny-llama", "meta-llama/Llama-3-8B"), tmp_path / "job.yaml")
    assert local_model_dir(hub) is None

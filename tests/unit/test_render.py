"""render(): precision per card, refusals, remote paths and dataset_info, on contract host records (schema 2)
of the simulated cards (tests/support/laptop_doubles.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from radeonlab.contract.jobdir import JobDir
from radeonlab.errors import RenderError
from radeonlab.jobs.plan.render import CPU_TORCH_NOTE, local_model_dir, render
from radeonlab.jobs.spec.load import parse_text
from tests.support.laptop_doubles import gpu, host_record

JOB = "demo-20250101-120000-beef"
PATHS = JobDir.of("/home/lab/radeonlab/jobs", JOB)

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

GPUS = {"7900xtx": gpu("rx7900xtx"), "6700xt": gpu("rx6700xt"), "9070xt": gpu("rx9070xt")}


def spec(extra: str = "") -> Any:
    return parse_text(SPEC_TEXT + extra, Path("/laptop/proj/job.yaml"))


def test_7900xtx_gets_bf16_and_remote_paths() -> None:
    out = render(spec(), host_record("ws1", [GPUS["7900xtx"]]), PATHS, model_local=True)
    cfg = out.config
    assert out.precision == "bf16" and cfg["bf16"] is True and "fp16" not in cfg
    assert cfg["dataset_dir"] == f"/home/lab/radeonlab/jobs/{JOB}/data"
    assert cfg["model_name_or_path"] == f"/home/lab/radeonlab/jobs/{JOB}/model"
    assert cfg["output_dir"] == f"/home/lab/radeonlab/jobs/{JOB}/output"
    assert cfg["logging_nan_inf_filter"] is False and cfg["overwrite_output_dir"] is False
    assert cfg["plot_loss"] is True and cfg["report_to"] == "none" and cfg["dataset"] == "demo,chat"
    assert cfg["include_num_input_tokens_seen"] is True  # tokens/s in trainer_log.jsonl (watch)
    assert cfg["learning_rate"] == 0.005 and "radeonlab" not in cfg
    assert yaml.safe_load(out.yaml_text) == cfg  # the header is only comments
    head = out.yaml_text.splitlines()[:3]
    assert JOB in head[0] and "ws1" in head[0] and "AMD Radeon RX 7900 XTX (gfx1100, RDNA3)" in head[0]
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
    assert "model_name_or_path" not in out.changes


def test_6700xt_falls_back_to_fp16() -> None:
    out = render(spec(), host_record("ws2", [GPUS["6700xt"]]), PATHS)
    assert out.precision == "fp16" and out.config["fp16"] is True and "bf16" not in out.config
    assert "# fp16: GPU 0 AMD Radeon RX 6700 XT (gfx1031, RDNA2) has no bf16" in out.yaml_text


@pytest.mark.parametrize("key", ["bf16", "pure_bf16"])
def test_forcing_bf16_on_rdna2_is_refused_naming_the_card(key: str) -> None:
    with pytest.raises(RenderError) as err:
        render(spec(f"{key}: true\n"), host_record("ws2", [GPUS["6700xt"]]), PATHS)
    msg = str(err.value)
    assert "\n" not in msg and "bf16 refused" in msg and "AMD Radeon RX 6700 XT (gfx1031, RDNA2)" in msg


def test_9070xt_bf16_and_spec_fp16_choice_kept() -> None:
    host = host_record("ws3", [GPUS["9070xt"]])
    assert render(spec(), host, PATHS).precision == "bf16"
    out = render(spec("fp16: true\nbf16: false\n"), host, PATHS)
    assert out.precision == "fp16" and out.config["fp16"] is True and "bf16" not in out.config


def test_mixed_cards_use_fp16_when_one_lacks_bf16() -> None:
    host = host_record("ws4", [GPUS["7900xtx"], gpu("rx6700xt", index=1, node=2)])
    assert render(spec(), host, PATHS, gpus=host.training_gpus([0])).precision == "bf16"
    assert render(spec(), host, PATHS, gpus=host.training_gpus([0, 1])).precision == "fp16"
    with pytest.raises(ValueError, match=r"host ws4 has no GPU index 7 \(it has \[0, 1\]\)"):
        host.training_gpus([7])


def test_default_gpu_skips_the_igpu() -> None:
    igpu = gpu("rx6700xt", gfx="gfx1036", name="AMD Radeon Graphics", bf16=False, igpu=True)
    host = host_record("ws5", [igpu, gpu("rx7900xtx", index=1, node=2)])
    assert [g.index for g in host.training_gpus()] == [1]
    assert render(spec(), host, PATHS).precision == "bf16"


def test_simulated_cpu_host_drops_precision_flags_and_says_so() -> None:
    host = host_record("sandbox1", [GPUS["7900xtx"]], cpu_torch=True)
    out = render(spec("bf16: true\nfp16: true\n"), host, PATHS)
    assert out.precision == "fp32"
    assert not {"bf16", "fp16", "pure_bf16"} & set(out.config)
    assert f"# {CPU_TORCH_NOTE}" in out.yaml_text.splitlines()
    assert out.changes["bf16"] == (True, None, CPU_TORCH_NOTE)  # the diff says the flag was removed


def test_a_cpu_torch_the_deploy_did_not_allow_is_refused() -> None:
    """A CPU build of torch on a host with a card (a wrong wheel) would train on the CPU without a word."""
    host = host_record("ws6", [GPUS["7900xtx"]], cpu_torch=True)
    host.torch.cpu_allowed = False
    with pytest.raises(RenderError, match="python_stack_allow_cpu_torch: true") as err:
        render(spec(), host, PATHS)
    assert str(err.value).startswith("ws6: torch there is a CPU build (2.13.0+cpu)")


def test_local_model_dir_reads_the_filesystem(tmp_path: Path) -> None:
    (tmp_path / "tiny-llama").mkdir()
    s = parse_text(SPEC_TEXT, tmp_path / "job.yaml")
    assert local_model_dir(s) == str(tmp_path / "tiny-llama")
    hub = parse_text(SPEC_TEXT.replace("tiny-llama", "meta-llama/Llama-3-8B"), tmp_path / "job.yaml")
    assert local_model_dir(hub) is None

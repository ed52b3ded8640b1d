"""The demo's tiny model and data: deterministic, loadable, and a real LLaMA-Factory LoRA run learns."""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from radeonlab.sandbox import demodata, tinymodel, wheels
from tests.e2e.test_wheels import cached_stack_venv

DEMO_SPEC = Path(__file__).resolve().parents[2] / "src/radeonlab/jobs/examples/demo.yaml"
# Keys of the demo spec that hold paths relative to the spec file.
PATH_KEYS = ("model_name_or_path", "dataset_dir", "output_dir")
MIN_LOSS_DROP = 0.5  # the last losses must be at most half the first


@pytest.fixture(scope="module")
def assets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo data and tiny model, laid out beside where the spec expects them."""
    base = tmp_path_factory.mktemp("demo")
    data = demodata.write_dataset(base / "data")
    tinymodel.build_model(base / "tiny-llama", data)
    return base


def test_dataset_is_deterministic_alpaca(tmp_path: Path) -> None:
    a = demodata.write_dataset(tmp_path / "a").read_bytes()
    b = demodata.write_dataset(tmp_path / "b").read_bytes()
    assert a == b
    rows = [json.loads(line) for line in a.decode().splitlines()]
    assert len(rows) == demodata.ROWS
    assert all(r["output"] == r["input"].upper() and r["input"] in demodata.WORDS for r in rows)
    info = json.loads((tmp_path / "a" / "dataset_info.json").read_text())
    assert info[demodata.DATASET_NAME]["file_name"] == demodata.FILE_NAME


def test_model_is_byte_identical_when_rebuilt(assets: Path, tmp_path: Path) -> None:
    again = tinymodel.build_model(tmp_path / "again", assets / "data" / demodata.FILE_NAME)
    first = {p.name: p.read_bytes() for p in (assets / "tiny-llama").iterdir()}
    second = {p.name: p.read_bytes() for p in again.iterdir()}
    assert "model.safetensors" in first and first == second


def test_model_loads_with_transformers(assets: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(assets / "tiny-llama")
    for key, value in tinymodel.MODEL_CONFIG.items():
        assert getattr(model.config, key) == value
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert model.config.model_type == "llama"


def test_tokenizer_round_trips_a_prompt(assets: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(assets / "tiny-llama")
    prompt = "Human: Uppercase the word.\nwalnut</s>\nAssistant:WALNUT</s>\n"
    enc = tok(prompt)
    assert set(enc) == {"input_ids", "attention_mask"}  # no token_type_ids: generate() would reject them
    assert tok.unk_token_id not in enc["input_ids"]
    assert tok.decode(enc["input_ids"]) == prompt
    assert len(tok) <= tinymodel.MODEL_CONFIG["vocab_size"]  # type: ignore[operator]
    chat = tok.apply_chat_template(
        [{"role": "user", "content": "Uppercase the word.\nwalnut"}], tokenize=False
    )
    assert chat == "Human: Uppercase the word.\nwalnut</s>\nAssistant:"


def render_demo(spec: Path, base: Path, output_dir: Path) -> Path:
    """The demo spec with its relative paths resolved against `base` and output sent to `output_dir`."""
    cfg = yaml.safe_load(spec.read_text())
    assert "radeonlab" not in cfg or isinstance(cfg["radeonlab"], dict)
    cfg.pop("radeonlab", None)
    for key in PATH_KEYS:
        cfg[key] = str(base / cfg[key])
    cfg["output_dir"] = str(output_dir)
    rendered = output_dir.parent / "train.yaml"
    rendered.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return rendered


@pytest.mark.slow
def test_lora_training_on_the_demo_learns(assets: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    venv = cached_stack_venv()
    out = tmp_path / "output"
    rendered = render_demo(DEMO_SPEC, assets, out)
    env = wheels.isolated_pip_env()
    env.update(
        HF_HOME=str(tmp_path / "hf_home"),
        MPLCONFIGDIR=str(tmp_path / "mpl"),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}",
    )
    start = time.monotonic()
    proc = subprocess.run([str(venv / "bin" / "llamafactory-cli"), "train", str(rendered)], cwd=tmp_path,
                          env=env, capture_output=True, text=True)  # fmt: skip
    seconds = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr[-4000:]

    logs = [json.loads(line) for line in (out / "trainer_log.jsonl").read_text().splitlines()]
    losses = [entry["loss"] for entry in logs if "loss" in entry]
    spec_steps = yaml.safe_load(DEMO_SPEC.read_text())["max_steps"]
    assert len(losses) == spec_steps and all(math.isfinite(x) for x in losses)
    tail = sum(losses[-5:]) / 5
    print(f"train {seconds:.1f} s wall: loss {losses[0]:.4f} -> {losses[-1]:.4f} (mean of last 5 {tail:.4f})")
    assert tail <= (1 - MIN_LOSS_DROP) * losses[0]

    adapter = load_file(str(out / "adapter_model.safetensors"))
    lora_b = {k: v for k, v in adapter.items() if "lora_B" in k}
    assert lora_b, "no lora_B tensors in the adapter"
    # lora_B starts at zero, so a non-zero lora_B is proof the adapter trained.
    assert all(v.abs().sum().item() > 0 for v in lora_b.values())

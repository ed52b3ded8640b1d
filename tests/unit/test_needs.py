"""needs(spec) -> what the host must have; missing(needs, installed) -> refusals with the extras fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from radeonlab.cli import main
from radeonlab.jobs.spec import needs as needs_module
from radeonlab.jobs.spec.checks import check_path
from radeonlab.jobs.spec.load import load
from radeonlab.jobs.spec.needs import BNB_ROCM_MIN, base_stack, missing, needs, normalize
from radeonlab.jobs.spec.problems import ERROR, INFO, WARNING
from radeonlab.roles.python_stack.defaults import DEFAULTS


def spec(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text("model_name_or_path: m\ndo_train: false\n" + body)  # trains nothing: no dataset needed
    return path


def dists(tmp_path: Path, body: str) -> list[tuple[str, int, str, str | None]]:
    return [(n.key, n.line, n.distribution, n.min_version) for n in needs(load(spec(tmp_path, body)))]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("report_to: wandb\n", [("report_to", 3, "wandb", None)]),
        (
            "report_to: [tensorboard, mlflow]\n",
            [("report_to", 3, "tensorboard", None), ("report_to", 3, "mlflow", None)],
        ),
        ("report_to: none\n", []),
        ("deepspeed: ds.json\n", [("deepspeed", 3, "deepspeed", "0.9.3")]),
        ("quantization_bit: 4\n", [("quantization_bit", 3, "bitsandbytes", BNB_ROCM_MIN)]),
        ("quantization_bit: 8\nquantization_method: hqq\n", [("quantization_bit", 3, "hqq", None)]),
        ("use_galore: true\n", [("use_galore", 3, "galore-torch", None)]),
        ("use_apollo: true\n", [("use_apollo", 3, "apollo-torch", None)]),
        ("use_badam: true\n", [("use_badam", 3, "badam", "1.2.1")]),
        ("use_adam_mini: true\n", [("use_adam_mini", 3, "adam-mini", None)]),
        ("enable_liger_kernel: true\n", [("enable_liger_kernel", 3, "liger-kernel", None)]),
        ("use_unsloth: true\n", [("use_unsloth", 3, "unsloth", None)]),
        ("flash_attn: fa2\n", [("flash_attn", 3, "flash-attn", None)]),
        ("flash_attn: sdpa\n", []),
        ("optim: paged_adamw_8bit\n", [("optim", 3, "bitsandbytes", BNB_ROCM_MIN)]),
        ("fp8: true\n", [("fp8", 3, "torchao", None)]),
        ("fp8: true\nfp8_backend: te\n", [("fp8", 3, "transformer-engine", None)]),
        (
            "radeonlab:\n  env: {USE_RAY: 1}\n",
            [("radeonlab.env.USE_RAY", 4, "ray", None)],
        ),
        ("use_galore: false\n", []),
    ],
)
def test_needs_table(tmp_path: Path, body: str, expected: list) -> None:
    assert dists(tmp_path, body) == expected


def test_missing_names_the_extra_and_the_line(tmp_path: Path) -> None:
    found = needs(load(spec(tmp_path, "report_to: wandb\nquantization_bit: 4\n")))
    stack = {"torch": "2.13.0+rocm7.2", "transformers": "4.57.6", "bitsandbytes": "0.49.2"}
    problems = missing(found, stack)
    assert [(p.line, p.severity) for p in problems] == [(3, ERROR), (4, ERROR)]
    assert "needs wandb, which the host's venv lacks" in problems[0].message
    assert problems[0].fix is not None and problems[0].fix.startswith("python_stack_extras: [wandb]")
    assert "re-run deploy/setup.py" in problems[0].fix
    assert f"bitsandbytes>={BNB_ROCM_MIN}, the host's venv has 0.49.2" in problems[1].message
    assert missing(found, {"WandB": "0.31.0", "bitsandbytes": "0.50.2"}) == []


def test_fixes_for_what_radeonlab_does_not_pin(tmp_path: Path) -> None:
    found = needs(load(spec(tmp_path, "flash_attn: fa2\ninfer_backend: vllm\n")))
    fixes = [p.fix or "" for p in missing(found, {})]
    assert fixes[0].startswith("flash_attn: sdpa") and "infer_backend: huggingface" in fixes[1]


def test_every_pinned_extra_is_a_distribution_some_rule_needs() -> None:
    pinned = {normalize(n) for n in DEFAULTS["python_stack_extras_versions"]}  # type: ignore[union-attr]
    needed = {normalize(r.dist) for r in needs_module.RULES}
    assert pinned <= needed
    assert DEFAULTS["python_stack_extras_versions"]["bitsandbytes"] >= BNB_ROCM_MIN  # type: ignore[index]
    # pinned extras never re-pin the stack itself
    assert not pinned & set(base_stack())


def test_base_stack_needs_are_not_listed_by_check(tmp_path: Path) -> None:
    path = spec(tmp_path, "plot_loss: true\nreport_to: tensorboard\n")
    result = CliRunner().invoke(main, ["check", str(path), "--json", "--no-hub"])
    assert result.exit_code == 0
    infos = [p for p in json.loads(result.output) if p["severity"] == INFO]
    assert len(infos) == 1 and "needs tensorboard on the host" in infos[0]["message"]
    assert infos[0]["line"] == 4 and infos[0]["fix"].startswith("python_stack_extras: [tensorboard]")


def test_key_problems(tmp_path: Path) -> None:
    found = check_path(spec(tmp_path, "flash_attn: fa3\nray_num_workers: 4\nfp8: true\n"))
    problems = [p for p in found if "none of do_train" not in p.message]  # the header's do_train: false
    got = [(p.line, p.severity) for p in problems]
    assert got == [(3, ERROR), (4, WARNING), (5, WARNING)]
    assert problems[0].fix is not None and problems[0].fix.startswith("flash_attn: sdpa")
    with_ray = spec(tmp_path, "ray_num_workers: 4\nradeonlab:\n  env: {USE_RAY: 1}\n")
    assert [p for p in check_path(with_ray) if "none of do_train" not in p.message] == []


def test_needs_of_a_rendered_config_mapping_and_env() -> None:
    found = needs({"report_to": ["wandb"], "plot_loss": True}, env={"USE_RAY": "true"})
    assert [(n.key, n.line, n.distribution) for n in found] == [
        ("report_to", 1, "wandb"),
        ("radeonlab.env.USE_RAY", 1, "ray"),
        ("plot_loss", 1, "matplotlib"),
    ]
    assert missing(found, {**base_stack(), "wandb": "0.31.0", "ray": "2.60.0"}) == []


def test_prequantized_checkpoints_by_name(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("model_name_or_path: TechxGenus/Meta-Llama-3-8B-Instruct-GPTQ\ndo_train: true\n")
    found = needs(load(path))
    assert [(n.key, n.line, n.requirement) for n in found] == [
        ("model_name_or_path", 1, "gptqmodel>=2.0.0"),
        ("model_name_or_path", 1, "optimum>=1.24.0"),
    ]
    assert "quantization_bit: 4" in (missing(found, {})[0].fix or "")

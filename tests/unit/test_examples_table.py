"""`radeonlab check` on all 82 LLaMA-Factory 0.9.5 example configs, compared with the table in
docs/reference/needs.md.

The table is generated (tests/support/examples_table.py --write); this test recomputes every row, so a change
in what check says about an example fails here until docs/reference/needs.md is regenerated. The
assertions below pin what the verdicts must mean, independently of the generator."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import examples_table as et


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, et.Row]:
    data = et.data_dir(tmp_path_factory.mktemp("lf") / "data")
    return {e: et.row(e, data) for e in et.examples()}


@pytest.mark.parametrize("section", sorted(et.SECTIONS))
def test_readme_tables_are_the_generated_ones(section: str) -> None:
    assert et.readme_table(et.README.read_text(), section) == et.SECTIONS[section](), (
        f"docs/reference/needs.md's {section} is stale: "
        "run .venv/bin/python -m tests.support.examples_table --write"
    )


def test_all_82_examples_have_a_named_verdict(rows: dict[str, et.Row]) -> None:
    assert len(rows) == 82
    for row in rows.values():
        verdict = row.verdict.split("); ", 1)[
            -1
        ]  # after "export config (...); " / "inference config (...); "
        named = verdict.startswith(("passes", "not a training config (")) or (
            verdict.startswith("refused: ") and len(verdict) > len("refused: ") + 10
        )
        assert named, row


def test_no_false_alarm_on_plain_training_examples(rows: dict[str, et.Row]) -> None:
    # The reference LoRA examples train as they are: no error, nothing beyond the pinned stack.
    for name in ("sft", "dpo", "kto", "pretrain", "reward"):
        row = rows[f"train_lora/qwen3_lora_{name}.yaml"]
        assert (row.verdict, row.needs, row.sandbox) == ("passes", "-", "yes"), row


@pytest.mark.parametrize(
    ("example", "verdict_has", "needs_has"),
    [
        ("train_lora/qwen3_lora_sft_ds3.yaml", "`deepspeed: examples/deepspeed/ds_z3_config.json`: not found",
         "deepspeed"),
        ("extras/fp8/llama3_fp8_fsdp_sft.yaml", "fp8", "wandb"),
        ("train_qlora/qwen3_lora_sft_otfq.yaml", "passes", "bitsandbytes>=0.50.0"),
        ("extras/galore/llama3_full_sft.yaml", "passes", "galore-torch"),
        ("extras/badam/llama3_full_sft.yaml", "passes", "badam>=1.2.1"),
        ("extras/adam_mini/qwen2_full_sft.yaml", "passes", "adam-mini"),
        ("extras/apollo/llama3_full_sft.yaml", "passes", "apollo-torch"),
        ("train_lora/qwen3_lora_sft_ray.yaml", "USE_RAY", "-"),
        ("merge_lora/qwen3_full_sft.yaml", "use `radeonlab export`", "-"),
        ("extras/asft/llama2_full_asft.yaml", "dataset 'med' is not defined", "deepspeed"),
        ("ascend/qwen3_full_sft_fsdp2.yaml", "passes", "flash-attn"),
    ],
)  # fmt: skip
def test_issue_examples(rows: dict[str, et.Row], example: str, verdict_has: str, needs_has: str) -> None:
    row = rows[example]
    assert verdict_has in row.verdict and needs_has in row.needs, row
    if row.needs != "-" or row.verdict != "passes":
        assert row.sandbox.startswith("no: "), row


def test_table_names_no_path_of_this_machine() -> None:
    assert str(Path(__file__).parents[2]) not in et.table()

"""jobs/spec/lf_ranges.json against the packages it cites: the stated ranges are what the installed
transformers states, every cited line holds the cited code, and the raises the rules rest on happen."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import pytest

from radeonlab.jobs.spec import lf_args, lf_ranges, ranges

HERE = Path(__file__).parents[1]
LF_REPO = HERE / "fixtures" / "llamafactory-v0.9.5"  # LLaMA-Factory's examples, as released
RULES = lf_ranges.rules()
BOUNDS = ("ge", "gt", "le", "lt", "ne", "whole_above")


def _site_file(package: str, file: str) -> Path | None:
    """The cited file in the installed package (laptop venv), or in the lf_args generator venv."""
    if package == "LLaMA-Factory":
        return LF_REPO / file
    spec = importlib.util.find_spec(package) if package not in ("llamafactory", "datasets") else None
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations))).parent / file
    venv = lf_args.generator_venv() / "lib" / "python3.11" / "site-packages" / file
    return venv if venv.exists() else None


def _bounds(rule: dict[str, Any]) -> dict[str, float]:
    return {k: rule[k] for k in BOUNDS if k in rule}


def test_every_rule_is_well_formed() -> None:
    keys = lf_args.keys()
    assert len(RULES) >= 30
    for rule in RULES:
        assert rule["key"] in keys, rule
        assert rule["severity"] in ("error", "warning"), rule
        assert _bounds(rule) or "above_key" in rule, rule
        assert all(other in keys for other in rule.get("when", {})), rule
        assert {"package", "file", "line", "code"} <= set(rule["source"]), rule
    for rule in lf_ranges.load()["hand"]:
        assert rule["why"] and rule["fix"], rule


def test_the_stated_ranges_are_what_the_installed_transformers_states() -> None:
    """The generator's transformers part, rerun here on the installed (pinned) transformers."""
    from transformers import TrainingArguments

    keys = set(lf_args.keys())
    found = lf_ranges.stated_in_post_init(TrainingArguments, keys) + lf_ranges.stated_in_help(
        TrainingArguments, keys
    )
    stated = [r for r in lf_ranges.load()["stated"] if r["source"]["package"] == "transformers"]
    assert sorted(map(_comparable, found)) == sorted(map(_comparable, stated))
    assert {r["key"] for r in stated} >= {"warmup_ratio", "warmup_steps", "logging_steps", "save_steps"}


def _comparable(rule: dict[str, Any]) -> str:
    return json.dumps({k: rule[k] for k in ("key", "source", *BOUNDS) if k in rule}, sort_keys=True)


@pytest.mark.slow  # imports the training stack in the generator venv (~10 s)
def test_the_stated_ranges_are_what_the_pinned_llamafactory_states() -> None:
    """The whole generator, in lf_args' generator venv (skipped where it was not made)."""
    if not (lf_args.generator_venv() / "bin" / "python").exists():
        pytest.skip("no lf_args generator venv here (python -m radeonlab.jobs.spec.lf_args --make-venv)")
    assert sorted(map(_comparable, lf_ranges.regenerate())) == sorted(
        map(_comparable, lf_ranges.load()["stated"])
    )


@pytest.mark.parametrize("index", range(len(RULES)), ids=[f"{r['key']}-{r['source']['line']}" for r in RULES])
def test_every_cited_line_holds_the_cited_code(index: int) -> None:
    source = RULES[index]["source"]
    path = _site_file(source["package"], source["file"])
    if path is None:
        pytest.skip(f"{source['package']} is not installed here (the lf_args generator venv has it)")
    lines = path.read_text(encoding="utf-8").splitlines()
    assert source["code"] in lines[source["line"] - 1], (path, source)


def _raises(call: Any) -> bool:
    try:
        call()
    except ValueError:
        return True
    return False


def _rule(key: str, severity: str = "error") -> dict[str, Any]:
    return next(r for r in RULES if r["key"] == key and r["severity"] == severity and _bounds(r))


def test_transformers_refuses_what_the_rules_say(tmp_path: Path) -> None:
    from transformers import TrainingArguments

    def args(**kw: Any) -> Any:
        return lambda: TrainingArguments(output_dir=str(tmp_path), report_to="none", **kw)

    assert _rule("warmup_ratio") | {} and _bounds(_rule("warmup_ratio")) == {"ge": 0, "le": 1}
    assert (
        _raises(args(warmup_ratio=1.5))
        and _raises(args(warmup_ratio=-0.1))
        and not _raises(args(warmup_ratio=1))
    )
    assert _bounds(_rule("warmup_steps")) == {"ge": 0}
    assert _raises(args(warmup_steps=-1)) and not _raises(args(warmup_steps=0))
    assert (
        _raises(args(logging_steps=0))
        and _raises(args(logging_steps=2.5))
        and not _raises(args(logging_steps=0.5))
    )
    assert _raises(args(torch_empty_cache_steps=0)) and not _raises(args(torch_empty_cache_steps=1))


def test_torch_and_peft_refuse_what_the_rules_say() -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from torch.utils.data import BatchSampler, DataLoader

    params = [torch.nn.Parameter(torch.zeros(1))]
    assert _bounds(_rule("per_device_train_batch_size")) == {"ge": 1}
    assert _raises(lambda: BatchSampler(range(3), batch_size=0, drop_last=False))
    assert _bounds(_rule("learning_rate")) == {"ge": 0} and _bounds(_rule("learning_rate", "warning")) == {
        "le": 1
    }
    assert _raises(lambda: torch.optim.AdamW(params, lr=-1e-4)) and _raises(
        lambda: torch.optim.AdamW(params, lr=math.nan)
    )
    assert not _raises(lambda: torch.optim.AdamW(params, lr=1e30))  # legal: the rule is a warning
    assert _raises(lambda: torch.optim.AdamW(params, betas=(1.0, 0.999)))
    assert _raises(lambda: torch.optim.AdamW(params, eps=-1.0))
    assert _raises(lambda: torch.optim.AdamW(params, weight_decay=-0.1))
    assert _raises(lambda: DataLoader(range(3), num_workers=-1))
    assert _bounds(_rule("lora_dropout")) == {"ge": 0, "le": 1}
    assert _raises(lambda: torch.nn.Dropout(p=1.5)) and not _raises(lambda: torch.nn.Dropout(p=1.0))

    def lora(r: int) -> Any:
        model = torch.nn.Sequential(torch.nn.Linear(4, 4))
        return lambda: get_peft_model(model, LoraConfig(r=r, target_modules=["0"]))

    assert _bounds(_rule("lora_rank")) == {"ge": 1}
    assert _raises(lora(0)) and not _raises(lora(1))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"ge": 0, "le": 1}, "between 0 and 1"),
        ({"ge": 1}, ">= 1"),
        ({"ge": 0, "whole_above": 1}, ">= 0, and a whole number above 1 (below it: a fraction of the run)"),
        ({"ne": 0}, "other than 0"),
    ],
)
def test_ranges_are_said_in_words(value: dict[str, Any], expected: str) -> None:
    assert ranges.describe(value) == expected

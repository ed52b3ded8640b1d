"""The committed LLaMA-Factory key list: its content, and (slow) that it matches the pinned package."""

from __future__ import annotations

import pytest

from radeonlab.jobs.spec import lf_args
from radeonlab.roles.python_stack.defaults import DEFAULTS


def test_generated_from_the_pinned_versions() -> None:
    versions = lf_args.load()["versions"]
    pins = lf_args.pinned_versions()
    assert versions["llamafactory"] == DEFAULTS["llamafactory_version"]
    assert versions["transformers"] == pins["transformers"]
    assert versions["torch"].endswith("+cpu")  # the generator's CPU torch: the keys do not depend on it


def test_key_list_matches_the_recipe_measurement() -> None:
    keys = lf_args.keys()
    # docs/notes/llamafactory-cpu-recipe.md section 4: 365 keys with transformers 4.57.6, none of the seed's
    # invalid ones
    assert len(keys) == 365
    assert "compute_type" not in keys and "disable_flash_attn" not in keys
    assert keys["bf16"]["types"] == ["bool"]
    assert keys["learning_rate"]["types"] == ["float"]


@pytest.mark.parametrize("key", lf_args.REQUIRED_CHOICES)
def test_required_choices_present(key: str) -> None:
    assert lf_args.choices(key)


def test_choice_values() -> None:
    assert lf_args.choices("flash_attn") == ["auto", "disabled", "sdpa", "fa2", "fa3"]
    assert "pytorch" not in lf_args.choices("ddp_backend")
    assert {"nccl", "gloo"} <= set(lf_args.choices("ddp_backend"))
    assert {"adamw_torch", "adamw_torch_fused"} <= set(lf_args.choices("optim"))
    assert "cosine" in lf_args.choices("lr_scheduler_type")
    assert set(lf_args.choices("stage")) == {"pt", "sft", "rm", "ppo", "dpo", "kto"}
    assert {"llama3", "qwen3_nothink", "default"} <= set(lf_args.choices("template"))


@pytest.mark.slow
def test_committed_list_matches_the_real_package() -> None:
    """Regenerate from llamafactory in the generator venv; any drift means jobs/spec/lf_args.json is stale."""
    if not (lf_args.generator_venv() / "bin" / "llamafactory-cli").exists():
        lf_args.make_venv()  # cached under the sandbox cache dir: built once per machine (~1.5 min)
    fresh = lf_args.regenerate()
    committed = lf_args.load()
    assert fresh["versions"] == committed["versions"]
    drift = sorted(set(fresh["keys"]) ^ set(committed["keys"]))
    assert not drift, f"keys added/removed: {drift}; run python -m radeonlab.jobs.spec.lf_args --regenerate"
    changed = sorted(k for k in fresh["keys"] if fresh["keys"][k] != committed["keys"][k])
    assert not changed, f"keys changed: {changed}; run python -m radeonlab.jobs.spec.lf_args --regenerate"

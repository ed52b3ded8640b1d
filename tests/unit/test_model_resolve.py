"""The laptop's model resolver (jobs/spec/hub.py) against the SIMULATED Hub with the pinned client: every
refusal has its own answer and one line, a Hub model resolves to a commit with files, sizes and config.json
(cached on the laptop by repo and sha), and an unreachable Hub is told apart from a bad spec."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from radeonlab.jobs.plan.estimate import GIB, estimate, fits
from radeonlab.jobs.spec.hub import Answer, ModelAnswer, Token, laptop_token, resolve_model
from radeonlab.sandbox import hub as sandbox_hub
from radeonlab.sandbox.hubcatalog import (
    DEMO_DATASET,
    FIRST_TAG,
    LLAMA3_8B,
    TINY_GATED,
    TINY_PUBLIC,
    TOKEN_DENIED,
    TOKEN_GRANTED,
)
from tests.support.hubkit import catalog, tiny_assets
from tests.unit.test_estimate import CARD_24GB, LORA_BF16
from tests.unit.test_estimate import LLAMA3_8B as README_LLAMA3_8B

REPO = Path(__file__).resolve().parents[2]
TOKENS = (TOKEN_GRANTED, TOKEN_DENIED)


@pytest.fixture
def hub() -> Iterator[sandbox_hub.Hub]:
    with sandbox_hub.serve(catalog()) as running:
        yield running


def ask(
    hub: sandbox_hub.Hub, value: str, tmp_path: Path, token: str | None = None, **kw: object
) -> ModelAnswer:
    answer = resolve_model(
        value,
        endpoint=hub.url,
        token=Token(token, "test") if token else Token(),
        cache_dir=tmp_path / "laptop-hub",
        base_dir=tmp_path,
        **kw,  # type: ignore[arg-type]
    )
    assert "\n" not in answer.message and not any(t in answer.message for t in TOKENS)
    return answer


def test_public_model_resolves_to_commit_files_and_config(hub: sandbox_hub.Hub, tmp_path: Path) -> None:
    model_dir, _ = tiny_assets()
    answer = ask(hub, TINY_PUBLIC, tmp_path)
    assert answer.ok and answer.answer is Answer.HUB
    assert answer.sha == catalog().get("model", TINY_PUBLIC).refs["main"]  # type: ignore[union-attr]
    sizes = {f.path: f.size for f in answer.files}
    assert all(sizes[p.name] == p.stat().st_size for p in model_dir.iterdir())
    assert answer.total_size == sum(sizes.values())
    assert answer.config is not None and answer.config["hidden_size"] == 64
    assert re.fullmatch(rf"{TINY_PUBLIC}: Hub commit [0-9a-f]{{12}}, 8 files, 0\.00 GB", answer.message)


def test_model_revision_pins_an_older_commit(hub: sandbox_hub.Hub, tmp_path: Path) -> None:
    answer = ask(hub, TINY_PUBLIC, tmp_path, revision=FIRST_TAG)
    assert answer.sha == catalog().get("model", TINY_PUBLIC).refs[FIRST_TAG]  # type: ignore[union-attr]
    assert {f.path for f in answer.files} == {"config.json", "README.md"}
    again = ask(hub, TINY_PUBLIC, tmp_path, revision=answer.sha)  # the full sha pins the same commit
    assert again.sha == answer.sha


def test_config_json_is_cached_on_the_laptop_by_repo_and_sha(hub: sandbox_hub.Hub, tmp_path: Path) -> None:
    first = ask(hub, TINY_PUBLIC, tmp_path)
    ask(hub, TINY_PUBLIC, tmp_path)
    assert hub.downloads(TINY_PUBLIC, "config.json") == 1
    cached = tmp_path / "laptop-hub/models--radeonlab-sandbox--tiny-llama/snapshots" / str(first.sha)
    assert (cached / "config.json").is_file()
    assert hub.bytes_served(TINY_PUBLIC, "model.safetensors") == 0  # only config.json is ever fetched


NOT_FOUND = "no such local folder"
REFUSED = [
    ("./no-such-model", Answer.NO_SUCH_PATH, rf"\./no-such-model: {NOT_FOUND} \(/.+/no-such-model\)"),
    ("/nowhere/at/all", Answer.NO_SUCH_PATH, rf"/nowhere/at/all: {NOT_FOUND} \(/nowhere/at/all\)"),
    ("org/bad name!", Answer.MALFORMED, rf"org/bad name!: not a Hub model id \(.+\) and {NOT_FOUND} .+"),
    ("nobody/nothing", Answer.UNKNOWN_REPO, r"nobody/nothing: no such model on the Hub \(http.+, 404\) .+"),
    (DEMO_DATASET, Answer.DATASET, rf"{DEMO_DATASET}: a dataset on the Hub, not a model .+"),
    (TINY_GATED, Answer.GATED_NO_TOKEN, rf"{TINY_GATED}: gated: no token: set HF_TOKEN or log in"),
]


@pytest.mark.parametrize(("value", "answer", "line"), REFUSED)
def test_refusals_without_a_token(
    hub: sandbox_hub.Hub, tmp_path: Path, value: str, answer: Answer, line: str
) -> None:
    got = ask(hub, value, tmp_path)
    assert (got.answer, got.ok) == (answer, False)
    assert re.fullmatch(line, got.message), got.message
    assert hub.bytes_served() == 0  # nothing downloaded for a refused model


def test_unknown_revision(hub: sandbox_hub.Hub, tmp_path: Path) -> None:
    got = ask(hub, TINY_PUBLIC, tmp_path, revision="v9")
    assert got.answer is Answer.UNKNOWN_REVISION
    assert got.message == f"{TINY_PUBLIC}: no revision 'v9' on the Hub (404)"


def test_gated_with_and_without_access(hub: sandbox_hub.Hub, tmp_path: Path) -> None:
    denied = ask(hub, TINY_GATED, tmp_path, token=TOKEN_DENIED)
    assert denied.answer is Answer.GATED_NO_ACCESS
    assert (
        denied.message
        == f"{TINY_GATED}: gated: this token has no access; request it on the model's page (403)"
    )
    granted = ask(hub, TINY_GATED, tmp_path, token=TOKEN_GRANTED)
    assert granted.answer is Answer.HUB and granted.gated and granted.config is not None
    assert hub.downloads(TINY_GATED, "config.json", client="token:granted") == 1


def test_withdrawn_access_is_noticed_although_config_is_cached(tmp_path: Path) -> None:
    hub_catalog = catalog()
    with sandbox_hub.serve(hub_catalog) as hub:
        assert ask(hub, TINY_GATED, tmp_path, token=TOKEN_GRANTED).ok
        hub_catalog.get("model", TINY_GATED).granted = frozenset()  # type: ignore[union-attr]
        assert ask(hub, TINY_GATED, tmp_path, token=TOKEN_GRANTED).answer is Answer.GATED_NO_ACCESS


def test_tokens_empty_unknown_and_from_the_login_file(hub: sandbox_hub.Hub, tmp_path: Path) -> None:
    empty = laptop_token({"HF_TOKEN": "  "})
    got = resolve_model(TINY_PUBLIC, endpoint=hub.url, token=empty, cache_dir=tmp_path)
    assert got.answer is Answer.BAD_TOKEN
    assert got.message == f"{TINY_PUBLIC}: HF_TOKEN is set but empty: unset it or set a token"
    assert ask(hub, TINY_PUBLIC, tmp_path, token="hf_unknownToken").answer is Answer.BAD_TOKEN
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf/token").write_text(TOKEN_GRANTED + "\n")
    from_file = laptop_token({"HF_HOME": str(tmp_path / "hf")})
    assert from_file.value == TOKEN_GRANTED and from_file.source == str(tmp_path / "hf/token")
    got = resolve_model(TINY_GATED, endpoint=hub.url, token=from_file, cache_dir=tmp_path / "c")
    assert got.answer is Answer.HUB
    (tmp_path / "hf/token").write_text("\n")
    assert laptop_token({"HF_HOME": str(tmp_path / "hf")}).problem is not None
    assert laptop_token({"HF_HOME": str(tmp_path / "nothing-here")}) == Token()
    assert laptop_token({"HF_TOKEN": TOKEN_DENIED, "HF_HOME": str(tmp_path / "hf")}).value == TOKEN_DENIED


def test_local_folder_needs_no_hub(tmp_path: Path) -> None:
    model_dir, _ = tiny_assets()
    got = resolve_model(str(model_dir), endpoint="http://127.0.0.1:9", token=Token(), cache_dir=tmp_path)
    assert got.answer is Answer.LOCAL and got.local_dir == model_dir.resolve()
    assert got.config is not None and got.config["num_hidden_layers"] == 2


def test_unreachable_hub_is_its_own_answer(tmp_path: Path) -> None:
    with sandbox_hub.serve(catalog()) as hub:
        hub.set_down(True)  # connections closed unanswered
        down = ask(hub, TINY_PUBLIC, tmp_path)
        hub.stop()  # nothing listening
        gone = ask(hub, TINY_PUBLIC, tmp_path)
    for got in (down, gone):
        assert got.answer is Answer.UNREACHABLE and not got.ok
        assert got.message == f"{TINY_PUBLIC}: the Hub ({hub.url}) is unreachable: cannot connect"


def test_config_only_llama3_8b_gets_the_readme_estimate(hub: sandbox_hub.Hub, tmp_path: Path) -> None:
    got = ask(hub, LLAMA3_8B, tmp_path)
    assert got.answer is Answer.HUB and got.config is not None
    shape = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
    values = tuple(got.config[k] for k in (*shape, "num_key_value_heads", "vocab_size"))
    assert values == (4096, 14336, 32, 32, 8, 128256)
    train = {**LORA_BF16, "per_device_train_batch_size": 1}
    est = estimate(got.config, train)
    assert est.peak == estimate(README_LLAMA3_8B, train).peak
    assert round(est.peak / 1e9, 1) == 21.1  # docs/reference/vram.md: batch 1, cutoff 1024
    assert not fits(est, 16 * GIB).fits and fits(est, CARD_24GB).fits


def test_laptop_client_is_pinned_to_the_deploys_version() -> None:
    lock = (REPO / "src/radeonlab/sandbox/wheels.lock").read_text()
    deployed = re.search(r"^huggingface-hub==(\S+)", lock, re.M)
    pinned = re.search(r'"huggingface_hub==([^"]+)"', (REPO / "pyproject.toml").read_text())
    assert deployed and pinned and deployed.group(1) == pinned.group(1)

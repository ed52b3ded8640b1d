"""Bad inputs: each gets ONE clear error line and exit 2 (radeonlab/errors.py: usage or input) before anything
is uploaded or launched; a host that is not provisioned is a host failure (exit 1).

Every row runs `radeonlab submit` (or the verb the input belongs to) exactly as typed, against an inventory
whose only host listens nowhere (127.0.77.250:1): an input that got as far as SSH would fail with
"cannot reach", so seeing the input's own error proves it was refused before any connection - nothing
can have reached a host. The not-provisioned host is a real (bare) sandbox host: its home is compared
before and after (only radeonlab's host code cache may appear: reading the host needs it).
docs/reference/bad-inputs.md ("What bad inputs get") lists what each input gets.
"""

from __future__ import annotations

import csv
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from radeonlab.cli import main
from radeonlab.contract.jobid import is_job_id, new_job_id
from radeonlab.errors import EXIT_FAILURE, EXIT_USAGE
from radeonlab.jobs.fleet import store
from radeonlab.jobs.spec import lf_key_history
from radeonlab.jobs.ssh import hostcode
from radeonlab.sandbox import demodata
from radeonlab.sandbox.demo import write_spec
from radeonlab.sandbox.hosts import Sandbox
from tests.support.laptop_doubles import CLOSED_HUB

REPO = Path(__file__).resolve().parents[2]
HUB_MODEL = "Qwen/Qwen2.5-0.5B"  # a Hub name: nothing local to build, never fetched (refused earlier)
# The Hub is asked at an endpoint where nothing listens: the model is then "offline" (the host's cache would
# decide), which is as far as the valid control spec goes before SSH. No test here reaches the Internet.
HUB_ENV = {"HF_ENDPOINT": CLOSED_HUB}
CLOSED_INVENTORY = 'ws1 = [("ws1", {"ssh_hostname": "127.0.77.250", "ssh_port": 1, "ssh_user": "lab"})]\n'
HOSTILE = "my job; $(touch pwned) 'q' \"dq\" `id` ../ é"  # spaces, quotes, ;, $(), backticks, ../, unicode
HUGE_LINE_MB = 50
HUGE_RSS_MB = 700  # ~4x the line in RAM is what a line-based reader costs
HANG_GUARD_S = 120  # not a speed assertion (none on this shared machine): a reader stuck on the line fails


@pytest.fixture(autouse=True)
def laptop_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The laptop's job cache in this test's folder: verbs that resolve a job id open it first."""
    monkeypatch.setenv(store.HOME_ENV, str(tmp_path / "laptop-home"))


@dataclass
class Work:
    dir: Path
    spec: Path
    data: Path  # the dataset file named by dataset_info.json
    inventory: Path

    def cli(self, *args: str) -> Result:
        return CliRunner().invoke(main, list(args), env=HUB_ENV, catch_exceptions=False)

    def submit(self, spec: Path | None = None, *extra: str) -> Result:
        return self.cli("submit", str(spec or self.spec), "-i", str(self.inventory), *extra)


@pytest.fixture
def work(tmp_path: Path) -> Work:
    spec = write_spec(tmp_path, {"model_name_or_path": HUB_MODEL, "max_steps": 5})
    data = demodata.write_dataset(tmp_path / "data")
    inventory = tmp_path / "closed.py"
    inventory.write_text(CLOSED_INVENTORY)
    return Work(tmp_path, spec, data, inventory)


def refused(result: Result, *needles: str, code: int = EXIT_USAGE) -> str:
    """Assert exit `code` (2: an input error) and a final `radeonlab: error:` line (one line) naming the
    input; return that line."""
    assert result.exit_code == code, result.output
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("radeonlab: error: "), result.stderr
    assert "cannot reach" not in result.output, "got as far as SSH: " + result.output
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)
    return last


def test_a_valid_spec_does_reach_ssh(work: Work) -> None:
    """The control: without a bad input, submit gets as far as the (closed) host, so the rows below
    really were refused earlier."""
    result = work.submit()
    assert result.exit_code == EXIT_FAILURE, result.output  # a host failure, not an input error
    assert "cannot reach ws1 (127.0.77.250:1)" in result.stderr, result.output


# --- datasets ---------------------------------------------------------------------------------------------
def _cut_line(w: Work) -> None:
    lines = w.data.read_text().splitlines()
    lines[3] = '{"instruction": "Uppercase the word.", "input": "apple", "output": '
    w.data.write_text("\n".join(lines) + "\n")


def _sharegpt_row(w: Work) -> None:
    lines = w.data.read_text().splitlines()
    lines[3] = json.dumps(
        {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "HI"}]}
    )
    w.data.write_text("\n".join(lines) + "\n")


def _latin1(w: Work) -> None:
    lines = w.data.read_bytes().splitlines()
    lines[3] = '{"instruction": "café", "input": "", "output": "CAFÉ"}'.encode("latin-1")
    w.data.write_bytes(b"\n".join(lines) + b"\n")


def _dotdot_file_name(w: Work) -> None:
    info = w.data.parent / "dataset_info.json"
    entries = json.loads(info.read_text())
    (w.dir / "elsewhere").mkdir()
    w.data.rename(w.dir / "elsewhere" / w.data.name)
    entries["demo"]["file_name"] = f"../elsewhere/{w.data.name}"
    info.write_text(json.dumps(entries))


def _replace_data(make: Callable[[Path], None]) -> Callable[[Work], None]:
    def damage(w: Work) -> None:
        w.data.unlink()
        make(w.data)

    return damage


def _info(make: Callable[[Path], None]) -> Callable[[Work], None]:
    def damage(w: Work) -> None:
        info = w.data.parent / "dataset_info.json"
        info.unlink()
        make(info)

    return damage


def _deep_row(w: Work) -> None:
    lines = w.data.read_text().splitlines()
    lines[3] = '{"instruction": ' + "[" * 5000 + "]" * 5000 + ', "input": "", "output": "A"}'
    w.data.write_text("\n".join(lines) + "\n")


def _as_array(w: Work, prefix: bytes = b"", deep_row: int | None = None) -> None:
    rows = [json.loads(line) for line in w.data.read_text().splitlines()]
    text = [json.dumps(r) for r in rows]
    if deep_row is not None:
        text[deep_row] = "[" * 5000 + "]" * 5000
    w.data.write_bytes(prefix + ("[\n" + ",\n".join(text) + "\n]\n").encode())


def _named_file(w: Work, line: str, name: str) -> None:
    os.mkfifo(w.dir / name)
    w.spec.write_text(w.spec.read_text() + line + "\n")


INFO = "dataset_info.json"
ELOOP = "Too many levels of symbolic links"
INFO_TEXT = json.dumps(demodata.DATASET_INFO)
DEEP_INFO = '{"demo": ' + "[" * 5000 + "]" * 5000 + "}"
TOO_DEEP = "malformed JSON: nested too deeply to be read (about 1000 levels)"
DATASET_ROWS: dict[str, tuple[Callable[[Work], None], tuple[str, ...]]] = {
    "malformed-json-line": (_cut_line, (":4: error: malformed JSON",)),
    "mixed-formats-sharegpt-row-in-alpaca": (_sharegpt_row, (":4: error: row dropped",)),
    "not-utf8": (_latin1, (":4: error: not UTF-8 (byte 0xe9",)),
    "zero-bytes": (lambda w: w.data.write_bytes(b""), (":1: error: empty file (0 bytes)",)),
    "only-blank-lines": (lambda w: w.data.write_text("\n\n  \n"), (":1: error: no rows",)),
    "missing-file": (lambda w: w.data.unlink(), (":1: error: dataset file not found",)),
    "file-name-outside-dataset-dir": (_dotdot_file_name, ("is not a file directly inside",)),
    # files that would hang or exhaust a reader, or cannot be read at all
    "dataset-is-a-fifo": (_replace_data(os.mkfifo),
                          (":1: error: the dataset is a FIFO (named pipe), not a regular file: not read",)),
    "dataset-links-to-dev-zero": (_replace_data(lambda p: p.symlink_to("/dev/zero")),
                                  (":1: error: the dataset is a character device, not a regular file",)),
    "dataset-symlink-loop": (_replace_data(lambda p: p.symlink_to(p)),
                             (f":1: error: cannot read the dataset: {ELOOP}",)),
    "dataset-info-is-a-fifo": (_info(os.mkfifo),
                               ("dataset_info.json:1: error: dataset_info.json is a FIFO (named pipe)",)),
    "dataset-info-links-to-dev-zero": (_info(lambda p: p.symlink_to("/dev/zero")),
                                       (f"{INFO}:1: error: {INFO} is a character device",)),
    "dataset-info-symlink-loop": (_info(lambda p: p.symlink_to(p)),
                                  (f"{INFO}:1: error: cannot read {INFO}: {ELOOP}",)),
    "dataset-info-with-bom": (_info(lambda p: p.write_bytes(b"\xef\xbb\xbf" + INFO_TEXT.encode())),
                              (f"{INFO}:1: error: malformed JSON: Unexpected UTF-8 BOM",
                               "(fix: save it without the BOM)")),
    "dataset-info-nested-5000-deep": (_info(lambda p: p.write_text(DEEP_INFO)),
                                      (f"{INFO}:1: error: {TOO_DEEP}",)),
    "row-nested-5000-deep": (_deep_row, (f"demo.jsonl:4: error: {TOO_DEEP}",)),
    "array-element-nested-5000-deep": (lambda w: _as_array(w, deep_row=2),
                                       (f"demo.jsonl:4: error: {TOO_DEEP}",)),
    "bom-before-a-json-array": (lambda w: _as_array(w, b"\xef\xbb\xbf"),
                                ("demo.jsonl:1: error: a UTF-8 BOM before a JSON array",)),
    # other files a spec names: only stat, never opened
    "deepspeed-config-is-a-fifo": (lambda w: _named_file(w, "deepspeed: ds.json", "ds.json"),
                                   ("`deepspeed: ds.json` is a FIFO (named pipe); it should be",)),
    "block-file-is-a-fifo": (lambda w: _named_file(w, "radeonlab:\n  files: [extra.bin]", "extra.bin"),
                             ("file to upload extra.bin is not a regular file but a FIFO (named pipe)",)),
}  # fmt: skip


@pytest.mark.parametrize("row", list(DATASET_ROWS))
def test_bad_dataset_is_refused_before_any_upload(work: Work, row: str) -> None:
    damage, needles = DATASET_ROWS[row]
    damage(work)
    last = refused(work.submit(), *needles)
    assert last.endswith("nothing uploaded"), last
    # `check` says the same, without a host; it exits 1 when it finds errors (its documented contract)
    assert work.cli("check", str(work.spec)).exit_code == 1


def _bom_json_lines(w: Work) -> None:
    w.data.write_bytes(b"\xef\xbb\xbf" + w.data.read_bytes())


def _bom_csv(w: Work) -> None:
    rows = [json.loads(line) for line in w.data.read_text().splitlines()]
    with w.data.with_suffix(".csv").open("w", encoding="utf-8-sig", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["instruction", "input", "output"])
        writer.writeheader()
        writer.writerows(rows)
    w.data.unlink()
    info = w.data.parent / INFO
    info.write_text(info.read_text().replace(w.data.name, w.data.with_suffix(".csv").name))


def _named_only_in_the_block(w: Work) -> None:
    drop = ("dataset:", "dataset_dir:")
    lines = [line for line in w.spec.read_text().splitlines() if not line.startswith(drop)]
    lines += ["radeonlab:", "  datasets:", f"    - {w.data.relative_to(w.dir)}"]
    w.spec.write_text("\n".join(lines) + "\n")


def _dataset_as_a_yaml_list(w: Work) -> None:
    _set(w, {"dataset": "[demo, demo]", "lora_target": "[q_proj, v_proj]"})


# Valid forms a check once refused: `datasets` (4.0.0, pyarrow 26) loads JSON Lines after a UTF-8 BOM and CSV
# whose header starts with one; a spec may name its datasets only in the radeonlab block (render then sets
# `dataset` from it: jobs/plan/render.py); LLaMA-Factory's split_arg reads a YAML list of names as it reads
# the comma-separated text (jobs/spec/load.py COMMA_KEYS).
VALID_FORMS: dict[str, Callable[[Work], None]] = {
    "dataset-and-lora-target-as-yaml-lists": _dataset_as_a_yaml_list,
    "bom-before-json-lines": _bom_json_lines,
    "bom-before-a-csv-header": _bom_csv,
    "dataset-named-only-in-the-radeonlab-block": _named_only_in_the_block,
}


@pytest.mark.parametrize("form", list(VALID_FORMS))
def test_a_valid_form_is_accepted_and_reaches_ssh(work: Work, form: str) -> None:
    VALID_FORMS[form](work)
    checked = work.cli("check", str(work.spec), "--no-hub")
    assert checked.exit_code == 0, checked.output
    assert " error: " not in checked.output
    result = work.submit()
    assert result.exit_code == EXIT_FAILURE and "cannot reach ws1" in result.stderr, result.output


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file of mode 000")
def test_an_unreadable_dataset_is_one_line(work: Work) -> None:
    work.data.chmod(0)
    refused(work.submit(), f"{work.data}:1: error: cannot read the dataset: Permission denied")


# --- values out of range (jobs/spec/lf_ranges.json) ---------------------------------------------------------
def _set(w: Work, values: dict[str, str]) -> None:
    """The spec with `key: value` lines replaced or added; `radeonlab.x` keys go into a radeonlab block."""
    text = w.spec.read_text()
    block = [f"  {k.split('.', 1)[1]}: {v}" for k, v in values.items() if k.startswith("radeonlab.")]
    for key, value in values.items():
        if key.startswith("radeonlab."):
            continue
        text, n = re.subn(rf"(?m)^{key}:.*$", f"{key}: {value}", text)
        text += "" if n else f"{key}: {value}\n"
    w.spec.write_text(text + ("radeonlab:\n" + "\n".join(block) + "\n" if block else ""))


CACHED = "hub/models--Qwen--Qwen2.5-0.5B/snapshots/main"  # a Hub cache folder, relative and not here
EPOCHS = {"max_steps": "-1"}  # the epoch rules apply when max_steps does not override num_train_epochs
NAN = "is not a number: NaN passes every range check"
VALUE_ROWS: dict[str, tuple[dict[str, str], str]] = {
    "batch-size-0": ({"per_device_train_batch_size": "0"},
                     "`per_device_train_batch_size: 0` must be >= 1: torch"),
    "batch-size-negative": ({"per_device_train_batch_size": "-2"},
                            "`per_device_train_batch_size: -2` must be >= 1"),
    "eval-batch-size-0": ({"per_device_eval_batch_size": "0"},
                          "`per_device_eval_batch_size: 0` must be >= 1"),
    "epochs-nan": ({"num_train_epochs": ".nan", **EPOCHS}, f"`num_train_epochs: nan` {NAN}"),
    "epochs-inf": ({"num_train_epochs": ".inf", **EPOCHS}, "`num_train_epochs: inf` must be finite"),
    "epochs-negative": ({"num_train_epochs": "-1.0", **EPOCHS}, "`num_train_epochs: -1` must be >= 0"),
    "cutoff-len-0": ({"cutoff_len": "0"}, "`cutoff_len: 0` must be >= 1: LLaMA-Factory cuts every example"),
    "lora-rank-0": ({"lora_rank": "0"}, "`lora_rank: 0` must be >= 1: peft refuses"),
    "lora-rank-negative": ({"lora_rank": "-8"}, "`lora_rank: -8` must be >= 1"),
    "lora-alpha-0": ({"lora_alpha": "0"}, "`lora_alpha: 0` must be other than 0: LLaMA-Factory replaces"),
    "lora-alpha-negative": ({"lora_alpha": "-16"}, "`lora_alpha: -16` must be > 0: peft scales"),
    "gradient-accumulation-0": ({"gradient_accumulation_steps": "0"},
                                "`gradient_accumulation_steps: 0` must be >= 1"),
    "warmup-ratio-above-1": ({"warmup_ratio": "1.5"},
                             "`warmup_ratio: 1.5` must be between 0 and 1: transformers refuses"),
    "warmup-ratio-negative": ({"warmup_ratio": "-0.1"}, "`warmup_ratio: -0.1` must be between 0 and 1"),
    "warmup-steps-negative": ({"warmup_steps": "-5"},
                              "`warmup_steps: -5` must be >= 0: transformers refuses"),
    "learning-rate-negative": ({"learning_rate": "-1.0e-4"},
                               "`learning_rate: -0.0001` must be >= 0: torch's Adam"),
    "learning-rate-nan": ({"learning_rate": ".nan"}, f"`learning_rate: nan` {NAN}"),
    "learning-rate-inf": ({"learning_rate": ".inf"}, "`learning_rate: inf` must be finite"),
    "lora-dropout-above-1": ({"lora_dropout": "1.5"}, "`lora_dropout: 1.5` must be between 0 and 1"),
    "lora-dropout-negative": ({"lora_dropout": "-0.1"}, "`lora_dropout: -0.1` must be between 0 and 1"),
    "max-samples-0": ({"max_samples": "0"}, "`max_samples: 0` must be >= 1"),
    "max-samples-negative": ({"max_samples": "-100"}, "`max_samples: -100` must be >= 1"),
    "save-steps-0": ({"save_steps": "0"}, "`save_steps: 0` must be > 0"),
    "save-steps-negative": ({"save_steps": "-20"}, "`save_steps: -20` must be >= 0"),
    "logging-steps-0": ({"logging_steps": "0"}, "`logging_steps: 0` must be > 0: transformers refuses 0"),
    "logging-steps-negative": ({"logging_steps": "-1"}, "`logging_steps: -1` must be >= 0"),
    "logging-steps-fraction-above-1": ({"logging_steps": "2.5"},
                                       "`logging_steps: 2.5` must be >= 0, and a whole"),
    "val-size-negative": ({"val_size": "-0.1"}, "`val_size: -0.1` must be >= 0"),
    "eval-steps-negative": ({"eval_steps": "-10"}, "`eval_steps: -10` must be >= 0"),
    "adam-beta1-1": ({"adam_beta1": "1.0"}, "`adam_beta1: 1` must be >= 0 and < 1"),
    "adam-epsilon-negative": ({"adam_epsilon": "-1.0e-8"}, "`adam_epsilon: -1e-08` must be >= 0"),
    "weight-decay-negative": ({"weight_decay": "-0.01"}, "`weight_decay: -0.01` must be >= 0"),
    "dataloader-workers-negative": ({"dataloader_num_workers": "-1"},
                                    "`dataloader_num_workers: -1` must be >= 0"),
    "preprocessing-workers-0": ({"preprocessing_num_workers": "0"},
                                "`preprocessing_num_workers: 0` must be >= 1"),
    "dpo-label-smoothing-0.9": ({"dpo_label_smoothing": "0.9"},
                                "`dpo_label_smoothing: 0.9` must be between 0 and 0.5"),
    "torch-empty-cache-steps-0": ({"torch_empty_cache_steps": "0"},
                                  "`torch_empty_cache_steps: 0` must be > 0"),
    "dataset-is-a-number": ({"dataset": "123"},
                            "`dataset` needs a str, got int 123 (fix: quote it: dataset: \"123\")"),
    "block-min-vram-nan": ({"radeonlab.placement": "{min_vram_gb: .nan}"},
                           "min_vram_gb must be a positive number (finite)"),
    "block-memory-limit-negative": ({"radeonlab.limits": "{memory_gb: -4}"},
                                    "limit memory_gb must be a positive number (finite)"),
    "block-memory-limit-inf": ({"radeonlab.limits": "{memory_gb: .inf}"},
                               "limit memory_gb must be a positive number (finite)"),
    "block-nodes-0": ({"radeonlab.nodes": "0"}, "nodes must be a whole number >= 1"),
    "block-nodes-fraction": ({"radeonlab.nodes": "1.5"}, "nodes must be a whole number >= 1"),
    # paths as users write them (jobs/spec/paths.py; more in tests/unit/test_spec_paths_cli.py)
    "model-relative-hub-cache-folder": ({"model_name_or_path": CACHED},
                                        f"`model_name_or_path: {CACHED}` is a Hugging Face cache folder"),
}  # fmt: skip


@pytest.mark.parametrize("row", list(VALUE_ROWS))
def test_a_value_out_of_range_is_refused_with_its_reason(work: Work, row: str) -> None:
    values, needle = VALUE_ROWS[row]
    _set(work, values)
    last = refused(work.submit(), needle)
    assert last.endswith("nothing uploaded"), last
    checked = work.cli("check", str(work.spec), "--no-hub")
    assert checked.exit_code == 1 and f": error: {needle}" in checked.output, checked.output


# --- keys LLaMA-Factory renamed or dropped since 0.8.0 (jobs/spec/lf_key_history.json) ----------------------
REMOVED = "the pinned 0.9.5 stops with `Some keys are not used by the HfArgumentParser`"
HISTORY_ROWS: dict[str, tuple[dict[str, str], str]] = {
    "vllm_dtype": ({"vllm_dtype": "bfloat16"},
                   "0.8.2 removed this key (last in 0.8.1); {R} (fix: infer_dtype: bfloat16)"),
    "image_dir": ({"image_dir": "pics"},
                  "0.9.2 removed this key (last in 0.9.1); {R} (fix: media_dir: pics)"),
    "image_resolution": ({"image_resolution": "262144"}, "0.9.2 removed this key (last in 0.9.1); {R} "
                         "(fix: image_max_pixels: 262144 (both count pixels"),
    "video_resolution": ({"video_resolution": "16384"}, "(fix: video_max_pixels: 16384"),
    "train_mm_proj_only": ({"train_mm_proj_only": "true"},
                           "(fix: freeze_vision_tower: true plus freeze_language_model: true)"),
    "new_special_tokens": ({"new_special_tokens": "<a>,<b>"},
                           "0.9.3 removed this key (last in 0.9.2); {R} (fix: add_special_tokens: <a>,<b>)"),
    "visual_inputs-no-replacement": ({"visual_inputs": "true"},
                                     "0.9.0 removed this key (last in 0.8.3); {R} (fix: remove it (no key"),
    "ray_run_name-no-replacement": ({"ray_run_name": "x"}, "0.9.5 removed this key (last in 0.9.4)"),
}  # fmt: skip


def test_every_renamed_key_of_the_history_has_a_row() -> None:
    """Acceptance: each renamed key of the history table has a row above with its replacement."""
    moved = set(lf_key_history.load()["moved"])
    assert len(moved) >= 6 and moved <= set(HISTORY_ROWS), moved - set(HISTORY_ROWS)


@pytest.mark.parametrize("row", list(HISTORY_ROWS))
def test_a_renamed_or_dropped_key_gets_its_replacement(work: Work, row: str) -> None:
    values, needle = HISTORY_ROWS[row]
    needle = needle.replace("{R}", REMOVED)
    _set(work, values)
    refused(work.submit(), needle)
    checked = work.cli("check", str(work.spec), "--no-hub")
    assert checked.exit_code == 1 and needle in checked.output, checked.output
    assert "did you mean" not in checked.output, checked.output


def test_a_misspelt_key_without_history_still_gets_did_you_mean(work: Work) -> None:
    _set(work, {"lora_rnak": "8"})
    checked = work.cli("check", str(work.spec), "--no-hub")
    assert checked.exit_code == 1 and "(fix: did you mean `lora_rank`?)" in checked.output, checked.output


# a workstation's Hub cache folder, as configs users post name it
WS_SHA = "060db6499f32faf8b98477b0a26969ef7d8b9987"
WS_CACHED = f"/home/ml/.cache/huggingface/hub/models--Qwen--Qwen2.5-0.5B/snapshots/{WS_SHA}"
# Absurd but legal: a warning with the reason; check exits 0 and submit goes on (to the closed host here).
WARNING_ROWS: dict[str, tuple[dict[str, str], str]] = {
    "learning-rate-1e30": ({"learning_rate": "1.0e30"}, "`learning_rate: 1e+30` must be <= 1: legal, but"),
    "more-warmup-than-steps": ({"warmup_steps": "100", "max_steps": "5"},
                               "`warmup_steps: 100` must be at most max_steps: more warmup steps than"),
    "max-steps-0": ({"max_steps": "0"}, "`max_steps: 0` must be other than 0: max_steps 0 trains no step"),
    "zero-epochs": ({"num_train_epochs": "0", **EPOCHS}, "`num_train_epochs: 0` must be > 0: 0 epochs"),
    "lora-dropout-1": ({"lora_dropout": "1.0"}, "`lora_dropout: 1` must be < 1: a dropout of 1 zeroes"),
    # a folder on the workstation: looked for there by submit and `check --host` (test_host_paths_e2e.py)
    "model-folder-on-the-workstation": ({"model_name_or_path": "/data/models/llama-3-8b"},
                                        "`model_name_or_path: /data/models/llama-3-8b` is not on this "
                                        "laptop: submit looks for it on the workstation"),
    "adapter-folder-on-the-workstation": ({"adapter_name_or_path": "/workspace/runs/sft-1"},
                                          "`adapter_name_or_path: /workspace/runs/sft-1` is not on this"),
    "model-absolute-hub-cache-folder": ({"model_name_or_path": WS_CACHED},
                                        f"`model_name_or_path: {WS_CACHED}` is not on this laptop: a Hugging "
                                        "Face cache folder; name the model by its Hub id"),
}  # fmt: skip


@pytest.mark.parametrize("row", list(WARNING_ROWS))
def test_an_absurd_but_legal_value_is_a_warning_with_its_reason(work: Work, row: str) -> None:
    values, needle = WARNING_ROWS[row]
    _set(work, values)
    checked = work.cli("check", str(work.spec), "--no-hub")
    assert checked.exit_code == 0 and f": warning: {needle}" in checked.output, checked.output
    result = work.submit()
    assert result.exit_code == EXIT_FAILURE and "cannot reach ws1" in result.stderr, result.output


# --- rules between keys (jobs/spec/lf_rules.py; each message names its llamafactory 0.9.5 code path) -------
DS3 = "{zero_optimization: {stage: 3}}"  # an inline DeepSpeed config: transformers takes a dict as well
GTA = "(llamafactory 0.9.5 hparams/parser.py:get_train_args)"
RULE_ROWS: dict[str, tuple[dict[str, str], str]] = {
    "predict-with-generate-outside-sft": ({"stage": "pt", "predict_with_generate": "true"},
                                          "`predict_with_generate` cannot be set as True except SFT " + GTA),
    "neat-packing-outside-sft": ({"stage": "pt", "neat_packing": "true"}, "`neat_packing` cannot be set"),
    "train-on-prompt-outside-sft": ({"stage": "pt", "train_on_prompt": "true"}, "`train_on_prompt` ..."),
    "do-predict-without-predict-with-generate": ({"do_predict": "true", "eval_dataset": "demo"},
                                                 "do_predict without predict_with_generate"),
    "do-eval-without-eval-data": ({"do_eval": "true"}, "do_eval without eval_dataset or val_size"),
    "rm-load-best-model-at-end": ({"stage": "rm", "load_best_model_at_end": "true"},
                                  "`RM and PPO stages do not support `load_best_model_at_end``"),
    "ppo-without-reward-model": ({"stage": "ppo"}, "`reward_model` is necessary for PPO training "
                                 "(llamafactory 0.9.5 hparams/finetuning_args.py:FinetuningArguments."),
    "ppo-full-with-lora-reward-model": ({"stage": "ppo", "reward_model": "rm", "finetuning_type": "full"},
                                        "`reward_model_type` cannot be lora for Freeze/Full PPO training"),
    "streaming-without-max-steps": ({"streaming": "true", "max_steps": "-1"},
                                    "streaming without max_steps: `Please specify `max_steps`"),
    "streaming-with-max-samples": ({"streaming": "true", "max_samples": "100"},
                                   "`max_samples` is incompatible with `streaming`"),
    "predict-with-generate-and-compute-accuracy": (
        {"predict_with_generate": "true", "compute_accuracy": "true", "val_size": "0.1"},
        "`Cannot use `predict_with_generate` and `compute_accuracy` together`"),
    "predict-with-generate-and-zero3": ({"predict_with_generate": "true", "val_size": "0.1",
                                         "deepspeed": DS3}, "is incompatible with DeepSpeed ZeRO-3"),
    "pure-bf16-and-zero3": ({"pure_bf16": "true", "deepspeed": DS3}, "`pure_bf16` is incompatible with"),
    "galore-with-deepspeed": ({"finetuning_type": "full", "use_galore": "true", "deepspeed": DS3},
                              "`GaLore and APOLLO are incompatible with DeepSpeed yet`"),
    "fp8-with-quantization": ({"fp8": "true", "quantization_bit": "4"}, "`FP8 training is not compatible"),
    "vllm-backend-to-train": ({"infer_backend": "vllm"}, "`vLLM/SGLang backend is only available for API"),
    "adapter-with-full-tuning": ({"finetuning_type": "full", "adapter_name_or_path": "adapter",
                                  "lora_target": "all"}, "`Adapter is only valid for the LoRA method`"),
    "quantization-with-full-tuning": ({"finetuning_type": "full", "quantization_bit": "4"},
                                      "`Quantization is only compatible with the LoRA or OFT method`"),
    "quantization-with-resize-vocab": ({"quantization_bit": "4", "resize_vocab": "true"},
                                       "`Cannot resize embedding layers of a quantized model`"),
    "bnb-3-bit": ({"quantization_bit": "3"}, "`Bitsandbytes only accepts 4-bit or 8-bit quantization` "
                  "(llamafactory 0.9.5 model/model_utils/quantization.py:configure_quantization)"),
    "eetq-4-bit": ({"quantization_method": "eetq", "quantization_bit": "4"}, "`EETQ only accepts 8-bit"),
    "bnb-8-bit-with-zero3": ({"quantization_bit": "8", "deepspeed": DS3},
                             "8-bit with DeepSpeed ZeRO-3: `Only 4-bit quantized model can use"),
    "hqq-with-zero3": ({"quantization_method": "hqq", "quantization_bit": "4", "deepspeed": DS3},
                       "HQQ and EETQ quantization are incompatible with DeepSpeed ZeRO-3"),
    "dpo-label-smoothing-with-ipo": ({"stage": "dpo", "pref_loss": "ipo", "dpo_label_smoothing": "0.1"},
                                     "`dpo_label_smoothing` is only valid for sigmoid loss function"),
    "llama-pro-with-full-tuning": ({"finetuning_type": "full", "use_llama_pro": "true"},
                                   "`use_llama_pro` is only valid for Freeze or LoRA training"),
    "lora-with-galore": ({"use_galore": "true"}, "`Cannot use LoRA with GaLore, APOLLO or BAdam together`"),
    "dora-with-freeze-tuning": ({"finetuning_type": "freeze", "use_dora": "true"},
                                "`use_dora` is only valid for LoRA training"),
    "val-size-and-eval-dataset": ({"val_size": "0.1", "eval_dataset": "demo"},
                                  "`Cannot specify `val_size` if `eval_dataset` is not None`"),
    "mask-history-and-train-on-prompt": ({"mask_history": "true", "train_on_prompt": "true"},
                                         "`mask_history` is incompatible with `train_on_prompt`"),
    "interleave-probs-with-concat": ({"interleave_probs": "'1.0'"}, "`interleave_probs` is only valid for"),
    "export-quantization-without-dataset": ({"export_quantization_bit": "4"},
                                            "`Quantization dataset is necessary for exporting`"),
}  # fmt: skip


@pytest.mark.parametrize("row", list(RULE_ROWS))
def test_a_rule_between_keys_is_refused_with_its_code_path(work: Work, row: str) -> None:
    values, needle = RULE_ROWS[row]
    _set(work, values)
    last = refused(work.submit(), needle)
    assert last.endswith("nothing uploaded"), last
    checked = work.cli("check", str(work.spec), "--no-hub")
    line = next((x for x in checked.output.splitlines() if needle in x), checked.output)
    assert checked.exit_code == 1 and ": error: " in line and "(llamafactory 0.9.5 " in line, checked.output


# --- type errors get the fix that fits the key (jobs/spec/typefix.py) ------------------------------------
TYPE_ROWS: dict[str, tuple[dict[str, str], str]] = {
    "save-steps-given-a-strategy": ({"save_steps": "epoch"},
                                    "`save_steps` needs a float, got the text 'epoch' (fix: save_strategy: "
                                    "epoch"),
    "eval-steps-given-a-strategy": ({"eval_steps": "epoch"}, "(fix: eval_strategy: epoch"),
    "quantization-bit-given-a-type": ({"quantization_bit": "nf4"},
                                      "(fix: quantization_type: nf4 with quantization_bit: 4"),
    "quantization-bit-given-a-method": ({"quantization_bit": "hqq"}, "(fix: quantization_method: hqq with"),
    "warmup-steps-given-a-fraction": ({"warmup_steps": "0.1"},
                                      "`warmup_steps` needs an int, got float 0.1 (fix: warmup_ratio: 0.1"),
    "max-steps-given-a-fraction": ({"max_steps": "0.5"}, "(fix: num_train_epochs: 0.5 instead of max_steps"),
    "save-steps-fraction-quoted": ({"save_steps": "'0.1'"},
                                   "(fix: save_steps: 0.1 unquoted (below 1 transformers reads it as a "
                                   "fraction"),
    "warmup-ratio-in-percent": ({"warmup_ratio": "10%"}, "(fix: warmup_ratio: 0.1 (a fraction, unquoted)"),
    "batch-size-auto": ({"per_device_train_batch_size": "auto"},
                        "`auto` is DeepSpeed config syntax (its JSON takes it from these keys), not a value "
                        "here: a number, or auto_find_batch_size: true"),
    "gradient-accumulation-auto": ({"gradient_accumulation_steps": "auto"}, "give the number (default 1)"),
    "max-samples-all": ({"max_samples": "all"},
                        "(fix: remove max_samples (its default, null, means no limit)"),
    "cutoff-len-in-k": ({"cutoff_len": "2k"}, "(fix: cutoff_len: 2048 (tokens, unquoted))"),
    "lora-rank-quoted": ({"lora_rank": "'8'"},
                         "`lora_rank` needs an int, got the text '8' (fix: lora_rank: 8 (unquoted: a quoted "
                         "number is text"),
    "learning-rate-quoted": ({"learning_rate": "'1.0e-4'"}, "(fix: learning_rate: 1.0e-4 unquoted"),
    "lora-rank-fraction": ({"lora_rank": "8.5"}, "`lora_rank` needs an int, got float 8.5 (fix: a whole "
                           "number: lora_rank: 9)"),
    "quantization-bit-in-bits": ({"quantization_bit": "8bit"},
                                 "(fix: quantization_bit: 8 (the number of bits"),
    "warmup-steps-in-percent": ({"warmup_steps": "10%"}, "(fix: warmup_ratio: 0.1 instead of warmup_steps"),
    "bool-quoted": ({"bf16": "'yes'"}, "`bf16` needs true or false, got yes (fix: bf16: true (unquoted"),
    "bool-as-number": ({"bf16": "1"}, "`bf16` needs true or false, got 1 (fix: bf16: true)"),
    "lora-target-list-of-numbers": ({"lora_target": "[1, 2]"}, "`lora_target` needs a str, got list [1, 2]"),
    "number-as-one-item-list": ({"learning_rate": "[1.0e-4]"}, "(fix: one value, not a list: learning_rate: "
                                "0.0001)"),
}  # fmt: skip


@pytest.mark.parametrize("row", list(TYPE_ROWS))
def test_a_type_error_gets_the_fix_that_fits_its_key(work: Work, row: str) -> None:
    values, needle = TYPE_ROWS[row]
    _set(work, values)
    last = refused(work.submit(), needle)
    assert last.endswith("nothing uploaded"), last
    checked = work.cli("check", str(work.spec), "--no-hub")
    assert checked.exit_code == 1 and needle in checked.output, checked.output
    assert sum(": error: " in x for x in checked.output.splitlines()) == 1, checked.output


# Keys LLaMA-Factory reads only beside another key: set alone they are ignored, a warning with the reason.
IGNORED_ROWS: dict[str, tuple[dict[str, str], str]] = {
    "quantization-method-without-bit": ({"quantization_method": "hqq"},
                                        "`quantization_method` without quantization_bit: LLaMA-Factory"),
    "double-quantization-without-bit": ({"double_quantization": "true"}, "`double_quantization` without"),
    "ref-model-adapters-without-ref-model": ({"ref_model_adapters": "ref-adapter"},
                                             "`ref_model_adapters` without ref_model: LLaMA-Factory ignores"),
    "reward-model-adapters-with-lora-reward": (
        {"stage": "ppo", "reward_model": "rm", "reward_model_adapters": "rm-adapter"},
        "`reward_model_adapters` with reward_model_type lora or api: LLaMA-Factory ignores it"),
    "reward-model-outside-ppo": ({"reward_model": "rm"}, "`reward_model` outside stage ppo"),
    "ref-model-in-sft": ({"ref_model": "ref"}, "`ref_model` outside stages dpo, kto and ppo"),
    "lora-rank-with-full-tuning": ({"finetuning_type": "full", "lora_target": "all", "lora_rank": "8",
                                    "lora_alpha": "16"}, "`lora_rank` with finetuning_type freeze or full"),
    "freeze-layers-with-lora": ({"freeze_trainable_layers": "4"},
                                "`freeze_trainable_layers` with finetuning_type other than freeze"),
}  # fmt: skip


@pytest.mark.parametrize("row", list(IGNORED_ROWS))
def test_a_key_ignored_beside_another_is_a_warning_with_its_code_path(work: Work, row: str) -> None:
    values, needle = IGNORED_ROWS[row]
    _set(work, values)
    checked = work.cli("check", str(work.spec), "--no-hub")
    assert checked.exit_code == 0 and f": warning: {needle}" in checked.output, checked.output
    assert "(llamafactory 0.9.5 " in checked.output
    result = work.submit()
    assert result.exit_code == EXIT_FAILURE and "cannot reach ws1" in result.stderr, result.output


def test_an_eval_config_is_named_with_its_command_not_refused_key_by_key(work: Work) -> None:
    spec = work.dir / "mmlu.yaml"
    spec.write_text(f"model_name_or_path: {HUB_MODEL}\ntemplate: qwen\ntask: mmlu_test\nn_shot: 5\nlang: en\n"
                    "save_dir: saves/eval\nbatch_size: 4\n")  # fmt: skip
    last = refused(work.submit(spec), f"{spec}:3: error: an evaluation config for `llamafactory-cli eval`")
    assert "Evaluation will be deprecated" in work.submit(spec).stderr and "1 error(s)" in last
    checked = work.cli("check", str(spec), "--no-hub")
    assert checked.exit_code == 1 and "unknown key" not in checked.output, checked.output


def test_a_prediction_config_is_named_with_what_train_does(work: Work) -> None:
    _set(work, {"do_train": "false", "do_predict": "true", "predict_with_generate": "true",
                "eval_dataset": "demo"})  # fmt: skip
    checked = work.cli("check", str(work.spec), "--no-hub")
    assert checked.exit_code == 0, checked.output
    named = ": info: a prediction config (do_predict without do_train): `llamafactory-cli train`"
    assert named in checked.output, checked.output


def test_paths_with_spaces_quotes_and_unicode_are_read_as_they_are(work: Work) -> None:
    odd = work.dir / HOSTILE.replace("/", "_")
    odd.mkdir()
    spec = write_spec(odd, {"model_name_or_path": HUB_MODEL, "max_steps": 5}, name=f"{HOSTILE[:20]}.yaml")
    data = demodata.write_dataset(odd / "data")
    assert work.cli("check", str(spec)).exit_code == 0  # accepted: nothing in radeonlab reads it via a shell
    data.write_text(data.read_text() + "{broken\n")
    last = refused(work.submit(spec), f"{data}:{demodata.ROWS + 1}: error: malformed JSON")
    assert str(spec) in last


def test_a_hostile_spec_name_becomes_a_safe_job_id() -> None:
    job_id = new_job_id(HOSTILE)
    assert is_job_id(job_id) and job_id.startswith("my-job-touch-pwned-q-dq-id-e-"), job_id


@pytest.mark.parametrize("kind", ["valid-json", "garbage-no-newline"])
def test_a_50mb_single_line_is_checked_in_bounded_memory(work: Work, kind: str) -> None:
    big = "a" * (HUGE_LINE_MB << 20)
    if kind == "valid-json":
        work.data.write_text(json.dumps({"instruction": big, "input": "", "output": "A"}) + "\n")
    else:
        work.data.write_text(big)
    exe = str(Path(sys.executable).with_name("radeonlab"))
    start = time.monotonic()
    code, output, rss_mb = run_measured([exe, "check", str(work.spec)], HANG_GUARD_S)
    seconds = time.monotonic() - start
    print(f"\n{kind}: {HUGE_LINE_MB} MB line checked in {seconds:.2f}s, peak RSS {rss_mb:.0f} MB")
    assert rss_mb < HUGE_RSS_MB, rss_mb
    if kind == "valid-json":
        assert code == 0, output  # a long but valid row is data
    else:
        assert code == 1 and f"{work.data}:1: error: malformed JSON" in output
        assert len(output) < 2000  # the message does not echo the 50 MB line


def run_measured(argv: list[str], timeout_s: float) -> tuple[int, str, float]:
    """(exit code, stdout and stderr, peak RSS in MB) of one command, its peak measured by
    tests/support/peak_rss.py
    (a process's own rusage counts the copy of its parent it was before exec: here, the test session)."""
    with tempfile.TemporaryDirectory() as tmp:
        peak = Path(tmp) / "peak"
        probe = Path(__file__).parents[1] / "support" / "peak_rss.py"
        wrapped = [sys.executable, str(probe), str(peak), *argv]
        try:  # a reader stuck on the line fails, it does not hang
            done = subprocess.run(
                wrapped, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout_s
            )
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"{argv[1]} did not finish within {timeout_s} s") from exc
        return done.returncode, done.stdout.decode(errors="replace"), float(peak.read_text())


# --- specs ------------------------------------------------------------------------------------------------
NOT_A_MAPPING = ":1: a spec is a mapping of LLaMA-Factory keys, not a "
TPL = ":1: template error: "
LONG = "the template makes a value longer than 65536 characters"
DEEP = ":N: not valid YAML: nested more than 64 levels deep"
SPEC_ROWS: dict[str, tuple[bytes | None, str]] = {
    "not-yaml": (b"stage: sft\nkey: [unclosed\n  - x: y\n", ":3: not valid YAML"),
    "yaml-list": (b"- stage: sft\n- do_train: true\n", NOT_A_MAPPING + "list"),
    "yaml-scalar": (b"just some words\n", NOT_A_MAPPING + "str"),
    "empty": (b"", ":1: empty spec"),
    "not-utf8": (b"stage: sft\nmodel_name_or_path: caf\xe9\n", ":2: not UTF-8 text (byte 0xe9)"),
    "binary": (bytes(range(256)) * 4, ":2: not UTF-8 text (byte 0x80)"),
    "missing": (None, ":1: cannot read spec: No such file or directory"),
    # made to hang or exhaust the checker (the four in BOMB_ROWS below are also timed in a subprocess)
    "too-large": (b"k: x\n" + b"# pad\n" * 50_000, ":1: spec is larger than 256 KiB: not read"),
    "yaml-alias-to-itself": (b"k: x\nk2: &a [*a]\n", ":2: an alias names the node it is inside"),
    "yaml-deep-flow-nesting": (b"k: " + b"[" * 100_000 + b"]" * 100_000 + b"\n", DEEP.replace("N", "1")),
    "yaml-deep-block-nesting": ("".join(" " * i + f"k{i}:\n" for i in range(100)).encode(),
                                DEEP.replace("N", "64")),
    "jinja-range-too-long": (b"k: {{ range(100000)|length }}\n",
                             TPL + "range() of 100000 items: a spec template may use at most 10000"),
    "jinja-macro-bomb": (b"# {% macro f(n) %}{% if n %}{{ f(n-1) }}{{ f(n-1) }}{% endif %}{% endmacro %}"
                         b"{{ f(40) }}\n", TPL + "the template takes more than 100000 steps"),
    "jinja-macro-calls-itself": (b"k: 1\n# {% macro f() %}{{ f() }}{% endmacro %}{{ f() }}\n",
                                 TPL.replace("1", "2") + "maximum recursion depth exceeded"),
    "jinja-string-repeat": (b"k: {{ 'x' * 10000000000 }}\n", TPL + LONG),
    "jinja-power": (b"k: {{ 2 ** (10 ** 10) }}\n", TPL + "the template makes a number longer than 4096 bits"),
    "jinja-percent-width": (b"k: {{ '%0999999999d' % 1 }}\n",
                            TPL + "a `%` format with a width or precision of 10000 or more"),
    "jinja-format-method": (b"k: {{ '{:>999999999}'.format(1) }}\n",
                            TPL + "access to attribute 'format' of 'str' object is unsafe."),
    "jinja-center-filter": (b"k: {{ 'a'|center(10000000000) }}\n", TPL + "No filter named 'center'."),
    "jinja-namespace": (b"{% set ns = namespace(s='x') %}k: 1\n", TPL + "'namespace' is undefined"),
    "jinja-concat-doubling": (b"{% set a = 'xxxxxxxxxxxxxxxx' %}" + b"{% set a = a ~ a %}" * 40 + b"k: 1\n",
                              TPL + LONG),
    "jinja-join-amplifier": (b"k: {{ range(10000)|join('y' * 60000) }}\n", TPL + LONG),
    "jinja-replace-amplifier": (b"k: {{ ('y' * 60000)|replace('', 'zzzzzzzzzz') }}\n", TPL + LONG),
    "jinja-output-too-long": (b"# {% for i in range(1000) %}{{ 'x' * 60000 }}{% endfor %}\n",
                              TPL + "the rendered spec is longer than 262144 characters"),
    "jinja-recursive-loop": (b"# {% for i in [1] recursive %}{% endfor %}\n",
                             TPL + "recursive loops are not allowed in a spec"),
    "jinja-include": (b"{% include 'other.yaml' %}\n", TPL + "no loader for this environment specified"),
    "jinja-division-by-zero": (b"k: {{ 1 / 0 }}\n", TPL + "division by zero"),
    "jinja-dunder": (b"k: {{ ''.__class__.__mro__ }}\n",
                     TPL + "access to attribute '__class__' of 'str' object is unsafe."),
    "jinja-undefined-variable": (b"k: {{ env.RADEONLAB_TEST_NOT_SET }}\n",
                                 TPL + "'dict object' has no attribute 'RADEONLAB_TEST_NOT_SET'"),
}  # fmt: skip


@pytest.mark.parametrize("row", list(SPEC_ROWS))
def test_bad_spec_is_one_line_with_file_and_line(work: Work, row: str) -> None:
    content, needle = SPEC_ROWS[row]
    spec = work.dir / f"{row}.yaml"
    if content is not None:
        spec.write_bytes(content)
    last = refused(work.submit(spec))
    assert last == f"radeonlab: error: {spec}{needle}" or last.startswith(f"radeonlab: error: {spec}{needle}")


def _socket(folder: Path) -> Path:
    short = Path(tempfile.mkdtemp(prefix="rl-sock-"))  # an AF_UNIX path is at most 107 bytes
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(short / "spec.yaml"))
    return short / "spec.yaml"


def _symlink_loop(folder: Path) -> Path:
    (folder / "a.yaml").symlink_to(folder / "b.yaml")
    (folder / "b.yaml").symlink_to(folder / "a.yaml")
    return folder / "a.yaml"


def _under_a_file(folder: Path) -> Path:
    (folder / "plain").write_text("x")
    return folder / "plain" / "spec.yaml"


def _control_characters_in_name(folder: Path) -> Path:
    spec = folder / "bad\nname\x1b[31m.yaml"
    spec.write_text("k: [unclosed\n")
    return spec


SPEC_FILE_ROWS: dict[str, tuple[Callable[[Path], Path], str, str]] = {
    "socket": (_socket, "", ":1: spec is a socket, not a regular file: not read"),
    "symlink-loop": (_symlink_loop, "", ":1: cannot read spec: Too many levels of symbolic links"),
    "path-through-a-file": (_under_a_file, "", ":1: cannot read spec: Not a directory"),
    "control-characters-in-name": (_control_characters_in_name, "bad\\x0aname\\x1b[31m.yaml",
                                   ":2: not valid YAML: expected ',' or ']'"),
}  # fmt: skip


@pytest.mark.parametrize("row", list(SPEC_FILE_ROWS))
def test_a_spec_that_cannot_be_read_is_one_line(work: Work, row: str) -> None:
    make, shown_name, needle = SPEC_FILE_ROWS[row]
    spec = make(work.dir)
    name = str(spec.parent / shown_name) if shown_name else str(spec)
    result = work.submit(spec)
    assert result.stderr.count("\n") == 1, result.stderr  # one line, even with a newline in the name
    assert refused(result).startswith(f"radeonlab: error: {name}{needle}")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file of mode 000")
def test_an_unreadable_spec_is_one_line(work: Work) -> None:
    work.spec.chmod(0)
    assert refused(work.submit()) == f"radeonlab: error: {work.spec}:1: cannot read spec: Permission denied"


# --- specs made to hang or exhaust the checker -------------------------------------------------------------
BOMB_LIMIT_S = 5.0  # each of these ends within 5 s (a subprocess, killed at the limit: a hang fails the test)
ALIAS_BOMB = "model_name_or_path: x\na0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 10)
)  # 9**10 values once expanded, from 11 lines
LOOP_BOMB = "k: x\n# {% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}\n"


def _fifo(folder: Path) -> Path:
    os.mkfifo(folder / "spec.yaml")
    return folder / "spec.yaml"


def _dev_zero(folder: Path) -> Path:
    (folder / "spec.yaml").symlink_to("/dev/zero")
    return folder / "spec.yaml"


def _text(text: str) -> Callable[[Path], Path]:
    def make(folder: Path) -> Path:
        (folder / "spec.yaml").write_text(text)
        return folder / "spec.yaml"

    return make


BOMB_ROWS: dict[str, tuple[Callable[[Path], Path], str]] = {
    "fifo": (_fifo, ":1: spec is a FIFO (named pipe), not a regular file: not read"),
    "link-to-dev-zero": (_dev_zero, ":1: spec is a character device, not a regular file: not read"),
    "yaml-alias-bomb": (_text(ALIAS_BOMB), ":7: aliases expand the spec to more than 100000 values"),
    "jinja-loop-bomb": (_text(LOOP_BOMB), ":2: template error: the template takes more than 100000 steps"),
}


@pytest.mark.parametrize("row", list(BOMB_ROWS))
def test_a_spec_made_to_hang_the_checker_is_one_line_within_5_s(work: Work, row: str) -> None:
    make, needle = BOMB_ROWS[row]
    spec = make(work.dir)
    exe = str(Path(sys.executable).with_name("radeonlab"))
    # The 5 s are the checker's: the CLI's own start-up under this machine's load right now (the other test
    # worker may be training) is measured first and added, so a loaded machine does not fail a checker that
    # ends in time.
    t0 = time.monotonic()
    subprocess.run([exe, "--version"], capture_output=True, env=_env(), timeout=60)
    limit = BOMB_LIMIT_S + (time.monotonic() - t0)
    for verb, code in (("submit", EXIT_USAGE), ("check", 1)):  # check: 1 when it finds errors (a linter)
        argv = [exe, verb, str(spec)] + (["-i", str(work.inventory)] if verb == "submit" else ["--no-hub"])
        start = time.monotonic()
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=limit, env=_env())
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"{verb} {row}: still running after {limit:.1f} s") from exc
        print(f"\n{row}: {verb} ended in {time.monotonic() - start:.2f} s")
        assert done.returncode == code, (verb, done.stdout, done.stderr)
        lines = (done.stdout + done.stderr).strip().splitlines()
        if verb == "submit":
            assert len(lines) == 1 and lines[0].startswith(f"radeonlab: error: {spec}{needle}"), lines
        else:
            assert lines[0].startswith(f"{spec}{needle.replace(': ', ': error: ', 1)}"), lines
            assert len(lines) == 2 and "1 error(s)" in lines[1], lines


def _env() -> dict[str, str]:
    return {**os.environ, **HUB_ENV}


OVERRIDE_ROWS: dict[str, tuple[str, str]] = {  # `submit SPEC key=value`: each value is read like a spec
    "override-alias-to-itself": ("lora_target=&a [*a]", ": an alias names the node it is inside"),
    "override-nested-200-deep": ("lora_target=" + "[" * 200 + "]" * 200,
                                 "the value is not valid YAML (nested more"),
}  # fmt: skip


@pytest.mark.parametrize("row", list(OVERRIDE_ROWS))
def test_a_bad_override_is_one_line(work: Work, row: str) -> None:
    pair, needle = OVERRIDE_ROWS[row]
    last = refused(work.submit(None, pair))
    assert last.startswith("radeonlab: error: override ") and needle in last, last


def _bad_spec(work: Work, table: str, row: str) -> Path:
    """The input of one row of the spec, dataset and value tables, made in `work`; the spec to check."""
    if table == "spec":
        content = SPEC_ROWS[row][0]
        spec = work.dir / f"{row}.yaml"
        if content is not None:
            spec.write_bytes(content)
        return spec
    if table in ("spec-file", "bomb"):
        return (SPEC_FILE_ROWS[row][0] if table == "spec-file" else BOMB_ROWS[row][0])(work.dir)
    if table == "dataset":
        DATASET_ROWS[row][0](work)
    else:
        tables = {
            "value": VALUE_ROWS,
            "history": HISTORY_ROWS,
            "warning": WARNING_ROWS,
            "rule": RULE_ROWS,
            "ignored": IGNORED_ROWS,
            "type": TYPE_ROWS,
        }
        _set(work, tables[table][row][0])
    return work.spec


EVERY_BAD_INPUT = [
    *(("spec", r) for r in SPEC_ROWS),
    *(("spec-file", r) for r in SPEC_FILE_ROWS),
    *(("bomb", r) for r in BOMB_ROWS),
    *(("dataset", r) for r in DATASET_ROWS),
    *(("value", r) for r in VALUE_ROWS),
    *(("history", r) for r in HISTORY_ROWS),
    *(("warning", r) for r in WARNING_ROWS),
    *(("rule", r) for r in RULE_ROWS),
    *(("ignored", r) for r in IGNORED_ROWS),
    *(("type", r) for r in TYPE_ROWS),
]
WARNS_ONLY = ("warning", "ignored")  # tables whose rows check passes with a warning (exit 0)
EXCEPTION_NAME = re.compile(r"\b[A-Z]\w*(Error|Exception|Warning)\b:|Traceback")


@pytest.mark.parametrize(("table", "row"), EVERY_BAD_INPUT, ids=[f"{t}:{r}" for t, r in EVERY_BAD_INPUT])
def test_check_never_prints_a_python_exception_name_as_the_message(work: Work, table: str, row: str) -> None:
    spec = _bad_spec(work, table, row)
    result = work.cli("check", str(spec), "--no-hub")
    assert result.exit_code == (0 if table in WARNS_ONLY else 1), result.output
    assert not EXCEPTION_NAME.search(result.output), result.output
    lines = result.output.strip().splitlines()
    finding = re.compile(r".+(:\d+| \(a command-line override\)): (error|warning|info): ")
    assert lines and all(finding.match(line) for line in lines[:-1]), lines


# --- inventories, hosts, job ids ---------------------------------------------------------------------------
INVENTORY_ROWS: dict[str, tuple[str | None, str]] = {
    "syntax-error": ('ws1 = [("ws1", {"ssh_port": 1)]\n', ":1: SyntaxError: closing parenthesis"),
    "raises": ('raise RuntimeError("no inventory today")\n', ":1: RuntimeError: no inventory today"),
    "missing": (None, ": no such inventory file"),
}


@pytest.mark.parametrize("row", list(INVENTORY_ROWS))
def test_bad_inventory_is_one_line(work: Work, row: str) -> None:
    text, needle = INVENTORY_ROWS[row]
    inventory = work.dir / f"inv-{row}.py"
    if text is not None:
        inventory.write_text(text)
    result = work.cli("submit", str(work.spec), "-i", str(inventory))
    assert refused(result) == f"radeonlab: error: {inventory}{needle}" or needle in result.stderr


def test_unknown_host_names_the_known_ones(work: Work) -> None:
    last = refused(work.submit(None, "--host", "ws9"))
    assert last.startswith("radeonlab: error: unknown host 'ws9'; known hosts: ws1"), last


@pytest.mark.parametrize("extra", [(), ("--nodes", "2")])
def test_an_inventory_without_hosts_says_so(work: Work, extra: tuple[str, ...]) -> None:
    work.inventory.write_text("x = 1\n")
    last = refused(work.submit(None, *extra))
    assert last == f"radeonlab: error: {work.inventory}: the inventory has no hosts"


def test_slurm_without_a_controller_group_is_one_line_before_ssh(work: Work) -> None:
    work.inventory.write_text(CLOSED_INVENTORY.replace('"lab"}', '"lab", "radeonlab_scheduler": "slurm"}'))
    last = refused(work.submit())
    assert last.startswith("radeonlab: error: radeonlab_scheduler is slurm for ws1 but the inventory has no "
                           "slurm_controller group"), last  # fmt: skip


@pytest.mark.parametrize("verb", ["status", "cancel", "logs", "fetch", "watch"])
def test_a_hostile_job_id_is_refused_before_ssh(work: Work, verb: str) -> None:
    last = refused(work.cli(verb, f"../../etc; {HOSTILE}", "-i", str(work.inventory)))
    assert last.startswith("radeonlab: error: not a radeonlab job id: "), last


@pytest.mark.sandbox
def test_a_host_that_is_not_provisioned_is_one_line_and_untouched(work: Work, sandbox: Sandbox) -> None:
    host = sandbox.create_host("bi-bare", card="rx7900xtx")  # a reachable host that never ran the deploy
    try:
        before = host.exec(
            "find /home/lab /etc/radeonlab -printf '%p %s %m\\n' 2>/dev/null | sort", check=False
        )
        result = CliRunner().invoke(
            main,
            ["submit", str(work.spec), "-i", str(REPO / "inventories/sandbox.py"), "--host", "bi-bare"],
            env={
                "RADEONLAB_SANDBOX_DIR": str(sandbox.state_dir),
                "RADEONLAB_HOME": str(work.dir / "home"),
                **HUB_ENV,
            },
            catch_exceptions=False,
        )
        after = host.exec(
            "find /home/lab /etc/radeonlab -printf '%p %s %m\\n' 2>/dev/null | sort", check=False
        )
    finally:
        sandbox.destroy_host("bi-bare")
    assert result.exit_code == EXIT_FAILURE, result.output  # the host failed, not the input
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "radeonlab: error: bi-bare is not provisioned (no /etc/radeonlab/host.json): provision it first: "
        )
    )
    # Untouched but for radeonlab's host code, which the probe needs to read the host at all (installed on
    # first use in ~/.cache/radeonlab/code/<digest>, jobs/ssh/connection.py): no job folder, no record.
    added = set(after.stdout.splitlines()) - set(before.stdout.splitlines())
    assert set(before.stdout.splitlines()) <= set(after.stdout.splitlines())
    assert added and all(
        line.startswith(("/home/lab/.cache ", "/home/lab/.cache/radeonlab")) for line in added
    )
    assert f"/home/lab/.cache/radeonlab/code/{hostcode.digest()} " in after.stdout
    assert "/home/lab/radeonlab" not in after.stdout and "/etc/radeonlab" not in after.stdout

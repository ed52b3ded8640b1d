"""A value of the wrong type: `type_problem(...)`, one error with the fix fitted to its key.

checks.py asks `type_ok` and, when it is not, `type_problem`. The generic fixes (unquote a number, quote a
text, use true or false) apply where no fix fits the key better. Where each fitted fix comes from:
- steps keys (save/eval/logging_steps) given a strategy word: the word belongs to the sibling
  `<prefix>_strategy` (found through the choices in lf_args.json, any key that shares the first word);
  quantization_bit given `nf4` or `hqq`: quantization_type / quantization_method, the bits stay a number;
- a fraction for an integer steps key: warmup_steps -> warmup_ratio, max_steps -> num_train_epochs;
- a fraction as text for save/eval/logging_steps: transformers reads a float below 1 as a fraction of the
  total steps (transformers 4.57.6 trainer_callback.py TrainerState.compute_steps: `math.ceil(max_steps *
  num_steps)`), so the number unquoted is what was meant; `10%` is 0.1 there and for the ratio keys;
- `auto`: DeepSpeed config syntax (its JSON takes `auto` from the trainer's own values), not a
  LLaMA-Factory value; for the batch size transformers' auto_find_batch_size is the real switch;
- `2k` for a token length: 2048 (a `k` of tokens is 1024 in model context sizes); `8bit` for
  quantization_bit: 8;
- `all` / `none` for a count that is null by default: null (no limit) is the default, remove the key;
- a YAML list for a key LLaMA-Factory splits at commas whose items are not plain names (the loader joins a
  list of names: load.py COMMA_KEYS): one comma-separated text; a one-item list for a number: the number.
"""

from __future__ import annotations

import math
import re
from typing import Any

from radeonlab.jobs.spec import lf_args
from radeonlab.jobs.spec.load import COMMA_KEYS
from radeonlab.jobs.spec.problems import ERROR, Problem, show_value

STEP_FRACTION_KEYS = ("save_steps", "eval_steps", "logging_steps")
RATIO_KEYS = ("warmup_ratio", "val_size", "lora_dropout", "weight_decay", *STEP_FRACTION_KEYS)
SIBLING_FOR_FRACTION = {
    "warmup_steps": ("warmup_ratio", "a fraction of the run is warmup_ratio (warmup_steps counts steps)"),
    "max_steps": ("num_train_epochs", "a fraction of the data is num_train_epochs (max_steps counts steps)"),
}
TOKEN_KEYS = ("cutoff_len", "max_new_tokens", "max_length", "model_max_length", "generation_max_length")
DEEPSPEED_AUTO = "`auto` is DeepSpeed config syntax (its JSON takes it from these keys), not a value here"
TRUE_WORDS, FALSE_WORDS = ("true", "yes", "on", "1"), ("false", "no", "off", "0")
_STEPS_NOTE = " (below 1 transformers reads it as a fraction of the total steps: TrainerState.compute_steps)"
_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")
_KILO = re.compile(r"^\s*(\d+)\s*[kK]\s*$")
_BITS = re.compile(r"^\s*(\d+)\s*-?\s*bits?\s*$", re.IGNORECASE)


def type_ok(value: Any, types: list[str]) -> bool:
    """Whether `value` (as YAML read it) is one of lf_args.json's `types`; a whole float counts as an int."""
    if isinstance(value, bool):
        return "bool" in types
    if isinstance(value, int):
        return "int" in types or "float" in types
    if isinstance(value, float):
        return "float" in types or ("int" in types and value.is_integer())
    names: dict[type, str] = {str: "str", list: "list", dict: "dict"}
    return names.get(type(value)) in types


def type_problem(file: str, line: int, key: str, value: Any, types: list[str]) -> Problem:
    """The error for `key: value` whose type is not one of `types`, with the fix that fits the key."""
    want = ("an " if types[0] == "int" else "a ") + " or ".join(types)
    fitted = fix_for(key, value, types)
    if isinstance(value, str) and ("float" in types or "int" in types):
        fix = fitted or "write the number unquoted, with a dot for floats (e.g. 1.0e-4)"
        return Problem(file, line, f"`{key}` needs {want}, got the text {value!r}", ERROR, fix)
    if "bool" in types:
        return Problem(file, line, f"`{key}` needs true or false, got {show_value(value)}", ERROR,
                       fitted or "use true or false")  # fmt: skip
    if fitted is None and types == ["str"] and isinstance(value, int | float):
        # HfArgumentParser.parse_dict converts nothing: the number reaches LLaMA-Factory as a number, and
        # `dataset: 123` stops in split_arg's loop (`'int' object is not iterable`)
        fitted = f'quote it: {key}: "{show_value(value)}"'
    got = f"{type(value).__name__} {show_value(value)}"
    return Problem(file, line, f"`{key}` needs {want}, got {got}", ERROR, fitted)


def fix_for(key: str, value: Any, types: list[str]) -> str | None:
    """A fix for `key: value` whose type is wrong, fitted to the key; None when none fits better."""
    if isinstance(value, list):
        return _list_fix(key, value, types)
    if isinstance(value, float) and "int" in types and not value.is_integer():
        if key in SIBLING_FOR_FRACTION:
            sibling, why = SIBLING_FOR_FRACTION[key]
            return f"{sibling}: {value} instead of {key} ({why})"
        return f"a whole number: {key}: {max(1, math.ceil(value))}"
    if isinstance(value, int | float) and "bool" in types and value in (0, 1):
        return f"{key}: {'true' if value else 'false'}"
    if not isinstance(value, str):
        return None
    return _text_fix(key, value.strip(), types)


def _text_fix(key: str, text: str, types: list[str]) -> str | None:
    lower = text.lower()
    choice = _related_choice(key, text)
    if choice is not None:
        return choice
    if "bool" in types and lower in TRUE_WORDS + FALSE_WORDS:
        return f"{key}: {'true' if lower in TRUE_WORDS else 'false'} (unquoted: a quoted word is text)"
    if lower == "auto":
        if key == "per_device_train_batch_size":
            return (
                f"{DEEPSPEED_AUTO}: a number, or auto_find_batch_size: true (transformers halves it on OOM)"
            )
        return f"{DEEPSPEED_AUTO}: give the number (default {show_value(lf_args.default(key))})"
    if lower in ("all", "none", "null", "unlimited") and lf_args.keys().get(key, {}).get("nullable"):
        return f"remove {key} (its default, null, means no limit)"
    percent = _PERCENT.match(text)
    if percent and (key in RATIO_KEYS or key in SIBLING_FOR_FRACTION):
        fraction = f"{float(percent[1]) / 100:g}"
        if key in SIBLING_FOR_FRACTION:
            sibling, why = SIBLING_FOR_FRACTION[key]
            return f"{sibling}: {fraction} instead of {key} ({why})"
        note = _STEPS_NOTE if key in STEP_FRACTION_KEYS else ""
        return f"{key}: {fraction} (a fraction, unquoted){note}"
    kilo = _KILO.match(text)
    if kilo and key in TOKEN_KEYS:
        return f"{key}: {int(kilo[1]) * 1024} (tokens, unquoted)"
    bits = _BITS.match(text)
    if bits and key == "quantization_bit":
        return f"quantization_bit: {bits[1]} (the number of bits, unquoted)"
    if not _is_number(text):
        return None
    if key in STEP_FRACTION_KEYS and float(text) < 1:
        return f"{key}: {text} unquoted" + _STEPS_NOTE
    if "float" not in types and float(text).is_integer():
        return f"{key}: {int(float(text))} (unquoted: a quoted number is text, which LLaMA-Factory passes on)"
    return f"{key}: {text} unquoted (a quoted number is text, which LLaMA-Factory passes on)"


def _list_fix(key: str, value: list[Any], types: list[str]) -> str | None:
    if key in COMMA_KEYS and "str" in types and all(isinstance(v, str) for v in value):
        return f"one comma-separated text: {key}: {', '.join(value)}"
    if len(value) == 1 and ("int" in types or "float" in types) and type_ok(value[0], types):
        return f"one value, not a list: {key}: {show_value(value[0])}"
    return None


def _related_choice(key: str, text: str) -> str | None:
    """`save_steps: epoch` -> `save_strategy: epoch`: the text is a choice of a key with its first word."""
    head = key.split("_")[0]
    for other, info in lf_args.keys().items():
        if other == key or other.split("_")[0] != head:
            continue
        choices = [str(c).lower() for c in info.get("choices") or []]
        if text.lower() not in choices:
            continue
        if key == "quantization_bit":
            return (f"{other}: {text} with quantization_bit: 4 (`{text}` is a choice of {other}; "
                    "quantization_bit is the number of bits)")  # fmt: skip
        if key.endswith("_steps"):
            return f"{other}: {text} and remove {key} (`{text}` is a choice of {other}; {key} counts steps)"
        return f"{other}: {text} (`{text}` is a choice of {other}; {key} takes a number)"
    return None


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False

"""Checks of a job spec before anything is uploaded: `check_spec(spec) -> list[Problem]`.

Shared by `radeonlab check` and `radeonlab submit`. Every rule either mirrors what LLaMA-Factory 0.9.5 itself
refuses (unknown keys, enum values, both precisions) or catches what it accepts silently and regrets later
(rows dropped from a dataset, `flash_attn: bogus` failing only at model load). Keys and choices come from the
generated list in jobs/spec/lf_args.json; known mistakes are the data tables below.
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path
from typing import Any

from radeonlab.errors import SpecError
from radeonlab.jobs.spec import (
    files,
    inputs,
    kinds,
    lf_args,
    lf_key_history,
    lf_rules,
    needs,
    paths,
    ranges,
    tokens,
)
from radeonlab.jobs.spec.load import DEFAULT_DATASET_DIR, Spec
from radeonlab.jobs.spec.problems import ERROR, INFO, WARNING, Problem, name_overrides

DATASET_INFO = "dataset_info.json"  # extras/constants.py DATA_CONFIG
MAX_INFO_BYTES = 16 << 20  # LLaMA-Factory's own dataset_info.json is 20 KB
DID_YOU_MEAN_CUTOFF = 0.75

# Keys people write that LLaMA-Factory does not have (the seed project's config among them):
# key -> {YAML value as written -> the replacement}; "*" matches any value.
KNOWN_WRONG_KEYS: dict[str, dict[str, Any]] = {
    "disable_flash_attn": {
        "why": "not a LLaMA-Factory key (the parser stops: `Some keys are not used by the HfArgumentParser`)",
        "fix": {True: "flash_attn: disabled", False: "remove it (flash_attn: auto is the default)"},
    },
    "compute_type": {
        "why": "not a LLaMA-Factory key (the parser stops: `Some keys are not used by the HfArgumentParser`)",
        "fix": {"bf16": "bf16: true", "fp16": "fp16: true", "fp32": "remove it (fp32 is the default)"},
    },
}
# Values that are wrong for a valid key: (key, value) -> (why, fix).
KNOWN_WRONG_VALUES: dict[tuple[str, Any], tuple[str, str]] = {
    ("ddp_backend", "pytorch"): (
        "`pytorch` is not a ddp_backend (choices: nccl, gloo, mpi, ccl, hccl, cncl, mccl); "
        "a single-process run "
        "stops with `Default process group has not been initialized`",
        "remove ddp_backend: one GPU needs none, and several GPUs get the right one from torchrun",
    ),
}

# Files that are YAML but not a LLaMA-Factory training config: kind -> keys that identify it.
OTHER_CONFIG_KINDS: dict[str, tuple[str, ...]] = {
    "an accelerate config (pass it to `accelerate launch --config_file`)": (
        "compute_environment",
        "distributed_type",
    ),
    "a LLaMA-Factory v1 config (`model:` instead of `model_name_or_path:`)": ("model", "model_class"),
}
# Keys of Megatron-Core training (USE_MCA=1, mcore_adapter): present -> extra keys come from mcore_adapter,
# which the generated list does not cover, so unknown keys are only warnings.
MEGATRON_KEYS = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "expert_model_parallel_size")


def check_path(
    path: str | Path, dataset_dir: Path | None = None, on_host: paths.OnHost | None = None
) -> list[Problem]:
    """Load and check a spec file; a spec that cannot be loaded is one error Problem."""
    from radeonlab.jobs.spec import load as spec_module

    try:
        loaded = spec_module.load(path)
    except SpecError as err:
        return [Problem(err.file, err.line, err.message)]
    return check_spec(loaded, dataset_dir=dataset_dir, on_host=on_host)


def check_spec(
    spec: Spec, dataset_dir: Path | None = None, on_host: paths.OnHost | None = None
) -> list[Problem]:
    """All problems of a loaded spec. dataset_dir overrides where the spec's `dataset_dir` points; on_host:
    what a host holds of the spec's workstation folders (`check --host`; without it they are warnings)."""
    file = str(spec.path)
    problems = [Problem(file, line, message) for line, message in spec.block_problems]
    train = spec.train
    known = lf_args.keys()

    other = _other_kind(train, known)
    if other and not spec.lines.get("radeonlab"):
        return problems + [
            Problem(file, 1, f"not a LLaMA-Factory training spec: {other}; nothing checked", WARNING)
        ]
    if kinds.kind(spec) == kinds.EVAL:
        return problems + [kinds.eval_problem(spec)]
    megatron = any(k in train for k in MEGATRON_KEYS)
    if megatron:
        problems.append(
            Problem(
                file,
                spec.line_of(next(k for k in MEGATRON_KEYS if k in train)),
                "Megatron-Core training (USE_MCA=1): its mcore_adapter keys are not in radeonlab's "
                "key list and are not checked",
                WARNING,
            )
        )

    for key, value in train.items():
        problems += _check_key(spec, key, value, known, megatron)
    problems += tokens.credential_problems(spec)
    problems += _check_combinations(spec)
    if kinds.kind(spec) == kinds.TRAIN:  # get_train_args' rules; chat and export configs have their own
        problems += lf_rules.rule_problems(spec) + kinds.run_problems(spec)
    problems += files.block_file_problems(spec)
    problems += files.file_problems(spec)
    problems += paths.host_path_problems(spec, on_host)
    problems += files.output_problems(spec)
    problems += ranges.range_problems(spec)
    problems += needs.key_problems(spec)
    problems += kinds.export_problems(spec, submitting=False)
    problems += _check_datasets(spec, dataset_dir)
    return name_overrides(problems, spec.overrides)


def _other_kind(train: dict[str, Any], known: dict[str, Any]) -> str | None:
    for kind, markers in OTHER_CONFIG_KINDS.items():
        if any(k in train for k in markers) and "model_name_or_path" not in train:
            return kind
    if train and not any(k in known for k in train):
        return "none of its keys is a LLaMA-Factory key"
    return None


def _check_key(spec: Spec, key: Any, value: Any, known: dict[str, Any], megatron: bool) -> list[Problem]:
    file, line = str(spec.path), spec.line_of(str(key))
    if key in KNOWN_WRONG_KEYS:
        entry = KNOWN_WRONG_KEYS[key]
        fixes = entry["fix"]
        fix = fixes.get(value if not isinstance(value, str) else value.lower(), fixes.get("*"))
        if fix is None:
            fix = "remove it; " + " / ".join(f"{k!s} -> {v}" for k, v in fixes.items())
        return [Problem(file, line, f"`{key}: {_show(value)}`: {entry['why']}", ERROR, fix)]
    history = lf_key_history.history_fix(str(key), value) if key not in known else None
    if history is not None:
        return [Problem(file, line, f"`{key}`: {history[0]}", ERROR, history[1])]
    if key not in known:
        close = difflib.get_close_matches(str(key), list(known), n=1, cutoff=DID_YOU_MEAN_CUTOFF)
        fix = f"did you mean `{close[0]}`?" if close else "remove it"
        if megatron:
            return [
                Problem(
                    file,
                    line,
                    f"`{key}` is not a LLaMA-Factory key; valid only if mcore_adapter defines it",
                    WARNING,
                    fix if close else None,
                )
            ]
        return [
            Problem(
                file,
                line,
                f"unknown key `{key}`: LLaMA-Factory stops with `Some keys are not used by "
                "the HfArgumentParser`",
                ERROR,
                fix,
            )
        ]
    if isinstance(value, str | int | float) and (key, value) in KNOWN_WRONG_VALUES:
        why, fix = KNOWN_WRONG_VALUES[(key, value)]
        return [Problem(file, line, f"`{key}: {_show(value)}`: {why}", ERROR, fix)]
    return _check_value(file, line, key, value, known[key])


def _check_value(file: str, line: int, key: str, value: Any, info: dict[str, Any]) -> list[Problem]:
    types, choices = info["types"], info.get("choices")
    if value is None:
        if info["nullable"]:
            return []
        return [
            Problem(
                file,
                line,
                f"`{key}` is empty (null) but needs a value",
                ERROR,
                f"remove it (default: {_show(info['default'])})",
            )
        ]
    if choices is not None and isinstance(value, str | int | float) and not isinstance(value, bool):
        if value not in choices and str(value) not in map(str, choices):
            close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1, cutoff=0.6)
            hint = f"did you mean `{close[0]}`?" if close else f"one of: {', '.join(map(str, choices[:12]))}"
            if len(choices) > 12 and not close:
                hint += ", ..."
            return [Problem(file, line, f"`{key}: {_show(value)}` is not a valid value", ERROR, hint)]
        return []
    if "any" in types or _type_ok(value, types):
        return []
    want = " or ".join(types)
    if isinstance(value, str) and ("float" in types or "int" in types):
        unquote = "write the number unquoted, with a dot for floats (e.g. 1.0e-4)"
        return [Problem(file, line, f"`{key}` needs a {want}, got the text {value!r}", ERROR, unquote)]
    if "bool" in types:
        return [
            Problem(
                file, line, f"`{key}` needs true or false, got {_show(value)}", ERROR, "use true or false"
            )
        ]
    fix: str | None = None
    if types == ["str"] and isinstance(value, int | float):
        # HfArgumentParser.parse_dict converts nothing: the number reaches LLaMA-Factory as a number, and
        # `dataset: 123` stops in split_arg's loop (`'int' object is not iterable`)
        fix = f'quote it: {key}: "{_show(value)}"'
    return [
        Problem(file, line, f"`{key}` needs a {want}, got {type(value).__name__} {_show(value)}", ERROR, fix)
    ]


def _type_ok(value: Any, types: list[str]) -> bool:
    if isinstance(value, bool):
        return "bool" in types
    if isinstance(value, int):
        return "int" in types or "float" in types
    if isinstance(value, float):
        return "float" in types or ("int" in types and value.is_integer())
    names: dict[type, str] = {str: "str", list: "list", dict: "dict"}
    pytype = names.get(type(value))
    return pytype in types


def _check_combinations(spec: Spec) -> list[Problem]:
    file, train, out = str(spec.path), spec.train, []

    def add(line: int, message: str, severity: str, fix: str) -> None:
        out.append(Problem(file, line, message, severity, fix))

    if train.get("bf16") is True and train.get("fp16") is True:
        add(spec.line_of("fp16"), "bf16 and fp16 are both true (transformers refuses it)", ERROR,
            "keep one: bf16 on RDNA3/CDNA cards that support it, else fp16")  # fmt: skip
    if "model_name_or_path" not in train:
        add(1, "`model_name_or_path` is missing (LLaMA-Factory: `Please provide model_name_or_path`)", ERROR,
            "add model_name_or_path: <hub id or local folder>")  # fmt: skip
    named = train.get("dataset") or spec.radeonlab.datasets  # render fills `dataset` from the block's
    if train.get("do_train") is True and not named and not train.get("tokenized_path"):
        add(spec.line_of("do_train"), "do_train is true but no `dataset` is given", ERROR,
            "add dataset: <names from dataset_info.json>")  # fmt: skip
    runs = any(train.get(k) is True for k in ("do_train", "do_eval", "do_predict"))
    if not runs and "export_dir" not in train:
        add(1, "none of do_train/do_eval/do_predict is true: `llamafactory-cli train` would load the model "
            "and do nothing", WARNING, "add do_train: true for a training job")  # fmt: skip
    return out


# ------------------------------------------------------------------------------------------------ datasets


def _names(value: Any) -> list[str]:
    """LLaMA-Factory's split_arg: a comma-separated string (or a YAML list) of dataset names."""
    if isinstance(value, list):
        return [str(v).strip() for v in value]
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return []


def _check_datasets(spec: Spec, override: Path | None) -> list[Problem]:
    from radeonlab.jobs.spec import datasets

    file = str(spec.path)
    train = spec.train
    stage = datasets.DATA_STAGE.get(str(train.get("stage", "sft")), "sft")
    wanted = [(key, name) for key in ("dataset", "eval_dataset") for name in _names(train.get(key))]
    generated = {d.name: d for d in spec.radeonlab.datasets}
    if "dataset" not in train:  # render (jobs/plan/render.py) sets `dataset` to the block's datasets
        wanted += [(f"radeonlab.datasets.{i}", d.name) for i, d in enumerate(spec.radeonlab.datasets)]
    if not wanted:
        return []
    data_dir = spec.dataset_dir()
    if data_dir is not None and override is not None:  # a hub dataset_dir stays on the hub
        data_dir = override
    out: list[Problem] = []
    info: dict[str, Any] | None = None
    info_path = data_dir / DATASET_INFO if data_dir else None
    if data_dir is None:
        out.append(
            Problem(
                file,
                spec.line_of("dataset_dir"),
                f"dataset_dir {train.get('dataset_dir')!r}: "
                f"{DATASET_INFO} and its datasets are fetched from the hub on the host; not checked here",
                INFO,
            )
        )
    elif any(name not in generated for _, name in wanted):
        line = spec.line_of("dataset_dir") if "dataset_dir" in train else 1
        info, problem = _read_info(info_path, file, line, spec if override is None else None)
        if problem:
            return out + [problem]

    checked: set[tuple[str, str]] = set()
    for key, name in wanted:
        line = spec.line_of(key)
        if name in generated:
            entry = generated[name].info_entry()
            path = spec.base_dir / generated[name].file
        elif info is None:
            continue
        elif name not in info:
            close = difflib.get_close_matches(name, list(info), n=1, cutoff=DID_YOU_MEAN_CUTOFF)
            out.append(
                Problem(
                    file,
                    line,
                    f"dataset {name!r} is not defined in {info_path} (LLaMA-Factory: "
                    f"`Undefined dataset {name}`)",
                    ERROR,
                    f"did you mean `{close[0]}`?"
                    if close
                    else "add it to dataset_info.json or to radeonlab.datasets",
                )
            )
            continue
        else:
            entry = info[name]
            if not isinstance(entry, dict):
                out.append(Problem(str(info_path), 1, f"entry {name!r} is not an object"))
                continue
            hub = [
                k
                for k in ("hf_hub_url", "ms_hub_url", "om_hub_url", "script_url", "cloud_file_name")
                if k in entry
            ]
            if hub:
                out.append(
                    Problem(
                        file,
                        line,
                        f"dataset {name!r} ({entry[hub[0]]}) is fetched from the hub on the "
                        "host; not checked here",
                        INFO,
                    )
                )
                continue
            if "file_name" not in entry:
                out.append(Problem(str(info_path), 1, f"entry {name!r} has no file_name or hub url"))
                continue
            file_name = str(entry["file_name"])
            if Path(file_name).name != file_name or file_name in ("", ".", ".."):
                # submit uploads each dataset file flat into the job's data/ folder under its own name:
                # `../x.jsonl` or `sub/x.jsonl` would train on nothing (LLaMA-Factory finds no file there)
                out.append(
                    Problem(
                        str(info_path),
                        1,
                        f"entry {name!r}: file_name {file_name!r} is not a file directly inside "
                        f"{data_dir} (radeonlab uploads dataset files flat into the job's data/ folder)",
                        ERROR,
                        f"move the file into {data_dir} and set file_name to its bare name",
                    )
                )
                continue
            path = data_dir / file_name  # type: ignore[operator]
        ranking = bool(entry.get("ranking", False))
        if ranking != (stage == "rm"):
            out.append(
                Problem(
                    file,
                    line,
                    f"dataset {name!r} is {'' if ranking else 'not '}a ranking dataset but "
                    f"stage is {train.get('stage', 'sft')!r} (LLaMA-Factory: `The dataset is not "
                    "applicable in the current training stage`)",
                    ERROR,
                    "ranking datasets go with stage rm or dpo"
                    if ranking
                    else "use a dataset with `ranking: true` for rm/dpo",
                )
            )
            continue
        attr = datasets.DatasetAttr.from_info(entry)
        ident = (str(path), json.dumps(entry, sort_keys=True))
        if ident in checked:
            continue
        checked.add(ident)
        out += datasets.check_file(path, attr, stage)
    return out


def _read_info(
    path: Path | None, file: str, line: int, spec: Spec | None = None
) -> tuple[dict[str, Any] | None, Problem | None]:
    assert path is not None
    if not os.path.lexists(path):
        # In an LLaMA-Factory checkout, `data` is read from its working folder: the fix is the spec-relative
        # spelling, found the way files.py finds a deepspeed file written relative to the checkout's root.
        value = str(spec.train.get("dataset_dir", DEFAULT_DATASET_DIR)) if spec else ""
        found = files.found_elsewhere(spec, value, DATASET_INFO) if spec else None
        where = f"; LLaMA-Factory, run from its checkout, reads {found / DATASET_INFO}" if found else ""
        message = f"{path} not found (radeonlab reads dataset_dir relative to the spec's folder){where}"
        fix = files.spec_relative_fix(spec, "dataset_dir", value, DATASET_INFO) if found and spec else None
        fix = fix or "set dataset_dir to the folder holding dataset_info.json (relative to the spec)"
        return None, Problem(file, line, message, ERROR, fix)
    try:
        data = json.loads(inputs.read_limited(path, MAX_INFO_BYTES).decode("utf-8"))
    except inputs.Refused as err:
        return None, Problem(str(path), 1, f"{DATASET_INFO} {err}")
    except OSError as err:
        return None, Problem(str(path), 1, f"cannot read {DATASET_INFO}: {err.strerror or err}")
    except json.JSONDecodeError as err:
        # LLaMA-Factory reads it with json.load (data/parser.py), which refuses a UTF-8 BOM as well
        fix = "save it without the BOM" if err.msg.startswith("Unexpected UTF-8 BOM") else None
        return None, Problem(str(path), err.lineno, f"malformed JSON: {err.msg}", ERROR, fix)
    except UnicodeDecodeError:
        return None, Problem(str(path), 1, "not UTF-8")
    except RecursionError:
        return None, Problem(str(path), 1, "malformed JSON: nested too deeply to be read (about 1000 levels)")
    if not isinstance(data, dict):
        return None, Problem(str(path), 1, "dataset_info.json must be an object of name -> entry")
    return data, None


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)

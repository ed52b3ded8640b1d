"""Files and folders a spec points at through LLaMA-Factory keys: found, listed for upload, or refused.

Every path-valued key of LLaMA-Factory 0.9.5's `train` arguments (hparams/*.py and transformers'
TrainingArguments, read in the generator venv) is classified in PATH_KEYS. Paths are resolved relative to
the spec's folder (`~` expanded first: jobs/spec/paths.py local_path, shared by every path key), the way
radeonlab resolves dataset_dir and the radeonlab block's files (LLaMA-Factory's own examples are written
relative to its checkout's root: `deepspeed: examples/deepspeed/ds_z3_config.json` is refused here with the
spec-relative path as the fix when that file exists from the current directory or from a folder above the
spec: `spec_relative_fix`, which dataset_dir's fix uses too). An absolute model or adapter folder that is
not on the laptop is the workstation's (jobs/spec/paths.py host_paths): not refused here, not uploaded.

- `file_problems(spec)`: a missing file or folder, as `file:line` errors (shared by check and submit).
- `local_files(spec)`: (key, local path, host-relative name) for every file to upload; a folder becomes one
  entry per file inside it. Host-relative names are under `inputs/<key>/` in the job folder.
- `host_values(spec, job_root)`: the value each such key gets in the rendered config on the host.
- `block_file_problems(spec)`: the radeonlab block's own `files` (uploaded to inputs/files/).

Not paths, though their names suggest it: `freeze_extra_modules`, `freeze_trainable_modules`, `lora_target`,
`additional_target` (module names), `template` (a name from LLaMA-Factory's registry, not a file).
`model_name_or_path` (uploaded to <job>/model by jobs/plan/render.py local_model_dir), `dataset_dir` and the
dataset files (jobs/spec/checks.py) have their own handling. Output paths are written on the host, all
inside the job folder: `output_dir` is the job's output/ (jobs/plan/render.py), and the other OUTPUT_KEYS
are kept there too (`output_values`: a relative value lands under output/; `output_problems`: an absolute
one, `~` or `..` is refused, since LLaMA-Factory would write into another job's folder or anywhere the
training user can). `cache_dir` is a shared place radeonlab sets itself (SHARED_KEYS).
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath
from typing import NamedTuple

from radeonlab.jobs.spec import inputs
from radeonlab.jobs.spec.load import Spec
from radeonlab.jobs.spec.paths import is_host_path, local_path
from radeonlab.jobs.spec.problems import ERROR, Problem

INPUTS_DIR = "inputs"  # in the job folder: inputs/<key>/<name>
FILE, FOLDER, FILE_OR_FOLDER, PATH_OR_HUB, INPUT_OR_OUTPUT = (
    "file", "folder", "file or folder", "path or hub id", "input or output",
)  # fmt: skip
# key -> (kind, what LLaMA-Factory / transformers reads there)
PATH_KEYS: dict[str, tuple[str, str]] = {
    "deepspeed": (FILE, "a DeepSpeed JSON config (transformers TrainingArguments.deepspeed)"),
    "fsdp_config": (FILE, "an FSDP JSON config (transformers TrainingArguments.fsdp_config)"),
    "accelerator_config": (FILE, "an Accelerator JSON config (TrainingArguments.accelerator_config)"),
    "new_special_tokens_config": (FILE, "a YAML of special-token descriptions (hparams/model_args.py)"),
    "hyper_parallel_args": (FILE, "a HyperParallel JSON (hparams/finetuning_args.py)"),
    "generation_config": (PATH_OR_HUB, "a GenerationConfig JSON file, or a model id"),
    "media_dir": (FOLDER, "the images/videos/audios the dataset names (hparams/data_args.py)"),
    "tokenized_path": (INPUT_OR_OUTPUT, "tokenized datasets: loaded when the folder exists, else written"),
    "adapter_name_or_path": (PATH_OR_HUB, "adapter folders or hub ids, comma-separated"),
    "ref_model": (PATH_OR_HUB, "the reference model (DPO/PPO)"),
    "ref_model_adapters": (PATH_OR_HUB, "the reference model's adapters"),
    "reward_model": (PATH_OR_HUB, "the reward model (PPO)"),
    "reward_model_adapters": (PATH_OR_HUB, "the reward model's adapters"),
    "resume_from_checkpoint": (FOLDER, "a checkpoint folder to resume from"),
    "kt_weight_path": (FILE_OR_FOLDER, "KTransformers INT8 expert weights"),
    "kt_expert_checkpoint_path": (FILE_OR_FOLDER, "KTransformers expert checkpoint"),
    "export_quantization_dataset": (PATH_OR_HUB, "the calibration dataset of a GPTQ export"),
}
# Keys LLaMA-Factory / transformers write to (hparams/*.py, TrainingArguments), besides output_dir.
OUTPUT_KEYS: dict[str, str] = {
    "logging_dir": "TensorBoard logs (TrainingArguments.logging_dir)",
    "tokenized_path": "the tokenized dataset, when the folder does not exist yet (data_args.py)",
    "export_dir": "an exported model (model_args.py)",
    "offload_folder": "offloaded weights (model_args.py)",
    "swanlab_logdir": "SwanLab's local logs (finetuning_args.py)",
    "profiler_output_dir": "profiler traces (TrainingArguments)",
}
# Places shared by every job of a host, which radeonlab sets (the spec must not point them elsewhere).
SHARED_KEYS: dict[str, str] = {
    "cache_dir": "every job reads models from the host's shared model cache (HF_HUB_CACHE), set by radeonlab",
}
# A value of a PATH_OR_HUB key that is surely a path, not a hub id (`org/name`): these prefixes, two or more
# slashes, or a file extension.
_PATH_PREFIXES = ("/", "./", "../", "~")
_FILE_SUFFIX = re.compile(r"\.(json|jsonl|ya?ml|csv|parquet|arrow|txt|safetensors|bin|pt)$", re.I)


class LocalFile(NamedTuple):
    """One file to upload: the key that names it, where it is here, its name under the job folder."""

    key: str
    local: Path
    remote: str


def _values(key: str, value: object) -> list[str]:
    """The path strings of a key's value (comma-separated for adapters); inline dicts / JSON have none."""
    if not isinstance(value, str) or not value.strip() or value.lstrip().startswith("{"):
        return []
    if key.endswith(("adapter_name_or_path", "_adapters")):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [value.strip()]


def _looks_local(value: str) -> bool:
    return value.startswith(_PATH_PREFIXES) or value.count("/") >= 2 or bool(_FILE_SUFFIX.search(value))


def _resolve(spec: Spec, value: str) -> Path:
    return local_path(spec.base_dir, value)


def _wanted(spec: Spec) -> list[tuple[str, str, str, Path]]:
    """(key, kind, value, resolved path) for every path value that is local (or must be)."""
    out = []
    for key, (kind, _) in PATH_KEYS.items():
        for value in _values(key, spec.train.get(key)):
            path = _resolve(spec, value)
            if kind == PATH_OR_HUB and not path.exists() and not _looks_local(value):
                continue  # a hub id
            if is_host_path(key, value, spec.base_dir):
                continue  # the workstation's folder: looked up there (paths.host_path_problems)
            out.append((key, kind, value, path))
    return out


def file_problems(spec: Spec) -> list[Problem]:
    """Path values that point at nothing (or at the wrong kind of thing), with file:line."""
    file, out = str(spec.path), []
    for key, kind, value, path in _wanted(spec):
        line, what = spec.line_of(key), PATH_KEYS[key][1]
        if kind == INPUT_OR_OUTPUT and not path.exists():
            continue  # LLaMA-Factory writes the tokenized dataset there (on the host)
        if not path.exists():
            out.append(
                Problem(
                    file,
                    line,
                    f"`{key}: {value}`: not found ({path}; paths are relative to the spec's folder); "
                    f"it should be {what}",
                    ERROR,
                    _relative_fix(spec, key, value),
                )
            )
        elif kind == FILE and not path.is_file():
            out.append(Problem(file, line, f"`{key}: {value}` is {_kind(path)}; it should be {what}", ERROR))
        elif kind in (FOLDER,) and not path.is_dir():
            out.append(Problem(file, line, f"`{key}: {value}` is a file; it should be {what}", ERROR))
    return out


def _kind(path: Path) -> str:
    """What a path that is not a regular file is: "a folder", "a FIFO (named pipe)", ... (stat only)."""
    try:
        return inputs.special_kind(os.stat(path).st_mode) or "a folder"
    except OSError as err:
        return f"unreadable ({err.strerror})"


def found_elsewhere(spec: Spec, value: str, inside: str = "") -> Path | None:
    """Where a relative path missing beside the spec is, read LLaMA-Factory's way: from its working folder
    (the current directory, or a folder above the spec: an LLaMA-Factory checkout's root, where
    `llamafactory-cli train examples/...yaml` runs). inside: a file that must be in it (dataset_info.json)."""
    relative = Path(value).expanduser()
    if relative.is_absolute():
        return None
    for root in (Path.cwd(), *spec.base_dir.resolve().parents):
        candidate = (root / relative).resolve()
        if (candidate / inside).exists():
            return candidate
    return None


def spec_relative_fix(spec: Spec, key: str, value: str, inside: str = "") -> str | None:
    """`key: <the spec-relative spelling>` of a path found elsewhere (found_elsewhere), or None."""
    found = found_elsewhere(spec, value, inside)
    return f"{key}: {os.path.relpath(found, spec.base_dir.resolve())}" if found else None


def _relative_fix(spec: Spec, key: str, value: str) -> str:
    fix = spec_relative_fix(spec, key, value)
    return fix or f"give {key} a path relative to the spec's folder ({spec.base_dir}), or remove it"


def _names(spec: Spec) -> dict[tuple[str, str], str]:
    """(key, value) -> host-relative name inputs/<key>/<name>; two values of one key never share a name."""
    names: dict[tuple[str, str], str] = {}
    for key, _kind, value, path in _wanted(spec):
        taken = {n for (k, _), n in names.items() if k == key}
        name = PurePosixPath(INPUTS_DIR, key, path.name or "input").as_posix()
        i = 2
        while name in taken:
            name = PurePosixPath(INPUTS_DIR, key, f"{i}-{path.name}").as_posix()
            i += 1
        names[(key, value)] = name
    return names


def local_files(spec: Spec) -> list[LocalFile]:
    """Every local file the spec's path keys name, with its host-relative name (folders: file by file).

    Call after file_problems(spec) is clean; paths that do not exist are left out."""
    names, out = _names(spec), []
    for key, _kind, value, path in _wanted(spec):
        base = names[(key, value)]
        if path.is_file():
            out.append(LocalFile(key, path, base))
        elif path.is_dir():
            for inner in sorted(p for p in path.rglob("*") if p.is_file()):
                rel = inner.relative_to(path).as_posix()
                out.append(LocalFile(key, inner, f"{base}/{rel}"))
    return out


def host_values(spec: Spec, job_root: str | PurePosixPath) -> dict[str, str]:
    """The rendered config's value of every path key that names local things: absolute host paths under
    `<job_root>/inputs/<key>/` (comma-joined for several adapters). Hub ids stay as written."""
    names, out = _names(spec), {}
    for key in PATH_KEYS:
        values = _values(key, spec.train.get(key))
        if not values or not any((key, v) in names for v in values):
            continue
        rewritten = [
            str(PurePosixPath(job_root) / names[(key, v)]) if (key, v) in names else v for v in values
        ]
        out[key] = ",".join(rewritten)
    return out


def block_file_problems(spec: Spec) -> list[Problem]:
    """The radeonlab block's `files`: regular files inside the spec's folder (they land under inputs/files/
    with the same relative path), each once. Only stat: a FIFO or device is refused, never opened."""
    out, seen, folder = [], set(), spec.base_dir.resolve()
    for i, name in enumerate(spec.radeonlab.files):
        line, path = spec.line_of(f"radeonlab.files.{i}"), local_path(spec.base_dir, name)
        resolved = path
        if not path.exists():
            why, fix = f"file to upload not found: {name} (relative to the spec)", ""
        elif folder not in resolved.parents or Path(name).is_absolute() or ".." in Path(name).parts:
            why = f"file to upload {name} is outside the spec's folder {folder}"
            fix = "copy it beside the spec (or below), and name it relative to the spec"
        elif not path.is_file():
            why, fix = f"file to upload {name} is not a regular file but {_kind(path)}", ""
        elif resolved in seen:
            why, fix = f"file to upload {name} is listed twice", f"remove the second `{name}`"
        else:
            seen.add(resolved)
            continue
        out.append(Problem(str(spec.path), line, why, ERROR, fix or None))
    return out


def _outputs(spec: Spec) -> list[tuple[str, str]]:
    """(key, value) of the output keys the spec sets (tokenized_path only where it is not an input)."""
    out = []
    for key in OUTPUT_KEYS:
        value = spec.train.get(key)
        if not isinstance(value, str) or not value.strip():
            continue
        if key in PATH_KEYS and _resolve(spec, value).exists():
            continue  # an input that exists here: uploaded (local_files), not written
        out.append((key, value.strip()))
    return out


def output_problems(spec: Spec) -> list[Problem]:
    """Output paths that would leave the job folder, and shared places a spec may not move."""
    file, out = str(spec.path), []
    for key, value in _outputs(spec):
        path = PurePosixPath(value)
        if path.is_absolute() or value.startswith("~") or ".." in path.parts:
            fix = f"{key}: {path.name or key} (relative: it lands under the job's output/)"
            message = f"`{key}: {value}` is outside the job folder; {OUTPUT_KEYS[key]} stays in the job"
            out.append(Problem(file, spec.line_of(key), message, ERROR, fix))
    for key, why in SHARED_KEYS.items():
        if key in spec.train:
            message = f"`{key}` cannot be set: {why}"
            out.append(Problem(file, spec.line_of(key), message, ERROR, f"remove {key}"))
    return out


def output_values(spec: Spec, job_output: str | PurePosixPath) -> dict[str, str]:
    """The rendered value of each output key the spec sets: under the job's output/ folder."""
    return {key: str(PurePosixPath(job_output) / PurePosixPath(value)) for key, value in _outputs(spec)}

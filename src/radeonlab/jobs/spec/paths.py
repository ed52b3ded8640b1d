"""Paths as users write them in a spec: `~`, folders that live on the workstation, Hub cache folders.

- `local_path(base_dir, value)`: how radeonlab reads every path key on the laptop: `~` expanded (the laptop
  user's home, as a shell would), then relative to the spec's folder. One helper for model_name_or_path,
  the adapter and file keys (jobs/spec/files.py), dataset_dir and the radeonlab block's files.
- `host_paths(spec)`: absolute folders named by model_name_or_path or adapter_name_or_path that are not on
  the laptop. Half the configs users post name such a folder (/data/..., /workspace/...): it lives on the
  workstation, so it is looked up there (`radeonlab check SPEC --host H`, and submit, through the host's
  probe: jobs/host/probe.py --path) instead of refused as a missing local folder; found, it is used where it
  is and nothing of it is uploaded.
- `hub_cache_id(value)`: a Hugging Face cache folder (`.../hub/models--ORG--NAME/snapshots/REV`) as the Hub
  id and revision it caches (huggingface_hub's cache layout: file_download.py repo_folder_name joins
  `models`, ORG and NAME with `--`; the Hub refuses `--` inside ids, utils/_validators.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from radeonlab.errors import ChecksFailedError
from radeonlab.jobs.spec.problems import ERROR, INFO, WARNING, Problem

# key -> what a folder there must hold. A model: MODEL_CONFIG and WEIGHT_PATTERNS below; an adapter:
# peft's save_pretrained (utils/constants.py CONFIG_NAME and SAFETENSORS_WEIGHTS_NAME / WEIGHTS_NAME).
MODEL, ADAPTER = "model", "adapter"
HOST_PATH_KEYS = {"model_name_or_path": MODEL, "adapter_name_or_path": ADAPTER}
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
_HUB_CACHE = re.compile(r"(?:^|/)models--(?P<repo>[^/]+)/snapshots/(?P<rev>[^/]+)/?$")
# What makes a folder a model, on the laptop (jobs/plan/model.py uploads it) or on a host (transformers'
# save_pretrained: config.json and the weights, whole or sharded): anything else named as model_name_or_path
# is refused, never uploaded (a home folder named by mistake would ship its dotfiles).
MODEL_CONFIG = "config.json"
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin", "*.gguf")


def model_folder_problem(folder: Path, files: list[Path]) -> str | None:
    """Why `folder` is not a model folder (None: it is)."""
    names = {p.name for p in files}
    missing = [MODEL_CONFIG] if MODEL_CONFIG not in names else []
    if not any(p.match(pattern) for p in files for pattern in WEIGHT_PATTERNS):
        missing.append(f"weights ({', '.join(WEIGHT_PATTERNS)})")
    if not missing:
        return None
    return f"{folder} is not a model folder: no {' and no '.join(missing)}; nothing of it is uploaded"


def local_path(base_dir: Path, value: str) -> Path:
    """A spec's path value on the laptop: `~` expanded, then relative to the spec's folder, resolved."""
    return (base_dir / Path(value).expanduser()).resolve()


def hub_cache_id(value: str) -> tuple[str, str] | None:
    """(Hub id, revision) of a Hub cache snapshot folder, or None."""
    found = _HUB_CACHE.search(value.strip())
    if not found:
        return None
    return found["repo"].replace("--", "/"), found["rev"]


def hub_cache_fix(value: str) -> str | None:
    """The spec lines naming a Hub cache folder's model by its Hub id (None: not a cache folder)."""
    cached = hub_cache_id(value)
    return f"model_name_or_path: {cached[0]} and model_revision: {cached[1]}" if cached else None


@dataclass(frozen=True)
class HostPath:
    """An absolute folder a key names that is not on the laptop: looked for on the workstation."""

    key: str
    value: str
    kind: str  # MODEL or ADAPTER


def _values(key: str, value: Any) -> list[str]:
    if not isinstance(value, str):
        return []
    if key == "adapter_name_or_path":  # comma-separated (LLaMA-Factory's split_arg)
        return [v.strip() for v in value.split(",") if v.strip()]
    return [value.strip()] if value.strip() else []


def host_paths(train: Mapping[str, Any], base_dir: Path) -> list[HostPath]:
    """Absolute values of HOST_PATH_KEYS that name nothing on the laptop (written as such: `~` is the
    laptop's home, so `~/...` stays a laptop path)."""
    return [
        HostPath(key, value, kind)
        for key, kind in HOST_PATH_KEYS.items()
        for value in _values(key, train.get(key))
        if value.startswith("/") and not local_path(base_dir, value).exists()
    ]


def host_values(spec: Any) -> list[str]:
    """The folders to look for on the host (what the probe is asked: jobs/host/probe.py --path)."""
    return [h.value for h in host_paths(spec.train, spec.base_dir)]


def is_host_path(key: str, value: str, base_dir: Path) -> bool:
    return any(h.value == value for h in host_paths({key: value}, base_dir) if h.key == key)


def folder_problem(kind: str, folder: str, names: list[str]) -> str | None:
    """Why the host's `folder` (its file names) is not a model / adapter folder (None: it is)."""
    if kind == MODEL:
        problem = model_folder_problem(Path(folder), [Path(folder, n) for n in names])
        return problem.replace("; nothing of it is uploaded", "") if problem else None
    missing = [ADAPTER_CONFIG] if ADAPTER_CONFIG not in names else []
    if not any(n in names for n in ADAPTER_WEIGHTS):
        missing.append(f"weights ({', '.join(ADAPTER_WEIGHTS)})")
    return f"{folder} is not an adapter folder: no {' and no '.join(missing)}" if missing else None


@dataclass(frozen=True)
class OnHost:
    """What one host's probe said of the spec's host paths (HostView.paths)."""

    host: str
    answers: Mapping[str, Mapping[str, Any]]

    def problem(self, item: HostPath) -> tuple[str, str]:
        """(severity, message) of one host path on this host: an info when it is there and usable."""
        answer = self.answers.get(item.value) or {"kind": "missing"}
        kind = answer.get("kind")
        if kind == "missing":
            return ERROR, f"{self.host} has no {item.value} (`{item.key}`; not on this laptop either)"
        if kind != "folder":
            what = answer.get("error") or f"a {kind}, not a folder"
            return ERROR, f"{self.host}: {item.value} (`{item.key}`) is {what}"
        names = list(answer.get("names") or [])
        why = folder_problem(item.kind, item.value, names)
        if why:
            return ERROR, f"{self.host}: {why} (`{item.key}`)"
        return INFO, (
            f"{item.kind} folder {item.value} found on {self.host} ({len(names)} files): used there, "
            "nothing of it uploaded"
        )


def _relative_hub_cache(spec: Any) -> list[Problem]:
    """A relative Hub cache folder that is not here: neither a laptop folder nor a workstation one."""
    model = spec.train.get("model_name_or_path")
    if not isinstance(model, str) or not hub_cache_id(model) or model.strip().startswith("/"):
        return []
    folder = local_path(spec.base_dir, model.strip())
    if folder.is_dir():
        return []
    message = f"`model_name_or_path: {model}` is a Hugging Face cache folder not found here ({folder})"
    return [Problem(str(spec.path), spec.line_of("model_name_or_path"), message, ERROR, hub_cache_fix(model))]


def host_path_problems(spec: Any, on_host: OnHost | None = None) -> list[Problem]:
    """Each host path of the spec: without a host, a warning that says where it will be looked for; with
    one (`check --host`), what that host holds. A Hub cache folder gets its Hub id as the fix either way."""
    file, out = str(spec.path), _relative_hub_cache(spec)
    for item in host_paths(spec.train, spec.base_dir):
        line, fix = spec.line_of(item.key), hub_cache_fix(item.value) if item.kind == MODEL else None
        if on_host is not None:
            severity, message = on_host.problem(item)
            out.append(Problem(file, line, message, severity, fix if severity == ERROR else None))
            continue
        message = f"`{item.key}: {item.value}` is not on this laptop: "
        if fix:  # a workstation's Hub cache: its Hub id is the better spelling
            message += "a Hugging Face cache folder; name the model by its Hub id: "
            message += "every host's shared model cache serves it"
        else:
            message += "submit looks for it on the workstation (and uses it there, uploading nothing)"
            fix = f"`radeonlab check {spec.path.name} --host H` looks for it on host H now"
        out.append(Problem(file, line, message, WARNING, fix))
    return out


def refuse_missing(spec: Any, views: Iterable[Any], say: Callable[[str], None]) -> None:
    """Submit, over each chosen host's view (jobs/fleet/view.py HostView: name, paths): each found
    workstation folder is said (used there, not uploaded); the first one missing or not a model/adapter
    folder refuses the job in one line naming the host and the path."""
    problems = [p for v in views for p in host_path_problems(spec, OnHost(v.name, v.paths))]
    for problem in problems:
        if problem.severity == ERROR:
            fix = f" (fix: {problem.fix})" if problem.fix else ""
            raise ChecksFailedError(f"{problem.message}{fix}; nothing uploaded", [])
        say(problem.message)

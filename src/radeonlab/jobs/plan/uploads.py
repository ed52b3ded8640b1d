"""The files a job uploads: its datasets (from dataset_info.json or the radeonlab block), a local model
folder, the radeonlab block's files and the files the config's own keys name, hashed once for every node."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from radeonlab.contract.jobdir import upload_dest_problem
from radeonlab.errors import InputError
from radeonlab.jobs.plan import model as model_module
from radeonlab.jobs.plan.localfile import LocalFile
from radeonlab.jobs.spec import files as config_files
from radeonlab.jobs.spec.checks import DATASET_INFO
from radeonlab.jobs.spec.load import Spec


@dataclass(frozen=True)
class Upload:
    """A local file the job needs, and where it lands in the job folder."""

    local: LocalFile
    dest: str  # relative to the job folder: data/x.jsonl, model/config.json, ds_config.json


def local_dataset_info(spec: Spec) -> dict[str, Any] | None:
    folder = spec.dataset_dir()
    info = folder / DATASET_INFO if folder else None
    return json.loads(info.read_text()) if info and info.is_file() else None


def dataset_files(spec: Spec, info: dict[str, Any]) -> list[Path]:
    """The local files of the datasets the job trains/evaluates on (hub datasets have none)."""
    from_block = {d.name: spec.base_dir / d.file for d in spec.radeonlab.datasets}
    folder = spec.dataset_dir()
    names = [
        n.strip() for key in ("dataset", "eval_dataset") for n in str(spec.train.get(key) or "").split(",")
    ]
    names += [d.name for d in spec.radeonlab.datasets if "dataset" not in spec.train]
    files: list[Path] = []
    for name in filter(None, names):
        entry = info.get(name) or {}
        if name in from_block:
            path = from_block[name]
        elif "file_name" in entry and folder is not None:
            path = folder / entry["file_name"]
        else:
            continue  # a hub / script dataset: fetched on the host
        if path.is_dir():
            raise InputError(
                f"dataset {name}: {path} is a folder (not supported: name its files in dataset_info)"
            )
        if path not in files:
            files.append(path)
    return files


def uploads_of(spec: Spec, model: model_module.ModelInfo, info: dict[str, Any]) -> list[Upload]:
    """Every local file the job needs, hashed once (the same list for every node): datasets, a local model
    folder, the radeonlab block's files, and files the config's own keys name (a deepspeed JSON...)."""
    out = [Upload(LocalFile.of(p), f"data/{p.name}") for p in dataset_files(spec, info)]
    out += [Upload(LocalFile.of(p), f"model/{p.name}") for p in model.files]
    out += [Upload(LocalFile.of(spec.base_dir / f), block_file_dest(f)) for f in spec.radeonlab.files]
    out += [Upload(LocalFile.of(f.local), f.remote) for f in config_files.local_files(spec)]
    landed: dict[str, Path] = {}
    for u in out:  # two files on one name, or one on a name of the job folder's own: refused here
        why = upload_dest_problem(u.dest)
        if why is None and u.dest in landed and landed[u.dest] != u.local.path:
            why = f"{landed[u.dest]} and {u.local.path} would both be {u.dest!r}"
        if why:
            raise InputError(f"cannot upload {u.local.path}: {why}")
        landed[u.dest] = u.local.path
    return out


def block_file_dest(name: str) -> str:
    """Where a file of the radeonlab block's `files` lands: inputs/files/<its path relative to the spec's
    folder> (check refuses names outside that folder)."""
    return f"inputs/files/{Path(name).as_posix()}"  # pathlib drops "./"; a ".." is refused by the caller

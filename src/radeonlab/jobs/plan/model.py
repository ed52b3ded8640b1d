"""The job's base model as the spec names it: a local folder (uploaded with the job) or a Hub id.

A Hub id is asked of the Hub from the laptop, with the endpoint and token the jobs will use
(jobs/spec/hub.py): an unknown repo or revision, a dataset, a gated model without access are refused here,
before anything is sent. A model that is available gives its commit sha (recorded in job.json and rendered
as `model_revision`, so the job trains on exactly that commit) and its config.json (the VRAM estimate,
placement's min-memory). When the laptop cannot reach the Hub, the host's cache decides (jobs/plan/plan.py
asks it); the job then runs offline and says so.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from radeonlab.errors import ModelError
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.spec import hub
from radeonlab.jobs.spec.load import Spec
from radeonlab.jobs.spec.paths import MODEL, host_paths, model_folder_problem

__all__ = ["ModelInfo", "model_folder_problem", "resolve", "upload_files"]

ENDPOINT_KEY = "radeonlab_hf_endpoint"  # host data: the Hub (or a lab mirror) jobs and the laptop ask


def upload_files(folder: Path) -> list[Path]:
    """The files of a local model folder that are uploaded: its regular files, never a dotfile."""
    return sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))


@dataclass
class ModelInfo:
    """The base model, resolved on the laptop."""

    name: str  # model_name_or_path as the spec writes it
    local_dir: str | None = None  # a local folder: its files are uploaded to <job>/model
    config: dict[str, Any] | None = None  # config.json, for the estimate
    revision: str | None = None  # the revision asked for (model_revision)
    sha: str | None = None  # the commit the revision resolves to (Hub models)
    files: list[Path] = field(default_factory=list)  # the local folder's files
    endpoint: str | None = None  # the Hub endpoint asked (None: the default)
    offline: bool = False  # the Hub was unreachable: only a host whose cache has it can run the job
    size: int = 0  # bytes of the revision's files (Hub)
    note: str = ""  # why there is no config (the estimate is skipped, with this reason)
    hub_files: tuple[hub.RepoFile, ...] = ()  # the Hub's files and ETags: a copy from a peer is checked
    host_dir: str | None = None  # an absolute folder not here: the workstation's (jobs/spec/paths.py)

    @property
    def hub(self) -> bool:
        return self.local_dir is None and self.host_dir is None

    def record(self) -> dict[str, Any]:
        """job.json `model`: what the adapter was trained on."""
        return {
            "name": self.name,
            "revision": self.revision,
            "sha": self.sha,
            "local": not self.hub,  # the host's supervisor pulls only what is not local (a Hub model)
            **({"host_dir": self.host_dir} if self.host_dir else {}),  # used where it is, on the host
            "endpoint": self.endpoint,
        }


def endpoint_of(targets: Mapping[str, HostTarget], environ: Mapping[str, str]) -> str | None:
    """The Hub endpoint: the laptop's HF_ENDPOINT, else the inventory's radeonlab_hf_endpoint."""
    if environ.get("HF_ENDPOINT"):
        return environ["HF_ENDPOINT"]
    found = {str(t.data[ENDPOINT_KEY]) for t in targets.values() if t.data.get(ENDPOINT_KEY)}
    return sorted(found)[0] if found else None


def offline_note(model: ModelInfo, host: str) -> str:
    """What submit says when the Hub could not be asked and the host's cache decided."""
    return (
        f"{model.name}: the Hub is unreachable from this laptop; {host}'s model cache holds it, so the job "
        "runs offline (HF_HUB_OFFLINE=1)"
    )


def resolve(spec: Spec, endpoint: str | None = None, environ: Mapping[str, str] | None = None) -> ModelInfo:
    """The spec's model: a local folder's config and files, or the Hub's answer (refusals: ModelError)."""
    env = os.environ if environ is None else environ
    name = str(spec.train.get("model_name_or_path") or "")
    revision = spec.train.get("model_revision")
    if any(h.kind == MODEL for h in host_paths(spec.train, spec.base_dir)):  # looked up on the host by plan
        note = f"VRAM estimate skipped: {name} is on the workstation, not read from here"
        return ModelInfo(name, None, None, revision, note=note, host_dir=name)
    answer = hub.resolve_model(
        name, revision=revision, base_dir=spec.base_dir, endpoint=endpoint, environ=env
    )
    if answer.answer is hub.Answer.LOCAL:
        folder = Path(str(answer.local_dir))
        files = upload_files(folder)
        problem = model_folder_problem(folder, files)
        if problem:
            raise ModelError(f"model_name_or_path {name}: {problem}")
        note = "" if answer.config else f"VRAM estimate skipped: {folder} has no config.json"
        return ModelInfo(
            name, str(folder), dict(answer.config or {}) or None, revision, files=files, note=note
        )
    if answer.answer is hub.Answer.HUB:
        note = "" if answer.config else f"VRAM estimate skipped: {name} has no config.json"
        return ModelInfo(
            name,
            None,
            dict(answer.config or {}) or None,
            revision,
            answer.sha,
            endpoint=endpoint,
            size=sum(f.size for f in answer.files),
            note=note,
            hub_files=answer.files,
        )
    if answer.answer is hub.Answer.UNREACHABLE:
        note = f"VRAM estimate skipped: the Hub is unreachable ({answer.message})"
        return ModelInfo(name, None, None, revision, endpoint=endpoint, offline=True, note=note)
    raise ModelError(answer.message)

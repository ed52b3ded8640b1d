"""The job's base model as the spec names it: a local folder (uploaded with the job) or a Hub id.

What planning needs of it: whether files travel with the job, and the model's config.json (its shape, for the
VRAM estimate and placement). A local folder answers from its own config.json.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from radeonlab.jobs.plan.render import local_model_dir
from radeonlab.jobs.spec.load import Spec


@dataclass
class ModelInfo:
    """The base model, resolved on the laptop."""

    name: str  # model_name_or_path as the spec writes it
    local_dir: str | None = None  # a local folder: its files are uploaded to <job>/model
    config: dict[str, Any] | None = None  # config.json, for the estimate
    revision: str | None = None  # the revision asked for (model_revision)
    sha: str | None = None  # the commit the revision resolves to (Hub models)
    files: list[Path] = field(default_factory=list)  # the local folder's files
    note: str = ""  # why there is no config (the estimate is skipped, with this reason)

    def record(self) -> dict[str, Any]:
        """job.json `model`: what the adapter was trained on."""
        return {
            "name": self.name,
            "revision": self.revision,
            "sha": self.sha,
            "local": self.local_dir is not None,
        }


def resolve(spec: Spec) -> ModelInfo:
    """The spec's model: a local folder's config.json and files, or a Hub id (config unknown here)."""
    name = str(spec.train.get("model_name_or_path") or "")
    revision = spec.train.get("model_revision")
    folder = local_model_dir(spec)
    if folder is None:
        return ModelInfo(
            name,
            revision=revision,
            note=f"VRAM estimate skipped: {name} is a Hub model without a local config.json",
        )
    files = sorted(p for p in Path(folder).iterdir() if p.is_file())
    config_file = Path(folder) / "config.json"
    if not config_file.is_file():
        return ModelInfo(
            name, folder, files=files, note=f"VRAM estimate skipped: {folder} has no config.json"
        )
    return ModelInfo(name, folder, json.loads(config_file.read_text()), revision, files=files)

"""The `radeonlab:` block of a spec: what only the runner needs (files, placement, remedies, env, ...).

Malformed parts are recorded as (line, message) problems and otherwise left at their defaults, so `check` can
report every one of them at once.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from radeonlab.contract.remedy import Remedy
from radeonlab.jobs.host.remedies import LADDERS, STEPS

BLOCK_KEY = "radeonlab"
REMEDY_NAMES = tuple(LADDERS)  # the runner's ladders (jobs/host/remedies.py): every one can be switched
LIMIT_NAMES = ("address_space_gb", "memory_gb")


@dataclass
class Placement:
    """Where the job may run. Empty fields: no constraint."""

    host_group: str | None = None
    gfx_family: str | None = None  # e.g. "gfx11" (RDNA3) or an exact target "gfx1100"
    min_vram_gb: float | None = None


@dataclass
class DatasetFile:
    """A local dataset file named in the radeonlab block; becomes a dataset_info.json entry on upload."""

    file: str
    name: str
    formatting: str = "alpaca"
    ranking: bool = False
    columns: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    line: int = 0

    def info_entry(self) -> dict[str, Any]:
        """The dataset_info.json entry LLaMA-Factory needs for this file."""
        entry: dict[str, Any] = {"file_name": Path(self.file).name, "formatting": self.formatting}
        if self.ranking:
            entry["ranking"] = True
        if self.columns:
            entry["columns"] = dict(self.columns)
        if self.tags:
            entry["tags"] = dict(self.tags)
        return entry


@dataclass
class RadeonlabBlock:
    """The `radeonlab:` block of a spec (all optional)."""

    datasets: list[DatasetFile] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    host: str | None = None
    placement: Placement = field(default_factory=Placement)
    remedies: dict[str, Remedy] = field(default_factory=lambda: {n: Remedy() for n in REMEDY_NAMES})
    nodes: int = 1
    env: dict[str, str] = field(default_factory=dict)
    forward_env: list[str] = field(
        default_factory=list
    )  # laptop variables sent as secrets (jobs/apply/secrets.py)
    limits: dict[str, float] = field(default_factory=dict)  # LIMIT_NAMES -> positive number
    # Apprise URLs the workstation notifies (jobs/host/notify_send.py); None: the inventory's
    # radeonlab_notify.
    # Secrets (tokens inside): they travel only in env.secret, and no message here quotes one.
    notify: list[str] | None = None


# ------------------------------------------------------------------------------------------ radeonlab block

_BLOCK_FIELDS = (
    "datasets",
    "files",
    "host",
    "placement",
    "remedies",
    "nodes",
    "env",
    "forward_env",
    "limits",
    "notify",
)
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Variables radeonlab sets for every job (jobs/host/launcher.py child_env, jobs/plan/plan.py, nodes.py): a
# spec that set them would escape the per-GPU lock, the job's caches or the shared model cache, or break
# the ranks.
OWNED_ENV: dict[str, str] = {
    **dict.fromkeys(
        ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL"),
        "the GPUs a job sees are the ones placement locked for it (choose them with --gpus)",
    ),
    **dict.fromkeys(
        ("HF_HOME", "HF_HUB_CACHE", "HF_DATASETS_CACHE", "MPLCONFIGDIR"),
        "the job's caches and the host's shared model cache are set by radeonlab",
    ),
    **dict.fromkeys(("PATH", "PYTHONPATH"), "the training venv's tools come first on PATH, set by radeonlab"),
    **dict.fromkeys(
        ("FORCE_TORCHRUN", "NNODES", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "NPROC_PER_NODE"),
        "multi-node ranks are set by radeonlab (radeonlab.nodes)",
    ),
    "RADEONLAB_NOTIFY_URLS": "notification URLs come from radeonlab.notify",
}
APPRISE_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://\S+$")  # json://host/path, ntfys://topic, mailtos://...
_PLACEMENT_FIELDS = ("host_group", "gfx_family", "min_vram_gb")
_DATASET_FIELDS = ("file", "name", "formatting", "ranking", "columns", "tags")


def parse_block(raw: Any, lines: dict[str, int], problems: list[tuple[int, str]]) -> RadeonlabBlock:
    """Build the block; malformed parts are recorded as (line, message) and otherwise left at defaults."""
    block = RadeonlabBlock()
    if raw is None:
        return block

    def bad(key: str, message: str) -> None:
        problems.append((lines.get(key, lines.get(BLOCK_KEY, 1)), message))

    if not isinstance(raw, dict):
        bad(BLOCK_KEY, "the radeonlab block must be a mapping")
        return block
    for key in raw:
        if key not in _BLOCK_FIELDS:
            bad(f"{BLOCK_KEY}.{key}", f"unknown radeonlab key {key!r} (known: {', '.join(_BLOCK_FIELDS)})")

    for i, item in enumerate(_as_list(raw.get("datasets"), "radeonlab.datasets", bad)):
        where = f"radeonlab.datasets.{i}"
        if isinstance(item, str):
            item = {"file": item}
        if not isinstance(item, dict) or not isinstance(item.get("file"), str) or not item["file"]:
            bad(where, "a radeonlab dataset is a path or a mapping with `file:`")
            continue
        extra = [k for k in item if k not in _DATASET_FIELDS]
        if extra:
            bad(where, f"unknown dataset keys {extra} (known: {', '.join(_DATASET_FIELDS)})")
        block.datasets.append(
            DatasetFile(
                file=item["file"],
                name=str(item.get("name") or Path(item["file"]).stem),
                formatting=str(item.get("formatting", "alpaca")),
                ranking=bool(item.get("ranking", False)),
                columns=dict(item.get("columns") or {}),
                tags=dict(item.get("tags") or {}),
                line=lines.get(where, 1),
            )
        )
    for i, item in enumerate(_as_list(raw.get("files"), "radeonlab.files", bad)):
        if isinstance(item, str) and item:
            block.files.append(item)
        else:
            bad(f"radeonlab.files.{i}", "a radeonlab file is a path string")

    host = raw.get("host")
    if host is not None and not isinstance(host, str):
        bad("radeonlab.host", "host must be a host name (string)")
    else:
        block.host = host or None

    placement = raw.get("placement") or {}
    if not isinstance(placement, dict):
        bad("radeonlab.placement", "placement must be a mapping (host_group, gfx_family, min_vram_gb)")
    else:
        for key in placement:
            if key not in _PLACEMENT_FIELDS:
                bad(
                    f"radeonlab.placement.{key}",
                    f"unknown placement key {key!r} ({', '.join(_PLACEMENT_FIELDS)})",
                )
        vram = placement.get("min_vram_gb")
        if vram is not None and not _positive_number(vram):
            bad("radeonlab.placement.min_vram_gb", "min_vram_gb must be a positive number (finite)")
            vram = None
        block.placement = Placement(
            host_group=_opt_str(placement.get("host_group")),
            gfx_family=_opt_str(placement.get("gfx_family")),
            min_vram_gb=vram,
        )

    remedies = raw.get("remedies") or {}
    if not isinstance(remedies, dict):
        ladders = "/".join(REMEDY_NAMES)
        bad("radeonlab.remedies", f"remedies must be a mapping: {ladders} -> on | off | list of steps")
    else:
        for name, value in remedies.items():
            where = f"radeonlab.remedies.{name}"
            if name not in REMEDY_NAMES:
                bad(where, f"unknown remedy {name!r} (known: {', '.join(REMEDY_NAMES)})")
            elif isinstance(value, bool):
                block.remedies[name] = Remedy(enabled=value)
            elif isinstance(value, list) and all(isinstance(s, str) and s for s in value):
                unknown = [s for s in value if s not in STEPS]
                for step in unknown:
                    close = difflib.get_close_matches(step, list(STEPS), n=1)
                    hint = f"did you mean `{close[0]}`?" if close else f"known: {', '.join(STEPS)}"
                    bad(where, f"unknown remedy step {step!r}: {hint}")
                if not unknown:
                    block.remedies[name] = Remedy(enabled=bool(value), steps=list(value))
            else:
                bad(where, f"remedy {name} must be on, off or a list of step names")

    nodes = raw.get("nodes", 1)
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        bad("radeonlab.nodes", "nodes must be a whole number >= 1")
    else:
        block.nodes = nodes

    env = raw.get("env") or {}
    if not isinstance(env, dict):
        bad("radeonlab.env", "env must be a mapping of NAME: value")
    else:
        for name, value in env.items():
            if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
                bad(f"radeonlab.env.{name}", f"{name!r} is not an environment variable name")
            elif name in OWNED_ENV:
                bad(f"radeonlab.env.{name}", f"env {name} cannot be set by a spec: {OWNED_ENV[name]}")
            elif isinstance(value, dict | list) or value is None:
                bad(f"radeonlab.env.{name}", f"env {name} must be a plain value")
            else:
                block.env[name] = _env_value(value)

    for i, name in enumerate(_as_list(raw.get("forward_env"), "radeonlab.forward_env", bad)):
        if isinstance(name, str) and name in OWNED_ENV:
            why = f"forward_env: {name} cannot be set by a spec: {OWNED_ENV[name]}"
            bad(f"radeonlab.forward_env.{i}", why)
        elif isinstance(name, str) and ENV_NAME.fullmatch(name):
            if name not in block.forward_env:
                block.forward_env.append(name)
        else:
            bad(f"radeonlab.forward_env.{i}", f"forward_env: {name!r} is not an environment variable name")

    limits = raw.get("limits") or {}
    if not isinstance(limits, dict):
        bad("radeonlab.limits", f"limits must be a mapping ({', '.join(LIMIT_NAMES)})")
    else:
        for name, value in limits.items():
            where = f"radeonlab.limits.{name}"
            if name not in LIMIT_NAMES:
                bad(where, f"unknown limit {name!r} (known: {', '.join(LIMIT_NAMES)})")
            elif not _positive_number(value):
                bad(where, f"limit {name} must be a positive number (finite)")
            else:
                block.limits[name] = float(value)

    if "notify" in raw:
        block.notify = []
        urls = raw.get("notify")
        for i, url in enumerate(_as_list([urls] if isinstance(urls, str) else urls, "radeonlab.notify", bad)):
            if isinstance(url, str) and APPRISE_URL.match(url.strip()):
                block.notify.append(url.strip())
            else:  # the message never quotes the value: it may hold a token
                bad(f"radeonlab.notify.{i}", f"notify item {i + 1} is not an Apprise URL (scheme://...)")
    return block


def _as_list(value: Any, key: str, bad: Any) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        bad(key, f"{key.split('.')[-1]} must be a list")
        return []
    return value


def _positive_number(value: Any) -> bool:
    """A number above 0 that is finite (YAML's .nan and .inf are floats: they reached the launcher)."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return number and math.isfinite(value) and value > 0


def _opt_str(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def _env_value(value: Any) -> str:
    """YAML `on`/`true` become "1"/"0" style strings the way shells expect them; other scalars as written."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)

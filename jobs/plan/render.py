"""Render a spec for one host: the LLaMA-Factory config actually run, its dataset_info.json, the YAML text.

Pure functions of (spec, host record, job paths): the host record (CONTRACTS.md) says which cards the job
gets and whether they have bf16; the job paths say where data, model and output live on the host.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml
from radeonlab.jobs.spec.load import Spec

from radeonlab.contract.records import JobPaths

PRECISION_KEYS = ("bf16", "fp16", "pure_bf16")
# Keys radeonlab always sets, whatever the spec says, and why (the reason goes into the YAML header).
FORCED: dict[str, tuple[Any, str]] = {
    "logging_nan_inf_filter": (False, "so a NaN loss is logged as NaN, not hidden as 0.0"),
    "overwrite_output_dir": (False, "so a retry resumes from output/checkpoint-* instead of starting over"),
}
DEFAULTS: dict[str, Any] = {"plot_loss": True, "report_to": "none"}
CPU_NOTE = (
    "precision flags dropped: torch here is a simulated CPU build (fp16 on CPU silently runs fp32, "
    "bf16 fails to start), so this runs in fp32"
)


class RenderError(ValueError):
    """A spec that cannot run on this host; str() is one line naming the reason (and the card)."""


@dataclass
class Rendered:
    """The result of rendering: what to upload as config.yaml and data/dataset_info.json."""

    config: dict[str, Any]
    dataset_info: dict[str, Any]
    precision: str  # "bf16" | "fp16" | "fp32"
    notes: list[str] = field(default_factory=list)
    yaml_text: str = ""

    @property
    def dataset_info_text(self) -> str:
        """dataset_info.json as text."""
        return json.dumps(self.dataset_info, indent=2) + "\n"


def card_label(gpu: Mapping[str, Any]) -> str:
    """'GPU 0 Radeon RX 6700 XT (gfx1031, RDNA2)' for messages and headers."""
    family = f", {gpu['family']}" if gpu.get("family") else ""
    return f"GPU {gpu.get('index')} {gpu.get('name') or 'unnamed card'} ({gpu.get('gfx', '?')}{family})"


def pick_gpus(host: Mapping[str, Any], wanted: Sequence[int] | None) -> list[dict[str, Any]]:
    """The host record entries of the GPUs the job uses; default: the first discrete card (else the first)."""
    cards = list(host.get("gpus") or [])
    if wanted is None:
        discrete = [g for g in cards if not g.get("igpu")]
        return (discrete or cards)[:1]
    by_index = {g["index"]: g for g in cards}
    missing = [i for i in wanted if i not in by_index]
    if missing:
        raise RenderError(
            f"host {host.get('host')} has no GPU index {missing[0]} (it has {sorted(by_index)})"
        )
    return [by_index[i] for i in wanted]


def is_simulated_cpu(host: Mapping[str, Any]) -> bool:
    """True on a host whose torch is a CPU build (the sandbox stand-in) or that is marked cpu_only."""
    return bool((host.get("torch") or {}).get("simulated_cpu_build") or host.get("cpu_only"))


def choose_precision(
    train: Mapping[str, Any], host: Mapping[str, Any], gpus: list[dict[str, Any]]
) -> tuple[str, str]:
    """(precision, why). bf16 where every GPU used has it, else fp16; a spec's explicit choice is kept,
    except bf16 on a card without it, which is refused naming the card."""
    if is_simulated_cpu(host):
        return "fp32", CPU_NOTE
    wants_bf16 = train.get("bf16") is True or train.get("pure_bf16") is True
    lacking = [g for g in gpus if not g.get("bf16")]
    if wants_bf16 and lacking:
        raise RenderError(
            f"bf16 refused: {card_label(lacking[0])} has no bf16 support; "
            "set fp16: true or remove bf16 from the spec"
        )
    if wants_bf16:
        return "bf16", "bf16: the spec asks for it and every GPU this job uses has bf16"
    if train.get("fp16") is True:
        return "fp16", "fp16: the spec asks for it"
    if train.get("bf16") is False and train.get("fp16") is False:
        return "fp32", "fp32: the spec turns both bf16 and fp16 off"
    if gpus and not lacking:
        return "bf16", "bf16: every GPU this job uses has bf16"
    if not gpus:
        return "fp16", "fp16: the host record lists no GPU, so bf16 support is unknown"
    return "fp16", f"fp16: {card_label(lacking[0])} has no bf16"


def render(
    spec: Spec,
    host: Mapping[str, Any],
    paths: JobPaths,
    *,
    job_id: str | None = None,
    gpus: Sequence[int] | None = None,
    model_local: bool = False,
    base_dataset_info: Mapping[str, Any] | None = None,
) -> Rendered:
    """Render `spec` for `host`.

    model_local: the spec's model_name_or_path is a local folder (uploaded to <job>/model).
    base_dataset_info: the dataset_info.json of the spec's local dataset folder, if it has one; the
    radeonlab block's datasets are added to it (file names become plain names inside <job>/data).
    """
    used = pick_gpus(host, gpus)
    precision, why = choose_precision(spec.train, host, used)
    config = {k: v for k, v in spec.train.items() if k not in PRECISION_KEYS}
    if precision in ("bf16", "fp16"):
        config[precision] = True
        if precision == "bf16" and spec.train.get("pure_bf16") is True:
            config["pure_bf16"] = True
    notes = [why]
    if spec.dataset_dir() is not None:
        config["dataset_dir"] = str(paths.data)
    if model_local:
        config["model_name_or_path"] = str(paths.model)
    config["output_dir"] = str(paths.output)
    for key, (value, reason) in FORCED.items():
        if key in spec.train and spec.train[key] != value:
            notes.append(f"{key}: {spec.train[key]} -> {value}, {reason}")
        config[key] = value
    for key, value in DEFAULTS.items():
        config.setdefault(key, value)
    info = dict(base_dataset_info or {})
    info.update({d.name: d.info_entry() for d in spec.radeonlab.datasets})
    if "dataset" not in config and spec.radeonlab.datasets:
        config["dataset"] = ",".join(d.name for d in spec.radeonlab.datasets)
    out = Rendered(config=config, dataset_info=info, precision=precision, notes=notes)
    out.yaml_text = to_yaml(out, host, used, job_id)
    return out


def to_yaml(
    rendered: Rendered, host: Mapping[str, Any], gpus: list[dict[str, Any]], job_id: str | None
) -> str:
    """The config as YAML with a header saying which job, host and card, and why this precision."""
    cards = "; ".join(card_label(g) for g in gpus) or "no GPU"
    header = [
        f"radeonlab job {job_id or '?'} on host {host.get('host', '?')}: {cards}",
        *rendered.notes,
        "Rendered by radeonlab from the job's spec; edit the spec, not this file.",
    ]
    body = yaml.safe_dump(
        rendered.config, sort_keys=False, default_flow_style=False, allow_unicode=True, width=1000
    )
    return "".join(f"# {line}\n" for line in header) + body


def local_model_dir(spec: Spec) -> str | None:
    """The spec's model folder when model_name_or_path names a local folder (relative to the spec file),
    else None (a hub id). Reads the filesystem: call it on the laptop, pass the answer to render()."""
    value = spec.train.get("model_name_or_path")
    if not isinstance(value, str) or not value:
        return None
    candidate = (spec.base_dir / value).expanduser()
    return str(candidate.resolve()) if candidate.is_dir() else None

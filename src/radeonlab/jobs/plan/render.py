"""Render a spec for one host: the LLaMA-Factory config actually run, its dataset_info.json, the YAML text.

Pure functions of (spec, host record, job folder): the host record says which cards the job gets, whether
they have bf16 and whether torch there can use them; the job folder says where data, model and output live.
Every key radeonlab sets or changes is recorded with why (`Rendered.changes`): the YAML header lists them and
`submit --dry-run` shows them as a diff against the spec.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from radeonlab.contract.jobdir import JobDir
from radeonlab.contract.records import GpuRecord, HostRecord
from radeonlab.errors import RenderError
from radeonlab.jobs.spec.load import Spec
from radeonlab.jobs.spec.paths import local_path

PRECISION_KEYS = ("bf16", "fp16", "pure_bf16")
# Keys radeonlab always sets, whatever the spec says, and why (the reason goes into the YAML header).
FORCED: dict[str, tuple[Any, str]] = {
    "logging_nan_inf_filter": (False, "so a NaN loss is logged as NaN, not hidden as 0.0"),
    "overwrite_output_dir": (False, "so a retry resumes from output/checkpoint-* instead of starting over"),
}
# Keys radeonlab sets unless the spec does, and why.
DEFAULTS: dict[str, tuple[Any, str]] = {
    "plot_loss": (True, "the loss curve as output/training_loss.png"),
    "report_to": ("none", "no experiment tracker unless the spec names one"),
    # LLaMA-Factory 0.9.5 writes `throughput`/`total_tokens` into trainer_log.jsonl only with this on
    # (llamafactory/train/callbacks.py LogCallback): tokens/s in `watch` needs it.
    "include_num_input_tokens_seen": (True, "so trainer_log.jsonl carries tokens/s (`radeonlab watch`)"),
    # sft/workflow.py: effective_tokens_per_sec into train_results.json at the end (watch's summary)
    "include_effective_tokens_per_second": (True, "effective tokens/s in the end summary"),
}
CPU_TORCH_NOTE = (
    "precision flags dropped: torch on this host is a CPU build, allowed by python_stack_allow_cpu_torch "
    "(fp16 on CPU silently runs fp32, bf16 fails to start), so this runs in fp32"
)


@dataclass
class Rendered:
    """What to upload as config.yaml and data/dataset_info.json, and how it differs from the spec."""

    config: dict[str, Any]
    dataset_info: dict[str, Any]
    precision: str  # "bf16" | "fp16" | "fp32"
    why_precision: str
    changes: dict[str, tuple[Any, Any, str]] = field(default_factory=dict)  # key -> (spec, rendered, why)
    notes: list[str] = field(default_factory=list)
    yaml_text: str = ""

    @property
    def dataset_info_text(self) -> str:
        return json.dumps(self.dataset_info, indent=2) + "\n"

    def change(self, key: str, spec_value: Any, value: Any, why: str) -> None:
        self.config[key] = value
        if spec_value != value:
            self.changes[key] = (spec_value, value, why)


def choose_precision(
    train: Mapping[str, Any], host: HostRecord, gpus: Sequence[GpuRecord], *, on_card: bool = False
) -> tuple[str, str]:
    """(precision, why). bf16 where every GPU used has it, else fp16; a spec's explicit choice is kept,
    except bf16 on a card without it, which is refused naming the card. on_card: the precision the job has
    on the host's card even where torch is a CPU build (what the VRAM estimate is about)."""
    wants_bf16 = train.get("bf16") is True or train.get("pure_bf16") is True
    if host.cpu_torch and not on_card:
        if not host.torch.get("cpu_allowed"):
            raise RenderError(
                f"{host.host}: torch there is a CPU build ({host.torch.get('version')}): it would train on "
                "the CPU; provision the ROCm wheel (roles/python_stack), or set "
                "python_stack_allow_cpu_torch: true for a CPU-only host"
            )
        return "fp32", CPU_TORCH_NOTE
    lacking = [g for g in gpus if not g.bf16]
    if wants_bf16 and lacking:
        raise RenderError(
            f"bf16 refused: {lacking[0].label()} has no bf16 support; "
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
    return "fp16", f"fp16: {lacking[0].label()} has no bf16"


def render(
    spec: Spec,
    host: HostRecord,
    job: JobDir,
    *,
    gpus: Sequence[GpuRecord] | None = None,
    model_local: bool = False,
    base_dataset_info: Mapping[str, Any] | None = None,
    extra: Mapping[str, tuple[Any, str]] | None = None,
) -> Rendered:
    """Render `spec` for `host` into `job`'s folder.

    model_local: the spec's model_name_or_path is a local folder (uploaded to <job>/model).
    base_dataset_info: the dataset_info.json of the spec's local dataset folder, if it has one; the radeonlab
    block's datasets are added to it. extra: more keys to set, with why (multi-node keys)."""
    used = list(gpus) if gpus is not None else host.training_gpus()
    precision, why = choose_precision(spec.train, host, used)
    train = spec.train
    config = {k: v for k, v in train.items() if k not in PRECISION_KEYS}
    out = Rendered(config=config, dataset_info={}, precision=precision, why_precision=why)
    for key in PRECISION_KEYS:
        wanted = precision == key or (key == "pure_bf16" and precision == "bf16" and train.get(key) is True)
        if wanted:
            out.change(key, train.get(key), True, why)
        elif key in train:
            out.changes[key] = (train[key], None, why)
    if spec.dataset_dir() is not None:
        out.change("dataset_dir", train.get("dataset_dir"), job.data, "the job's uploaded data folder")
    if model_local:
        out.change(
            "model_name_or_path", train.get("model_name_or_path"), job.model, "the uploaded model folder"
        )
    out.change("output_dir", train.get("output_dir"), job.output, "the job folder's output/")
    for key, (value, reason) in FORCED.items():
        out.change(key, train.get(key), value, reason)
    for key, (value, reason) in DEFAULTS.items():
        if key not in train:
            out.change(key, None, value, reason)
    for key, (value, reason) in (extra or {}).items():
        out.change(key, train.get(key), value, reason)
    info = dict(base_dataset_info or {})
    info.update({d.name: d.info_entry() for d in spec.radeonlab.datasets})
    out.dataset_info = info
    if "dataset" not in train and spec.radeonlab.datasets:
        names = ",".join(d.name for d in spec.radeonlab.datasets)
        out.change("dataset", None, names, "the radeonlab block's datasets")
    out.notes = [why] + [
        f"{k}: {old} -> {new}, {reason}"
        for k, (old, new, reason) in out.changes.items()
        if k in FORCED and k in train
    ]
    out.yaml_text = to_yaml(out, host, used, job.id)
    return out


def to_yaml(rendered: Rendered, host: HostRecord, gpus: Sequence[GpuRecord], job_id: str) -> str:
    """The config as YAML with a header saying which job, host and card, and what radeonlab changed."""
    cards = "; ".join(g.label() for g in gpus) or "no GPU"
    header = [
        f"radeonlab job {job_id} on host {host.host}: {cards}",
        rendered.why_precision,
        *(
            f"{k}: {_show(old)} -> {_show(new)} ({why})"
            for k, (old, new, why) in rendered.changes.items()
            if k not in PRECISION_KEYS
        ),
        "Rendered by radeonlab from the job's spec; edit the spec, not this file.",
    ]
    body = yaml.safe_dump(
        rendered.config, sort_keys=False, default_flow_style=False, allow_unicode=True, width=1000
    )
    return "".join(f"# {line}\n" for line in header) + body


def _show(value: Any) -> str:
    return "(unset)" if value is None else str(value)


def local_model_dir(spec: Spec) -> str | None:
    """The spec's model folder when model_name_or_path names a local folder (relative to the spec file),
    else None (a hub id). Reads the filesystem: call it on the laptop, pass the answer to render()."""
    value = spec.train.get("model_name_or_path")
    if not isinstance(value, str) or not value:
        return None
    candidate = local_path(spec.base_dir, value)
    return str(candidate) if candidate.is_dir() else None

"""What kind of LLaMA-Factory config a spec is: training (what `radeonlab submit` runs), export, inference.

LLaMA-Factory's examples mix three kinds of YAML that differ only in their keys: `llamafactory-cli train`
configs (do_train / do_eval / do_predict), `llamafactory-cli export` configs (merge_lora/*.yaml: export_dir,
no do_train) and `llamafactory-cli chat` configs (inference/*.yaml: a model and a template, nothing to run).
`submit` only trains, so an export config given to it is refused with the verb that runs it.
"""

from __future__ import annotations

from radeonlab.jobs.spec.load import Spec
from radeonlab.jobs.spec.problems import ERROR, INFO, Problem

TRAIN, EXPORT, INFERENCE = "train", "export", "inference"
RUN_KEYS = ("do_train", "do_eval", "do_predict")


def kind(spec: Spec) -> str:
    """train | export | inference (by the keys LLaMA-Factory's own examples use for each)."""
    train = spec.train
    if any(train.get(k) is True for k in RUN_KEYS):
        return TRAIN
    if train.get("export_dir"):
        return EXPORT
    if "infer_backend" in train or ("template" in train and "dataset" not in train):
        return INFERENCE
    return TRAIN


def export_problems(spec: Spec, submitting: bool) -> list[Problem]:
    """An export config: info for `check`, an error for `submit` (call it with submitting=True there)."""
    if kind(spec) != EXPORT:
        return []
    message = "an export config (export_dir without do_train: `llamafactory-cli export`); " + (
        "submit runs training only" if submitting else "`radeonlab submit` refuses it"
    )
    return [
        Problem(
            str(spec.path),
            spec.line_of("export_dir"),
            message,
            ERROR if submitting else INFO,
            "use radeonlab export JOB [--merge] on the job that trained the adapter",
        )
    ]

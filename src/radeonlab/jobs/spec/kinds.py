"""What kind of LLaMA-Factory config a spec is: training (what `radeonlab submit` runs), export, inference.

LLaMA-Factory's examples mix three kinds of YAML that differ only in their keys: `llamafactory-cli train`
configs (do_train / do_eval / do_predict), `llamafactory-cli export` configs (merge_lora/*.yaml: export_dir,
no do_train) and `llamafactory-cli chat` configs (inference/*.yaml: a model and a template, nothing to run).
`submit` only trains, so an export config given to it is refused with the verb that runs it.
"""

from __future__ import annotations

from radeonlab.jobs.spec.load import Spec
from radeonlab.jobs.spec.problems import ERROR, INFO, Problem

TRAIN, EXPORT, INFERENCE, EVAL = "train", "export", "inference", "eval"
RUN_KEYS = ("do_train", "do_eval", "do_predict")
# EvaluationArguments (llamafactory 0.9.5 hparams/evaluation_args.py): the keys of a `llamafactory-cli eval`
# benchmark config (MMLU, C-Eval, CMMLU), which no training key list has
EVAL_KEYS = ("task", "task_dir", "n_shot", "lang", "save_dir")


def kind(spec: Spec) -> str:
    """train | export | inference | eval (by the keys LLaMA-Factory's own examples use for each)."""
    train = spec.train
    if "task" in train and sum(k in train for k in EVAL_KEYS) >= 2 and not any(k in train for k in RUN_KEYS):
        return EVAL
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


def eval_problem(spec: Spec) -> Problem:
    """A `llamafactory-cli eval` config: one error naming it, instead of one unknown key per benchmark key."""
    return Problem(
        str(spec.path),
        spec.line_of("task"),
        "an evaluation config for `llamafactory-cli eval` (task, n_shot: the MMLU/C-Eval/CMMLU benchmarks), "
        "not a training config; LLaMA-Factory 0.9.5 no longer runs it (launcher.py:launch raises "
        "`Evaluation will be deprecated in the future`); its keys are not checked",
        ERROR,
        "to score a model on a dataset, write a prediction config for `llamafactory-cli train`: do_predict: "
        "true, predict_with_generate: true, eval_dataset: <names>",
    )


def run_problems(spec: Spec) -> list[Problem]:
    """A config that evaluates or predicts without training: named, with what `llamafactory-cli train` does
    with it."""
    train = spec.train
    if kind(spec) != TRAIN or train.get("do_train") is True:
        return []
    if train.get("do_predict") is True:
        what = "a prediction config (do_predict without do_train): `llamafactory-cli train` trains nothing "
        what += "and writes generated_predictions.jsonl into output_dir "
        what += "(train/sft/trainer.py:save_predictions)"
        key = "do_predict"
    elif train.get("do_eval") is True:
        what = "an evaluation config (do_eval without do_train): `llamafactory-cli train` trains nothing and "
        what += "writes eval_results.json into output_dir (train/sft/workflow.py:run_sft)"
        key = "do_eval"
    else:
        return []
    return [Problem(str(spec.path), spec.line_of(key), what, INFO)]

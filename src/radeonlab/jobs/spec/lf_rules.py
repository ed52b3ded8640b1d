"""Rules between LLaMA-Factory keys: combinations 0.9.5 refuses after the model loads, or accepts and ignores.

Each row of RULES is data: `when` (every condition must hold; an absent key counts as its LLaMA-Factory
default from lf_args.json), the key whose line is reported, the severity (error: LLaMA-Factory raises;
warning: it silently ignores a key the user set), the message, the fix and the code path it comes from (files
inside the llamafactory 0.9.5 package: hparams/parser.py etc.). A rule fires only when at least one of its
reported key is written in the spec: defaults alone never make a finding.

A condition is a value (equality), {"in": [...]}, {"not_in": [...]}, {"gt": n}, {"lt": n}, SET (a value
other than null / false / empty) or UNSET. The pseudo-key ZERO3 holds when `deepspeed` names a config (inline
or a readable JSON file) whose zero_optimization.stage is 3 (transformers' is_deepspeed_zero3_enabled, which
the parser asks); a file that cannot be read leaves it unknown and its rules silent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from radeonlab.jobs.spec import inputs, lf_args
from radeonlab.jobs.spec.load import Spec
from radeonlab.jobs.spec.problems import ERROR, WARNING, Problem

SET, UNSET, ZERO3 = "<set>", "<unset>", "<deepspeed zero3>"
MAX_DS_BYTES = 1 << 20  # a DeepSpeed config is a few hundred bytes
_P = "hparams/parser.py"
_GTA = f"{_P}:get_train_args"
_VMA = f"{_P}:_verify_model_args"
_FT = "hparams/finetuning_args.py:FinetuningArguments.__post_init__"
_DA = "hparams/data_args.py:DataArguments.__post_init__"
_Q = "model/model_utils/quantization.py:configure_quantization"
_AD = "model/adapter.py"
NOT_SFT, NOT_LORA = {"not_in": ["sft"]}, {"not_in": ["lora"]}
QUANT = {"quantization_bit": SET}


@dataclass(frozen=True)
class Rule:
    key: str  # the key whose line is reported
    when: dict[str, Any]
    message: str  # LLaMA-Factory's own words in backticks where it raises
    fix: str
    source: str  # llamafactory 0.9.5 file:function
    severity: str = ERROR


R = Rule
RULES: tuple[Rule, ...] = (
    # get_train_args: stage-specific keys
    R("predict_with_generate", {"stage": NOT_SFT, "predict_with_generate": True},
      "`predict_with_generate` cannot be set as True except SFT", "remove predict_with_generate", _GTA),
    R("neat_packing", {"stage": NOT_SFT, "neat_packing": True},
      "`neat_packing` cannot be set as True except SFT", "remove neat_packing (or use packing: true)", _GTA),
    R("train_on_prompt", {"stage": NOT_SFT, "train_on_prompt": True},
      "`train_on_prompt` ... cannot be set as True except SFT", "remove train_on_prompt", _GTA),
    R("mask_history", {"stage": NOT_SFT, "mask_history": True},
      "`mask_history` cannot be set as True except SFT", "remove mask_history", _GTA),
    R("do_predict", {"stage": "sft", "do_predict": True, "predict_with_generate": {"not_in": [True]}},
      "do_predict without predict_with_generate: LLaMA-Factory stops with `Please enable "
      "`predict_with_generate` to save model predictions`", "add predict_with_generate: true", _GTA),
    R("load_best_model_at_end", {"stage": {"in": ["rm", "ppo"]}, "load_best_model_at_end": True},
      "`RM and PPO stages do not support `load_best_model_at_end``", "remove load_best_model_at_end", _GTA),
    R("stage", {"stage": "ppo", "do_train": {"not_in": [True]}},
      "stage ppo without do_train: `PPO training does not support evaluation, use the SFT stage to "
      "evaluate models`", "do_train: true (evaluate the PPO model with stage: sft and do_predict)", _GTA),
    R("shift_attn", {"stage": "ppo", "shift_attn": True}, "`PPO training is incompatible with S^2-Attn`",
      "remove shift_attn", _GTA),
    R("streaming", {"streaming": True, "max_steps": -1},
      "streaming without max_steps: `Please specify `max_steps` in streaming mode`",
      "max_steps: <steps> (a stream has no length to count epochs by)", _GTA),
    *(R(k, {k: True, "eval_dataset": UNSET, "val_size": {"lt": 1e-6}},
        f"{k} without eval_dataset or val_size: `Please make sure eval_dataset be provided or val_size "
        ">1e-6`", "eval_dataset: <names> or val_size: 0.1", _GTA)
      for k in ("do_eval", "do_predict", "predict_with_generate")),
    R("predict_with_generate", {"predict_with_generate": True, "compute_accuracy": True},
      "`Cannot use `predict_with_generate` and `compute_accuracy` together`",
      "keep one: predict_with_generate (text metrics) or compute_accuracy (token accuracy)", _GTA),
    R("predict_with_generate", {"predict_with_generate": True, ZERO3: True},
      "`predict_with_generate` is incompatible with DeepSpeed ZeRO-3", "a ZeRO-2 config, or predict in a "
      "separate job without deepspeed", _GTA),
    R("quantization_device_map", {"do_train": True, "quantization_device_map": "auto"},
      "`Cannot use device map for quantized models in training`", "remove quantization_device_map", _GTA),
    R("pissa_init", {"pissa_init": True, ZERO3: True},
      "`Please use scripts/pissa_init.py to initialize PiSSA in DeepSpeed ZeRO-3`", "remove pissa_init",
      _GTA),
    R("pure_bf16", {"pure_bf16": True, ZERO3: True}, "`pure_bf16` is incompatible with DeepSpeed ZeRO-3",
      "bf16: true instead of pure_bf16", _GTA),
    *(R(k, {"deepspeed": SET, k: True}, "`GaLore and APOLLO are incompatible with DeepSpeed yet`",
        f"remove deepspeed or {k}", _GTA) for k in ("use_galore", "use_apollo")),
    R("fp8", {"fp8": True, **QUANT},
      "`FP8 training is not compatible with quantization. Please disable one of them`",
      "remove fp8 (or quantization_bit)", _GTA),
    R("infer_backend", {"infer_backend": {"not_in": ["huggingface"]}},
      "`vLLM/SGLang backend is only available for API, CLI and Web` (training and prediction use "
      "huggingface)", "remove infer_backend", _GTA),
    R("use_unsloth", {"use_unsloth": True, ZERO3: True}, "`Unsloth is incompatible with DeepSpeed ZeRO-3`",
      "remove use_unsloth", _GTA),
    # _verify_model_args: adapters and quantization
    R("adapter_name_or_path", {"adapter_name_or_path": SET, "finetuning_type": NOT_LORA},
      "`Adapter is only valid for the LoRA method`", "finetuning_type: lora, or remove adapter_name_or_path",
      _VMA),
    R("quantization_bit", {**QUANT, "finetuning_type": {"not_in": ["lora", "oft"]}},
      "`Quantization is only compatible with the LoRA or OFT method`",
      "finetuning_type: lora (QLoRA), or remove quantization_bit", _VMA),
    R("pissa_init", {**QUANT, "pissa_init": True},
      "`Please use scripts/pissa_init.py to initialize PiSSA for a quantized model`", "remove pissa_init",
      _VMA),
    R("resize_vocab", {**QUANT, "resize_vocab": True},
      "`Cannot resize embedding layers of a quantized model`", "remove resize_vocab or quantization_bit",
      _VMA),
    R("create_new_adapter", {**QUANT, "adapter_name_or_path": SET, "create_new_adapter": True},
      "`Cannot create new adapter upon a quantized model`", "remove create_new_adapter", _VMA),
    # FinetuningArguments.__post_init__
    R("stage", {"stage": "ppo", "reward_model": UNSET}, "`reward_model` is necessary for PPO training",
      "reward_model: <a reward model (stage rm) or its adapter>", _FT),
    R("finetuning_type", {"stage": "ppo", "reward_model_type": "lora", "finetuning_type": NOT_LORA},
      "`reward_model_type` cannot be lora for Freeze/Full PPO training",
      "reward_model_type: full (a whole reward model), or finetuning_type: lora", _FT),
    R("dpo_label_smoothing", {"stage": "dpo", "pref_loss": {"not_in": ["sigmoid"]},
                              "dpo_label_smoothing": {"gt": 1e-6}},
      "`dpo_label_smoothing` is only valid for sigmoid loss function", "remove dpo_label_smoothing", _FT),
    R("use_llama_pro", {"use_llama_pro": True, "finetuning_type": "full"},
      "`use_llama_pro` is only valid for Freeze or LoRA training", "finetuning_type: freeze", _FT),
    *(R(k, {"finetuning_type": "lora", k: True}, "`Cannot use LoRA with GaLore, APOLLO or BAdam together`",
        "finetuning_type: full with " + k + ", or LoRA without it", _FT)
      for k in ("use_galore", "use_apollo", "use_badam")),
    R("pissa_init", {"pissa_init": True, "stage": {"in": ["ppo", "kto"]}},
      "`Cannot use PiSSA for current training stage`", "remove pissa_init", _FT),
    *(R(k, {"finetuning_type": NOT_LORA, k: v}, f"`{k}` is only valid for LoRA training",
        f"finetuning_type: lora, or remove {k}", _FT)
      for k, v in (("loraplus_lr_ratio", SET), ("use_rslora", True), ("use_dora", True),
                   ("pissa_init", True))),
    # DataArguments.__post_init__
    R("val_size", {"eval_dataset": SET, "val_size": {"gt": 1e-6}},
      "`Cannot specify `val_size` if `eval_dataset` is not None`", "keep one: eval_dataset or val_size", _DA),
    R("max_samples", {"streaming": True, "max_samples": SET},
      "`max_samples` is incompatible with `streaming`", "remove max_samples (max_steps bounds a stream)",
      _DA),
    R("mask_history", {"mask_history": True, "train_on_prompt": True},
      "`mask_history` is incompatible with `train_on_prompt`", "keep one of them", _DA),
    R("interleave_probs", {"interleave_probs": SET, "mix_strategy": "concat"},
      "`interleave_probs` is only valid for interleaved mixing",
      "mix_strategy: interleave_under (or remove interleave_probs)", _DA),
    R("export_quantization_bit", {"export_quantization_bit": SET, "export_quantization_dataset": UNSET},
      "`Quantization dataset is necessary for exporting`", "export_quantization_dataset: <a text file>",
      "hparams/model_args.py:ExportArguments.__post_init__"),
    # configure_quantization: method and bits, DeepSpeed ZeRO-3
    R("quantization_bit", {"quantization_method": "bnb", "quantization_bit": {"not_in": [None, 4, 8]}},
      "`Bitsandbytes only accepts 4-bit or 8-bit quantization`", "quantization_bit: 4 (or 8)", _Q),
    R("quantization_bit", {"quantization_method": "hqq",
                           "quantization_bit": {"not_in": [None, 1, 2, 3, 4, 5, 6, 8]}},
      "`HQQ only accepts 1/2/3/4/5/6/8-bit quantization`", "quantization_bit: 4", _Q),
    R("quantization_bit", {"quantization_method": "eetq", "quantization_bit": {"not_in": [None, 8]}},
      "`EETQ only accepts 8-bit quantization`", "quantization_bit: 8", _Q),
    R("quantization_bit", {"quantization_method": "bnb", "quantization_bit": 8, ZERO3: True},
      "8-bit with DeepSpeed ZeRO-3: `Only 4-bit quantized model can use fsdp+qlora or auto device map`",
      "quantization_bit: 4", _Q),
    R("quantization_method", {"quantization_method": {"in": ["hqq", "eetq"]}, **QUANT, ZERO3: True},
      "HQQ and EETQ quantization are incompatible with DeepSpeed ZeRO-3 (LLaMA-Factory raises)",
      "quantization_method: bnb with quantization_bit: 4", _Q),
    R("export_quantization_bit", {"export_quantization_bit": {"not_in": [None, 2, 3, 4, 8]}},
      "`AutoGPTQ only accepts 2/3/4/8-bit quantization`", "export_quantization_bit: 4", _Q),
    # keys LLaMA-Factory reads only beside another: set alone, they are silently ignored
    *(R(k, {k: SET, "quantization_bit": UNSET},
        f"`{k}` without quantization_bit: LLaMA-Factory quantizes only when quantization_bit is set, so this "
        "is ignored", "quantization_bit: 4 (QLoRA), or remove " + k, _Q, WARNING)
      for k in ("quantization_method", "quantization_type", "double_quantization")),
    *(R(f"{m}_model_{k}", {f"{m}_model_{k}": SET, f"{m}_model": UNSET},
        f"`{m}_model_{k}` without {m}_model: LLaMA-Factory ignores it (read only when it loads {m}_model)",
        f"{m}_model: <the model these belong to>, or remove {m}_model_{k}",
        f"train/trainer_utils.py:create_{'ref' if m == 'ref' else 'reward'}_model", WARNING)
      for m in ("ref", "reward") for k in ("adapters", "quantization_bit")),
    *(R(f"reward_model_{k}", {"reward_model": SET, f"reward_model_{k}": SET,
                              "reward_model_type": {"not_in": ["full"]}},
        f"`reward_model_{k}` with reward_model_type lora or api: LLaMA-Factory ignores it (only a full "
        "reward model is loaded with adapters and quantization)", "reward_model_type: full, or remove "
        f"reward_model_{k}", "train/trainer_utils.py:create_reward_model", WARNING)
      for k in ("adapters", "quantization_bit")),
    R("reward_model", {"reward_model": SET, "stage": {"not_in": ["ppo"]}},
      "`reward_model` outside stage ppo: LLaMA-Factory ignores it", "remove reward_model (or stage: ppo)",
      "train/tuner.py:_training_function (only the ppo workflow loads it)", WARNING),
    R("ref_model", {"ref_model": SET, "stage": {"not_in": ["dpo", "kto", "ppo"]}},
      "`ref_model` outside stages dpo, kto and ppo: LLaMA-Factory ignores it", "remove ref_model",
      "train/trainer_utils.py:create_ref_model (called by the dpo, kto and ppo workflows)", WARNING),
    *(R(k, {k: SET, "finetuning_type": {"in": ["freeze", "full"]}},
        f"`{k}` with finetuning_type freeze or full: LLaMA-Factory ignores it (read only by LoRA)",
        "finetuning_type: lora, or remove " + k, f"{_AD}:_setup_lora_tuning", WARNING)
      for k in ("lora_rank", "lora_alpha", "lora_dropout", "lora_target")),
    *(R(k, {k: SET, "finetuning_type": {"in": ["lora", "full", "oft"]}, "use_llama_pro": {"not_in": [True]}},
        f"`{k}` with finetuning_type other than freeze: LLaMA-Factory ignores it (read only by freeze "
        "tuning and LLaMA Pro)", "finetuning_type: freeze, or remove " + k, f"{_AD}:_setup_freeze_tuning",
        WARNING)
      for k in ("freeze_trainable_layers", "freeze_trainable_modules", "freeze_extra_modules")),
)  # fmt: skip


def rule_problems(spec: Spec) -> list[Problem]:
    """One finding per rule that holds and whose key the spec writes (errors first, one per key)."""
    facts = {ZERO3: _zero3(spec)}
    out: list[Problem] = []
    seen: set[str] = set()
    for rule in sorted(RULES, key=lambda r: r.severity != ERROR):
        if rule.key in seen or rule.key not in spec.train:
            continue
        if all(_holds(_value(spec, k, facts), c) for k, c in rule.when.items()):
            seen.add(rule.key)
            message = f"{rule.message} (llamafactory 0.9.5 {rule.source})"
            out.append(Problem(str(spec.path), spec.line_of(rule.key), message, rule.severity, rule.fix))
    return out


def _value(spec: Spec, key: str, facts: dict[str, Any]) -> Any:
    return facts[key] if key in facts else spec.train.get(key, lf_args.default(key))


def _holds(value: Any, condition: Any) -> bool:
    if condition == SET:
        return value not in (None, False, "", [], {})
    if condition == UNSET:
        return value in (None, False, "", [], {})
    if isinstance(condition, dict):
        if "in" in condition:
            return value in condition["in"]
        if "not_in" in condition:
            return value not in condition["not_in"]
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if "gt" in condition:
            return number and value > condition["gt"]
        return number and value < condition["lt"]
    return value is condition if isinstance(condition, bool) else value == condition


def _zero3(spec: Spec) -> bool | None:
    """Whether `deepspeed` turns on ZeRO stage 3; None when it cannot be told (no such readable file)."""
    value = spec.train.get("deepspeed")
    if isinstance(value, str) and value:
        path = Path(value).expanduser()
        path = path if path.is_absolute() else spec.base_dir / path
        try:
            value = json.loads(inputs.read_limited(path, MAX_DS_BYTES).decode("utf-8"))
        except (inputs.Refused, OSError, ValueError, RecursionError):
            return None
    if not isinstance(value, dict):
        return None if value else False
    stage = value.get("zero_optimization", {})
    return isinstance(stage, dict) and stage.get("stage") == 3

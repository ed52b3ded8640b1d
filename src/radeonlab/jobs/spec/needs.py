"""What a job config needs installed on the host, as data: spec keys and values -> Python distributions.

The deploy installs LLaMA-Factory with --no-deps plus the pinned stack (roles/python_stack/defaults.py), so a
config that turns on wandb, DeepSpeed, bitsandbytes, GaLore... fails on the host at import time, after
upload and queueing. `needs(spec)` says what the config needs (each rule cites where LLaMA-Factory 0.9.5 or
transformers 4.57.6 imports or version-checks it; paths are inside site-packages); `missing(needs,
installed)` compares that with the distributions a host's venv has (the host record's list) and gives one
refusal per missing or too old distribution, with the fix: `python_stack_extras: [<dist>]` in the inventory,
then re-run deploy/setup.py. Versions that extra installs: roles/python_stack/defaults.py
`python_stack_extras_versions`.

`key_problems(spec)` are the findings no package can fix (host-independent): flash_attn fa3, Ray keys without
USE_RAY, fp8 on Radeon.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

from radeonlab.jobs.spec import lf_args
from radeonlab.jobs.spec.load import Spec
from radeonlab.jobs.spec.problems import ERROR, INFO, WARNING, Problem

ANY = "<any value>"  # a rule's `when`: the key has a non-empty value
ENV_PREFIX = "env."  # a rule's key naming a variable of the radeonlab block's env
# llamafactory/extras/misc.py is_env_enabled: these values (lowercased) turn a USE_* variable on
ENV_TRUE = ("true", "y", "1")
LF = "llamafactory 0.9.5"
HF = "transformers 4.57.6"
_PARSER = f"{LF} hparams/parser.py _check_extra_dependencies: check_version({{}}, mandatory=True)"
_CALLBACK = f"{HF} integrations/integration_utils.py {{}}: `{{}} requires {{}} to be installed`"
# bitsandbytes on Radeon: releases up to 0.49.2 give NaN in 4-bit on AMD GPUs (unslothai/unsloth#6230,
# unslothai/notebooks#300); 0.50.0 is the first PyPI release with the whole ROCm 4-bit path, incl. the RDNA3/4
# fixes bitsandbytes#1979 and #2012 (unslothai/unsloth#7535 requires bitsandbytes>=0.50.0 for AMD).
BNB_ROCM_MIN = "0.50.0"
_BNB_WHY = (
    f"bitsandbytes>={BNB_ROCM_MIN}: older releases give NaN in 4-bit on AMD (unslothai/unsloth#6230); "
    f"0.50.0 is the first with the ROCm 4-bit fixes (unslothai/unsloth#7535)"
)
FLASH_ATTN_FIX = "flash_attn: sdpa (PyTorch's own attention; see docs/reference/needs.md, flash attention)"
_BNB_OPTIMS = (
    "adamw_bnb_8bit", "adamw_8bit", "ademamix", "ademamix_8bit", "lion_8bit", "lion_32bit",
    "paged_adamw_32bit", "paged_adamw_8bit", "paged_ademamix_32bit", "paged_ademamix_8bit",
    "paged_lion_32bit", "paged_lion_8bit", "rmsprop_bnb", "rmsprop_bnb_8bit", "rmsprop_bnb_32bit",
)  # fmt: skip
_OPTIMS = f"{HF} trainer.py Trainer.get_optimizer_cls_and_kwargs"


@dataclass(frozen=True)
class Rule:
    """One row of the table: when `key` matches `when` (and every `also` pair), `dist` is needed."""

    key: str  # a LLaMA-Factory key, or "env.NAME" for radeonlab.env
    when: Any  # True | ANY | a value | a tuple of values (a list-valued key matches if it holds one)
    dist: str  # the distribution's name on PyPI
    min_version: str | None
    source: str  # where LLaMA-Factory / transformers needs it
    also: tuple[tuple[str, Any], ...] = ()
    fix: str | None = None  # when installing an extra is not the fix


RULES: tuple[Rule, ...] = (
    # report_to: transformers builds one callback per integration and the callback refuses to start without it
    Rule("report_to", "wandb", "wandb", None, _CALLBACK.format("WandbCallback", "WandbCallback", "wandb")),
    Rule("report_to", "tensorboard", "tensorboard", None,
         _CALLBACK.format("TensorBoardCallback", "TensorBoardCallback", "tensorboard")),
    Rule("report_to", "mlflow", "mlflow", None,
         _CALLBACK.format("MLflowCallback", "MLflowCallback", "mlflow")),
    Rule("report_to", "swanlab", "swanlab", None,
         _CALLBACK.format("SwanLabCallback", "SwanLabCallback", "swanlab")),
    Rule("report_to", "trackio", "trackio", None,
         _CALLBACK.format("TrackioCallback", "TrackioCallback", "trackio")),
    Rule("report_to", "comet_ml", "comet-ml", "3.43.2",
         f"{HF} integrations/integration_utils.py CometCallback"),
    Rule("report_to", "clearml", "clearml", None, f"{HF} integrations/integration_utils.py ClearMLCallback"),
    Rule("report_to", "neptune", "neptune", None, f"{HF} integrations/integration_utils.py NeptuneCallback"),
    Rule("report_to", "dvclive", "dvclive", None, f"{HF} integrations/integration_utils.py DVCLiveCallback"),
    Rule("use_swanlab", True, "swanlab", None, _PARSER.format('"swanlab"')),
    # distributed training and its configs
    Rule("deepspeed", ANY, "deepspeed", "0.9.3",
         _PARSER.format('"deepspeed"') + f"; {HF} dependency_versions_table.py deepspeed>=0.9.3"),
    Rule(f"{ENV_PREFIX}USE_RAY", ENV_TRUE, "ray", None,
         f"{LF} train/tuner.py: USE_RAY=1 runs training through ray (extras/packages.py is_ray_available)"),
    Rule(f"{ENV_PREFIX}USE_MCA", ENV_TRUE, "mcore-adapter", None,
         f"{LF} hparams/training_args.py: `mcore_adapter is required when USE_MCA=1`",
         fix="radeonlab pins no Megatron-Core adapter for ROCm: remove USE_MCA (train with LLaMA-Factory's "
         "own trainer)"),
    Rule("use_hyper_parallel", True, "hyper-parallel", None,
         f"{LF} train/tuner.py: `is_hyper_parallel_available()` else ImportError"),
    # quantized training (QLoRA): on-the-fly quantization of the base model
    Rule("quantization_bit", (4, 8), "bitsandbytes", BNB_ROCM_MIN,
         f"{LF} model/model_utils/quantization.py check_version('bitsandbytes>=0.39.0') for 4-bit, "
         "'>=0.37.0' for 8-bit; "
         + _BNB_WHY, also=(("quantization_method", "bnb"),)),
    Rule("ref_model_quantization_bit", (4, 8), "bitsandbytes", BNB_ROCM_MIN,
         f"{LF} train/trainer_utils.py create_ref_model quantizes with bitsandbytes; " + _BNB_WHY),
    Rule("reward_model_quantization_bit", (4, 8), "bitsandbytes", BNB_ROCM_MIN,
         f"{LF} train/trainer_utils.py create_reward_model quantizes with bitsandbytes; " + _BNB_WHY),
    Rule("quantization_bit", ANY, "hqq", None,
         f"{LF} model/model_utils/quantization.py check_version('hqq', mandatory=True)",
         also=(("quantization_method", "hqq"),)),
    Rule("quantization_bit", ANY, "eetq", None,
         f"{LF} model/model_utils/quantization.py check_version('eetq', mandatory=True)",
         also=(("quantization_method", "eetq"),),
         fix="EETQ is a CUDA kernel library with no ROCm build: use quantization_method: bnb"),
    Rule("export_quantization_bit", ANY, "optimum", "1.24.0",
         f"{LF} model/model_utils/quantization.py: GPTQ export check_version('optimum>=1.24.0')"),
    Rule("export_quantization_bit", ANY, "gptqmodel", "2.0.0",
         f"{LF} model/model_utils/quantization.py: GPTQ export check_version('gptqmodel>=2.0.0')",
         fix="radeonlab pins no gptqmodel for ROCm: export without export_quantization_bit"),
    # optimizers and training methods LLaMA-Factory imports only when asked
    Rule("use_galore", True, "galore-torch", None, _PARSER.format('"galore_torch"')),
    Rule("use_apollo", True, "apollo-torch", None, _PARSER.format('"apollo_torch"')),
    Rule("use_badam", True, "badam", "1.2.1", _PARSER.format('"badam>=1.2.1"')),
    Rule("use_adam_mini", True, "adam-mini", None, _PARSER.format('"adam-mini"')),
    Rule("mixture_of_depths", ("convert", "load"), "mixture-of-depth", "1.1.6",
         _PARSER.format('"mixture-of-depth>=1.1.6"')),
    Rule("optim", _BNB_OPTIMS, "bitsandbytes", BNB_ROCM_MIN,
         f"{_OPTIMS}: `bitsandbytes` optimizers; " + _BNB_WHY),
    Rule("optim", ("galore_adamw", "galore_adamw_8bit", "galore_adafactor", "galore_adamw_layerwise",
                   "galore_adamw_8bit_layerwise", "galore_adafactor_layerwise"),
         "galore-torch", None, _OPTIMS),
    Rule("optim", ("apollo_adamw", "apollo_adamw_layerwise"), "apollo-torch", None, _OPTIMS),
    Rule("optim", ("lomo", "adalomo"), "lomo-optim", None, _OPTIMS),
    Rule("optim", ("grokadamw",), "grokadamw", None, _OPTIMS),
    Rule("optim", ("schedule_free_radam", "schedule_free_adamw", "schedule_free_sgd"), "schedulefree",
         "1.4.0", _OPTIMS),
    Rule("optim", ("adamw_torch_4bit", "adamw_torch_8bit"), "torchao", "0.4.0", _OPTIMS),
    Rule("optim", ("stable_adamw",), "torch-optimi", None, _OPTIMS),
    # kernels
    Rule("enable_liger_kernel", True, "liger-kernel", None, _PARSER.format('"liger-kernel"')),
    Rule("use_liger_kernel", True, "liger-kernel", "0.3.0",
         f"{HF} trainer.py: `liger-kernel >= 0.3.0 is not available`"),
    Rule("use_unsloth", True, "unsloth", None, _PARSER.format('"unsloth"'),
         fix="radeonlab pins no unsloth (its ROCm install brings its own torch/transformers): "
         "remove use_unsloth"),
    Rule("use_kt", True, "kt-kernel", None, _PARSER.format('"kt-kernel"'),
         fix="KTransformers (kt-kernel, transformers-kt, accelerate-kt) is not provided: remove use_kt"),
    Rule("flash_attn", "fa2", "flash-attn", None,
         f"{LF} model/model_utils/attention.py: without flash_attn it only warns `FlashAttention-2 is not "
         "installed` and keeps the model's default attention; flash-attn has no wheel for Radeon (RDNA) "
         "cards and does not build for gfx1201 (Dao-AILab/flash-attention#2588)",
         fix=FLASH_ATTN_FIX),
    Rule("fp8", True, "torchao", None,
         f"{LF} train/fp8_utils.py: fp8_backend auto/torchao imports torchao.float8 (on failure it only logs "
         "`Failed to create FP8 configuration` and trains without fp8)",
         also=(("fp8_backend", ("auto", "torchao")),)),
    Rule("fp8", True, "transformer-engine", None, f"{LF} train/fp8_utils.py: fp8_backend te imports "
         "transformer_engine.pytorch", also=(("fp8_backend", "te"),),
         fix="Transformer Engine is not provided for Radeon: use fp8_backend: torchao"),
    # evaluation and inference
    Rule("predict_with_generate", True, "jieba", None, _PARSER.format('"jieba"') + " (BLEU/ROUGE metrics)"),
    Rule("predict_with_generate", True, "nltk", None, _PARSER.format('"nltk"')),
    Rule("predict_with_generate", True, "rouge-chinese", None, _PARSER.format('"rouge_chinese"')),
    Rule("infer_backend", "vllm", "vllm", "0.4.3", _PARSER.format('"vllm"'),
         fix="vLLM's ROCm build is not on PyPI and radeonlab pins none: use infer_backend: huggingface"),
    Rule("infer_backend", "sglang", "sglang", "0.4.5", _PARSER.format('"sglang"'),
         fix="radeonlab pins no SGLang build for ROCm: use infer_backend: huggingface"),
    Rule("plot_loss", True, "matplotlib", None, _PARSER.format('"matplotlib"')),
    Rule(f"{ENV_PREFIX}USE_MODELSCOPE_HUB", ENV_TRUE, "modelscope", "1.14.0",
         f"{LF} extras/misc.py / data/loader.py check_version('modelscope>=1.14.0')"),
    Rule(f"{ENV_PREFIX}USE_OPENMIND_HUB", ENV_TRUE, "openmind", "0.8.0",
         f"{LF} extras/misc.py / data/loader.py check_version('openmind>=0.8.0')"),
)  # fmt: skip


# Pre-quantized models (GPTQ/AWQ/AQLM checkpoints): LLaMA-Factory reads quant_method from the model's
# config.json (model/model_utils/quantization.py configure_quantization) and version-checks the library;
# transformers' GPTQ quantizer also needs optimum (quantizers/quantizer_gptq.py). Without the model's config
# on the laptop, a hub id is recognised by the suffix such checkpoints are published under.
PREQUANTIZED: dict[str, tuple[tuple[str, str | None], ...]] = {
    "gptq": (("gptqmodel", "2.0.0"), ("optimum", "1.24.0")),
    "awq": (("autoawq", None),),
    "aqlm": (("aqlm", "1.1.0"),),
}
_PREQUANTIZED_NAME = re.compile(r"[-_](gptq|awq|aqlm)\b", re.I)
_PREQUANTIZED_FIX = (
    "radeonlab pins no {dist} build for ROCm: train the unquantized model with quantization_bit: 4 "
    "(bitsandbytes, QLoRA) instead"
)


@dataclass(frozen=True)
class Need:
    """A distribution one key of the spec needs on the host."""

    key: str  # the spec key, or "radeonlab.env.NAME"
    line: int
    distribution: str
    min_version: str | None
    why: str
    file: str = ""
    fix: str | None = None  # None: add the distribution to python_stack_extras

    @property
    def requirement(self) -> str:
        return f"{self.distribution}>={self.min_version}" if self.min_version else self.distribution


def normalize(name: str) -> str:
    """PEP 503 name normalization: `Galore_Torch` and `galore-torch` are one distribution."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _default(key: str) -> Any:
    return lf_args.keys().get(key, {}).get("default")


def _matches(value: Any, when: Any) -> bool:
    if value is None or value is False:
        return False
    if when is True:
        return value is True
    if when == ANY:
        return value not in ("", [], {})
    values = value if isinstance(value, list) else [value]
    wanted = when if isinstance(when, tuple) else (when,)
    return any(str(v).lower() == str(w).lower() for v in values for w in wanted)


def needs(config: Spec | Mapping[str, Any], env: Mapping[str, str] | None = None) -> list[Need]:
    """What `config` needs installed on the host, one Need per (key, distribution), in table order.

    config: a loaded Spec (keys keep their lines, env comes from its radeonlab block) or a plain mapping of
    LLaMA-Factory keys (e.g. a rendered config; lines are 1, env as given)."""
    train: Mapping[str, Any]
    if isinstance(config, Spec):
        train, file, env = config.train, str(config.path), {**config.radeonlab.env, **(env or {})}
        line_of = config.line_of
    else:
        train, file, env = config, "", dict(env or {})

        def line_of(key: str) -> int:
            return 1

    out: list[Need] = []
    seen: set[tuple[str, str]] = set()
    for rule in RULES:
        if rule.key.startswith(ENV_PREFIX):
            name = rule.key[len(ENV_PREFIX) :]
            value, key = env.get(name), f"radeonlab.env.{name}"
        else:
            value, key = train.get(rule.key, _default(rule.key)), rule.key
        if not _matches(value, rule.when):
            continue
        if not all(_matches(train.get(k, _default(k)), w) for k, w in rule.also):
            continue
        if (key, rule.dist) in seen:
            continue
        seen.add((key, rule.dist))
        out.append(Need(key, line_of(key), rule.dist, rule.min_version, rule.source, file, rule.fix))
    return out + _prequantized(train, line_of, file)


def _prequantized(train: Mapping[str, Any], line_of: Any, file: str) -> list[Need]:
    """Needs of a pre-quantized base model, recognised by its name (e.g. `...-Instruct-GPTQ`)."""
    found = _PREQUANTIZED_NAME.search(str(train.get("model_name_or_path") or ""))
    if not found:
        return []
    method = found.group(1).lower()
    why = (
        f"a {method.upper()}-quantized model: {LF} model/model_utils/quantization.py checks its library "
        "when config.json names that quant_method"
    )
    return [
        Need("model_name_or_path", line_of("model_name_or_path"), dist, minimum, why, file,
             _PREQUANTIZED_FIX.format(dist=dist))
        for dist, minimum in PREQUANTIZED[method]
    ]  # fmt: skip


def _extras_fix(dist: str) -> str:
    return f"python_stack_extras: [{dist}] in the inventory (host or group data), then re-run deploy/setup.py"


def fix_for(need: Need) -> str:
    """How to give the host what `need` asks for (or to do without it)."""
    from radeonlab.roles.python_stack.defaults import DEFAULTS

    pinned = {normalize(n) for n in DEFAULTS.get("python_stack_extras_versions", {})}
    if need.fix:
        return need.fix
    if normalize(need.distribution) in pinned:
        return _extras_fix(need.distribution)
    return (
        f"radeonlab pins no {need.distribution} version for this stack: install a ROCm-compatible one into "
        f"the host's venv yourself, or remove `{need.key}`"
    )


def _unmet(need: Need, have: Mapping[str, str]) -> str | None:
    """None when `have` (normalized name -> version) meets the need, else what the venv has instead."""
    version = have.get(normalize(need.distribution))
    if version is None:
        return "which the host's venv lacks"
    if need.min_version and _older(version, need.min_version):
        return f"the host's venv has {version}"
    return None


def _older(version: str, minimum: str) -> bool:
    try:
        return Version(version) < Version(minimum)
    except InvalidVersion:
        return False  # an unparseable version is not a reason to refuse


def missing(needs_: list[Need], installed: Mapping[str, str]) -> list[Problem]:
    """One error per need the host's venv does not meet: absent, or older than the minimum version.

    installed: distribution name -> version, as the host record lists the venv (names in any spelling)."""
    have = {normalize(name): version for name, version in installed.items()}
    out = []
    for need in needs_:
        unmet = _unmet(need, have)
        if unmet is not None:
            message = f"`{need.key}` needs {need.requirement}, {unmet} ({need.why})"
            out.append(Problem(need.file, need.line, message, ERROR, fix_for(need)))
    return out


def base_stack() -> dict[str, str]:
    """What every provisioned host's venv has (roles/python_stack/defaults.py): normalized name -> version."""
    from radeonlab.roles.python_stack.defaults import DEFAULTS

    reqs = [str(r).partition("==") for r in DEFAULTS["python_stack_requirements"]]
    have = {normalize(name): version for name, _, version in reqs}
    have["torch"] = str(DEFAULTS["pytorch_version"])
    have["llamafactory"] = str(DEFAULTS["llamafactory_version"])
    return have


def need_lines(needs_: list[Need]) -> list[Problem]:
    """`radeonlab check` without a host: one info line per need the pinned stack does not already meet."""
    base = base_stack()
    return [
        Problem(
            n.file,
            n.line,
            f"`{n.key}` needs {n.requirement} on the host, beyond the pinned stack ({n.why}); "
            "submit refuses a host without it",
            INFO,
            fix_for(n),
        )
        for n in needs_
        if _unmet(n, base) is not None
    ]


RAY_KEYS = ("ray_num_workers", "ray_init_kwargs")


def key_problems(spec: Spec) -> list[Problem]:
    """Keys no package makes work on a Radeon host, and keys that silently do nothing."""
    file, train, out = str(spec.path), spec.train, []
    if train.get("flash_attn") == "fa3":
        out.append(
            Problem(
                file,
                spec.line_of("flash_attn"),
                "`flash_attn: fa3` (FlashAttention-3) is for NVIDIA Hopper only: LLaMA-Factory 0.9.5 stops "
                "with `Unknown attention type` (model/model_utils/attention.py) for every model but "
                "gpt-oss, and flash-attn has no Radeon build (Dao-AILab/flash-attention#2588)",
                ERROR,
                FLASH_ATTN_FIX,
            )
        )
    ray_keys = [k for k in RAY_KEYS if k in train and train[k] != _default(k)]
    use_ray = str(spec.radeonlab.env.get("USE_RAY", "0")).lower() in ENV_TRUE
    if ray_keys and not use_ray:
        out.append(
            Problem(
                file,
                spec.line_of(ray_keys[0]),
                f"`{ray_keys[0]}` takes effect only with USE_RAY=1 (llamafactory extras/misc.py use_ray); "
                "without it LLaMA-Factory ignores it and trains as one process",
                WARNING,
                "radeonlab.env: {USE_RAY: 1} plus python_stack_extras: [ray], or radeonlab.nodes for "
                "several hosts",
            )
        )
    if train.get("fp8") is True:
        out.append(
            Problem(
                file,
                spec.line_of("fp8"),
                "fp8 training needs fp8 matrix units (LLaMA-Factory's help: `Requires ... Hopper "
                "architecture GPUs`); RDNA3 cards have none, and fp8 on RDNA4 is not verified by radeonlab "
                "(no card here)",
                WARNING,
                "remove fp8 (bf16 is what Radeon cards train in)",
            )
        )
    return out

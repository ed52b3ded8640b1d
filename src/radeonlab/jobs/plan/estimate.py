"""Pre-flight VRAM estimate for a LoRA (or full) fine-tune of a Llama-style decoder, from its config.json.

An estimate, not a measurement: it is checked against the public Llama-3-8B figure in the project notes'
docs/notes/rocm-facts.md and LLaMA-Factory's README table (tests/unit/test_estimate.py states the tolerances;
docs/reference/vram.md the error).

Formula (bytes; h hidden_size, i intermediate_size, L num_hidden_layers, a num_attention_heads,
k num_key_value_heads, d head_dim = h/a unless given, V vocab_size, b per_device_train_batch_size,
s cutoff_len (the worst case: LLaMA-Factory pads a batch to its longest row, at most cutoff_len), T = b*s,
c = bytes of the compute dtype: 2 for bf16/fp16, 4 for fp32):

  parameters   P = L*(h*a*d + 2*h*k*d + a*d*h + 3*h*i + 2*h) + h + V*h*(1 if tie_word_embeddings else 2)
  weights      W = P * c                                            (frozen base model)
  LoRA         R = r * sum over the targeted linear layers of (in + out), for every layer;
               lora_target all = q,k,v,o,gate,up,down (LLaMA-Factory leaves lm_head and embeddings out)
  trainable    R * (p + p + n*o): parameter + gradient in p bytes (LLaMA-Factory upcasts trainable
               parameters to fp32: p = 4; 2 with pure_bf16), n optimizer states of o bytes (AdamW: 2 x p;
               8-bit AdamW: 2 x 1; SGD/Adafactor: 0). Full fine-tuning: R = P and W = 0.
  checkpoints  C = L*T*h*c          with gradient checkpointing (LLaMA-Factory's default: on unless
               disable_gradient_checkpointing), the input of every decoder layer is kept
  one layer    Y = T*((2h + 5*a*d + 4i)*c + 2h*4)   saved tensors of one decoder layer (RMSNorm keeps fp32
               copies; SDPA keeps q, k, v expanded to a heads, and its output) + eager attention
               (flash_attn: disabled) b*a*s^2*(2c + 4) for the score, fp32 softmax and probability tensors
  logits       G = T*V*12           bf16 logits, their fp32 copy and log-softmax in the loss, and the fp32
               gradient during backward (transformers' ForCausalLMLoss upcasts to fp32)
  activations  A = C + max(G, Y)    with checkpointing (the logits' backward ends before layers recompute)
               A = L*Y + G          without it (every layer's tensors are held while the logits are built)
  peak         W + trainable + A + overhead, overhead = OVERHEAD["fixed_bytes"] (HIP context, kernels, BLAS
               workspaces) + OVERHEAD["fraction"] * (W + trainable + A) (caching-allocator fragmentation)

QLoRA (quantization_bit 4|8 with bitsandbytes, LLaMA-Factory's default quantization_method): the decoder's
linear layers are stored quantized, everything else (embeddings, lm_head, norms) stays in the compute dtype
(transformers' bitsandbytes quantizers skip the output layer; nn.Embedding is not a Linear):
  4-bit        Q = 0.5 byte per weight + one fp32 absmax per block of 64 weights (4/64 B); with
               double_quantization (LLaMA-Factory's default) the absmax is itself stored in 8 bits with one
               fp32 constant per 256 blocks: 1/64 + 4/(64*256) B per weight (bitsandbytes blockwise NF4)
  8-bit        Q = 1 byte per weight + one fp32 scale per output row (LLM.int8 SCB)
  weights      W = Qbytes * (linear weights) + c * (the rest)
  dequantize   D = c * (largest linear layer): a layer's weight is dequantized to the compute dtype for its
               matmul, one at a time (a transient buffer, counted once)
Other quantization_method values (hqq, eetq...) are counted with the same storage per bit.

Not modelled: multimodal towers, MoE, pre-quantized checkpoints (GPTQ/AWQ weights counted unquantized).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from radeonlab.contract.records import GIB
from radeonlab.jobs.host.remedies import LADDERS, STEP_KEYS, STEPS, Changes
from radeonlab.jobs.spec import lf_args

# Framework overhead: a judgment, not a measurement (no GPU on the machine that wrote this); see README.
OVERHEAD: dict[str, float] = {"fixed_bytes": 1.0 * GIB, "fraction": 0.10}
LOGITS_BYTES_PER_ELEMENT = 12  # bf16 logits (2) freed as the fp32 copy (4) and log-softmax (4) appear; + grad
RMSNORM_FP32_COPIES = 2  # two RMSNorms per layer, each keeping an fp32 copy of its input
EAGER_FP32_SOFTMAX_BYTES = 4
FIT_MARGIN = 0.05  # keep 5 % of the free VRAM spare
# bitsandbytes 4-bit storage (functional.quantize_4bit): block of 64 weights per fp32 absmax (64 on Radeon
# too since bitsandbytes#1748, which enabled it for RDNA); double quantization stores the absmax in 8 bits,
# one fp32 constant per 256 absmax values.
BNB_BLOCKSIZE = 64
BNB_NESTED_BLOCKSIZE = 256
# lora_target names -> (in, out) as functions of the model shape (Llama/Qwen/Mistral naming)
LINEAR_LAYERS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class EstimateError(ValueError):
    """A model config or training config the estimate cannot handle."""


@dataclass(frozen=True)
class ModelShape:
    """The config.json values the estimate needs."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    tie_word_embeddings: bool = False
    head_dim: int | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ModelShape:
        """From a transformers config.json dict (a multimodal model's text_config is used if present)."""
        cfg = config.get("text_config") or config
        try:
            heads = int(cfg["num_attention_heads"])
            return cls(
                hidden_size=int(cfg["hidden_size"]),
                intermediate_size=int(cfg["intermediate_size"]),
                num_hidden_layers=int(cfg["num_hidden_layers"]),
                num_attention_heads=heads,
                num_key_value_heads=int(cfg.get("num_key_value_heads") or heads),
                vocab_size=int(cfg["vocab_size"]),
                tie_word_embeddings=bool(
                    config.get("tie_word_embeddings", cfg.get("tie_word_embeddings", False))
                ),
                head_dim=int(cfg["head_dim"]) if cfg.get("head_dim") else None,
            )
        except KeyError as err:
            raise EstimateError(f"config.json has no {err.args[0]}: not a Llama-style decoder") from None

    @property
    def d(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    def linear(self, name: str) -> tuple[int, int]:
        """(in, out) features of one decoder layer's linear layer."""
        h, i = self.hidden_size, self.intermediate_size
        q, kv = self.num_attention_heads * self.d, self.num_key_value_heads * self.d
        shapes = {
            "q_proj": (h, q),
            "k_proj": (h, kv),
            "v_proj": (h, kv),
            "o_proj": (q, h),
            "gate_proj": (h, i),
            "up_proj": (h, i),
            "down_proj": (i, h),
        }
        return shapes[name]

    def parameters(self) -> int:
        """P: every weight of the model."""
        h, layers = self.hidden_size, self.num_hidden_layers
        per_layer = sum(a * b for a, b in (self.linear(n) for n in LINEAR_LAYERS)) + 2 * h
        embeddings = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return layers * per_layer + h + embeddings


@dataclass(frozen=True)
class Estimate:
    """Peak VRAM of one training process, with its parts (bytes) and the inputs it came from."""

    shape: ModelShape
    train: dict[str, Any]
    parts: dict[str, int]  # weights, trainable, activations, overhead
    detail: dict[str, int]  # parameters, trainable_parameters, checkpoints, layer, logits, ...
    notes: list[str] = field(default_factory=list)

    @property
    def peak(self) -> int:
        return sum(self.parts.values())

    def table(self) -> str:
        """The breakdown as text lines (GiB)."""
        rows = [f"{k:<12} {v / GIB:8.2f} GiB" for k, v in self.parts.items()]
        return "\n".join([*rows, f"{'peak':<12} {self.peak / GIB:8.2f} GiB", *self.notes])


def value(train: Mapping[str, Any], key: str) -> Any:
    """The value LLaMA-Factory will use: the config's, else the pinned release's default."""
    return train[key] if key in train else lf_args.default(key)


def compute_bytes(train: Mapping[str, Any]) -> int:
    """2 for bf16/fp16 (pure_bf16 too), else 4 (fp32, e.g. the simulated CPU host)."""
    return 2 if any(train.get(k) is True for k in ("bf16", "fp16", "pure_bf16")) else 4


def lora_targets(train: Mapping[str, Any]) -> list[str]:
    """The targeted linear layers: lora_target `all` (LLaMA-Factory's default) = every linear layer."""
    raw = str(value(train, "lora_target"))
    names = [n.strip() for n in raw.split(",") if n.strip()]
    return list(LINEAR_LAYERS) if names == ["all"] else [n for n in names if n in LINEAR_LAYERS]


def _optimizer_state_bytes(optim: str, param_bytes: int) -> int:
    if "8bit" in optim:
        return 2
    if optim.startswith(("sgd", "adafactor", "galore_adafactor")):
        return 0
    return 2 * param_bytes


def estimate(model_config: Mapping[str, Any], train: Mapping[str, Any]) -> Estimate:
    """The estimate for a model's config.json and a (rendered) training config."""
    shape = ModelShape.from_config(model_config)
    notes: list[str] = []
    c = compute_bytes(train)
    kind = str(value(train, "finetuning_type"))
    if kind not in ("lora", "full"):
        raise EstimateError(f"finetuning_type {kind} is not modelled (lora and full are)")
    bits = train.get("quantization_bit")
    if bits and kind != "lora":
        raise EstimateError("quantization_bit is modelled for LoRA only (QLoRA)")
    params = shape.parameters()
    if kind == "lora":
        rank = int(value(train, "lora_rank"))
        targets = lora_targets(train)
        unknown = set(str(value(train, "lora_target")).split(",")) - set(targets) - {"all"}
        if unknown:
            notes.append(f"lora_target names not modelled (left out): {', '.join(sorted(unknown))}")
        trainable = shape.num_hidden_layers * rank * sum(sum(shape.linear(n)) for n in targets)
        weights = params * c
        dequant = 0
        if bits:
            weights, dequant = quantized_weights(
                shape, int(bits), bool(value(train, "double_quantization")), c
            )
            notes.append(f"QLoRA: base weights stored in {bits} bits (bitsandbytes)")
    else:
        trainable, weights, dequant = params, 0, 0
    p = 2 if train.get("pure_bf16") is True else 4
    state = _optimizer_state_bytes(str(value(train, "optim")), p)
    trainable_bytes = trainable * (2 * p + state)

    b, s = int(value(train, "per_device_train_batch_size")), int(value(train, "cutoff_len"))
    h, i, layers = shape.hidden_size, shape.intermediate_size, shape.num_hidden_layers
    ad = shape.num_attention_heads * shape.d
    tokens = b * s
    layer = tokens * ((2 * h + 5 * ad + 4 * i) * c + RMSNORM_FP32_COPIES * h * 4)
    if value(train, "flash_attn") == "disabled":
        layer += b * shape.num_attention_heads * s * s * (2 * c + EAGER_FP32_SOFTMAX_BYTES)
    logits = tokens * shape.vocab_size * LOGITS_BYTES_PER_ELEMENT
    checkpointing = not value(train, "disable_gradient_checkpointing")
    if checkpointing:
        checkpoints = layers * tokens * h * c
        activations = checkpoints + max(logits, layer)
    else:
        checkpoints = 0
        activations = layers * layer + logits
    tensors = weights + trainable_bytes + activations + dequant
    overhead = int(OVERHEAD["fixed_bytes"] + OVERHEAD["fraction"] * tensors)
    parts = {"weights": weights, "trainable": trainable_bytes, "activations": activations}
    if dequant:
        parts["dequantize"] = dequant
    return Estimate(
        shape=shape,
        train=dict(train),
        parts={**parts, "overhead": overhead},
        detail={
            "parameters": params,
            "trainable_parameters": trainable,
            "checkpoints": checkpoints,
            "layer": layer,
            "logits": logits,
        },
        notes=notes,
    )


def quantized_bytes_per_weight(bits: int, double_quantization: bool = True) -> float:
    """Bytes per quantized weight, constants included (4-bit blockwise; other widths: bits/8 + the same
    per-block constants; 8-bit: LLM.int8, whose per-row scales quantized_weights adds)."""
    if bits == 8:
        return 1.0
    if double_quantization:
        constants = 1 / BNB_BLOCKSIZE + 4 / (BNB_BLOCKSIZE * BNB_NESTED_BLOCKSIZE)
    else:
        constants = 4 / BNB_BLOCKSIZE
    return bits / 8 + constants


def quantized_weights(shape: ModelShape, bits: int, double_quantization: bool, c: int) -> tuple[int, int]:
    """(W, D): the base model's bytes with its decoder linears quantized, and the dequantize buffer."""
    linears = [shape.linear(n) for n in LINEAR_LAYERS]
    linear_weights = shape.num_hidden_layers * sum(a * b for a, b in linears)
    stored = linear_weights * quantized_bytes_per_weight(bits, double_quantization)
    if bits == 8:
        stored += shape.num_hidden_layers * sum(out for _, out in linears) * 4  # fp32 scale per row
    rest = shape.parameters() - linear_weights
    return int(stored + rest * c), max(a * b for a, b in linears) * c


@dataclass(frozen=True)
class Verdict:
    """Whether an estimate fits the free VRAM, and if not, the first OOM remedy that would."""

    fits: bool
    peak: int
    free: int
    message: str
    remedy: Changes | None = None  # key -> (old, new), cumulative over the steps
    steps: list[str] = field(default_factory=list)  # the OOM ladder steps that get there


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


def fits(estimate_: Estimate, free_vram: int) -> Verdict:
    """Fit check with FIT_MARGIN spare; when it does not fit, walk the OOM ladder (LADDERS["oom"], each
    step repeated while it changes something) on the estimate's own config until one fits."""
    budget = int(free_vram * (1 - FIT_MARGIN))
    if estimate_.peak <= budget:
        return Verdict(True, estimate_.peak, free_vram, f"fits: ~{_gib(estimate_.peak)} of {_gib(free_vram)}")
    config = {**{k: lf_args.default(k) for k in STEP_KEYS}, **estimate_.train}
    changes: Changes = {}
    steps: list[str] = []
    shape_cfg = _shape_config(estimate_.shape)
    for name in LADDERS["oom"]:
        while (step_changes := STEPS[name].apply(config)) is not None:
            for key, (old, new) in step_changes.items():
                changes[key] = (changes.get(key, (old, new))[0], new)
                config[key] = new
            steps.append(name)
            trial = estimate(shape_cfg, config)
            if trial.peak <= budget:
                said = ", ".join(f"{k}: {o} -> {n}" for k, (o, n) in changes.items())
                return Verdict(
                    False,
                    estimate_.peak,
                    free_vram,
                    f"does not fit: ~{_gib(estimate_.peak)} needed, {_gib(free_vram)} free; "
                    f"with {said} ~{_gib(trial.peak)}",
                    remedy=changes,
                    steps=steps,
                )
    return Verdict(
        False,
        estimate_.peak,
        free_vram,
        f"does not fit: ~{_gib(estimate_.peak)} needed, {_gib(free_vram)} free, and still "
        f"~{_gib(estimate(shape_cfg, config).peak)} after every OOM remedy: use a bigger card or QLoRA",
    )


def _shape_config(shape: ModelShape) -> dict[str, Any]:
    return {
        "hidden_size": shape.hidden_size,
        "intermediate_size": shape.intermediate_size,
        "num_hidden_layers": shape.num_hidden_layers,
        "num_attention_heads": shape.num_attention_heads,
        "num_key_value_heads": shape.num_key_value_heads,
        "vocab_size": shape.vocab_size,
        "tie_word_embeddings": shape.tie_word_embeddings,
        "head_dim": shape.head_dim,
    }

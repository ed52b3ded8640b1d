"""The demo's base model: a tiny, randomly initialised Llama with a tokenizer trained on the demo data.

It stands in for a real base model (SIMULATED: it knows nothing) so a LoRA run on CPU takes seconds and needs
no model hub. Deterministic: the same data gives byte-identical files (fixed seeds, fp32 safetensors).

Opt-in, for the benchmark only: a larger SIMULATED model (BENCH_MODEL_CONFIG, ~230 MB of random weights, the
same tokenizer), whose download is a real part of a job's start the way a real base model's is. It is built
once per machine and kept in the sandbox cache (`cached_model`). Everything else uses the tiny one.

    python -m radeonlab.sandbox.tinymodel OUT_DIR --data DATA.jsonl [--bench]

Needs torch, transformers, tokenizers and safetensors on the laptop (the project's `sandbox` extra).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path

from radeonlab.jobs.host.receive import sha256_of
from radeonlab.sandbox import config as sandbox_config

SEED = 0
# The architecture (transformers.LlamaConfig keys). initializer_range 0.2, not the HF default 0.02: with
# 0.02 the frozen random lm_head yields logits of about +-1 and LoRA (which does not train lm_head) stalls
# near loss 6; with 0.2 the demo's loss falls from ~8 to ~2 in 40 steps.
MODEL_CONFIG: dict[str, object] = {
    "vocab_size": 1024,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6,
    "initializer_range": 0.2,
    "tie_word_embeddings": False,
}
# The bench's larger SIMULATED model (tests/bench/jobs.py bench_hub): 8 layers of width 768, ~58 M
# parameters, one fp32 model.safetensors of ~233 MB. Why this size: over the bench's SIMULATED 100 Mbit/s
# link its download takes ~19 s, longer than the rest of a job's start, so what the shared cache saves shows
# (a real 8B model is ~16 GB: its first job waits far longer); larger only makes each CPU step slower.
# initializer_range back at the HF default 0.02: at width 768, 0.2 gives logits of about +-5 and a first loss
# far above the tiny model's; this model only has to load and train steps, not to learn the demo task.
BENCH_MODEL_CONFIG: dict[str, object] = {
    **MODEL_CONFIG,
    "hidden_size": 768,
    "intermediate_size": 2048,
    "num_hidden_layers": 8,
    "num_attention_heads": 12,
    "num_key_value_heads": 12,
    "initializer_range": 0.02,
}
# Bump when build_model's output changes for the same inputs: cached models are then rebuilt.
BUILD_VERSION = 1
UNK, BOS, EOS, PAD = "<unk>", "<s>", "</s>", "<pad>"
# LLaMA-Factory's `default` template wraps rows as "Human: ...</s>\nAssistant:...</s>\n" (and "System: ...");
# training the tokenizer on the same scaffolding gives it whole tokens for it.
USER_PREFIX, ASSISTANT_PREFIX, SYSTEM_PREFIX = "Human: ", "\nAssistant:", "System: "
# Used by generate() outside LLaMA-Factory (which installs its own template); mirrors `default`.
CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'system' %}" + SYSTEM_PREFIX + "{{ m['content'] }}" + EOS + "\n"
    "{% elif m['role'] == 'user' %}" + USER_PREFIX + "{{ m['content'] }}" + EOS + ASSISTANT_PREFIX + ""
    "{% else %}{{ m['content'] }}" + EOS + "\n{% endif %}"
    "{% endfor %}"
)


def corpus(data: Path) -> Iterator[str]:
    """The text the tokenizer learns: every row as the `default` template renders it."""
    with data.open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            prompt = "\n".join(p for p in (row["instruction"], row.get("input", "")) if p)
            yield f"{USER_PREFIX}{prompt}{EOS}{ASSISTANT_PREFIX}{row['output']}{EOS}\n"
    yield f"{SYSTEM_PREFIX}You are a helpful assistant.{EOS}\n"


def build_tokenizer(data: Path):  # -> transformers.PreTrainedTokenizerFast
    """Byte-level BPE (any byte encodes, so no <unk> at run time). The small corpus yields fewer merges than
    the model's vocab_size; the extra embedding rows are simply never used."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=int(MODEL_CONFIG["vocab_size"]),  # type: ignore[call-overload]
        min_frequency=1,
        special_tokens=[UNK, BOS, EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(data), trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token=UNK,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        model_max_length=int(MODEL_CONFIG["max_position_embeddings"]),  # type: ignore[call-overload]
        clean_up_tokenization_spaces=False,
        # Without this the fast tokenizer also returns token_type_ids, which Llama's generate() rejects.
        model_input_names=["input_ids", "attention_mask"],
    )
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped


def build_model(out_dir: Path, data: Path, model_config: Mapping[str, object] = MODEL_CONFIG) -> Path:
    """Write the tokenizer and a seeded random fp32 Llama (model.safetensors) to `out_dir`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer(data)
    torch.manual_seed(SEED)
    config = LlamaConfig(
        **model_config,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    # transformers wraps to() in functools.wraps(torch.nn.Module.to): its type wants the model as argument 1
    model = LlamaForCausalLM(config).to(torch.float32)  # type: ignore[arg-type]  # transformers' typing (above)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def model_key(data: Path, model_config: Mapping[str, object]) -> str:
    """What a built model depends on: its config, the data its tokenizer learns, the build and the library
    versions that write the files (the same inputs give byte-identical files,
    tests/unit/test_tinymodel.py)."""
    import tokenizers
    import torch
    import transformers

    inputs = {
        "config": dict(model_config),
        "data": sha256_of(str(data)),
        "build": BUILD_VERSION,
        "versions": [torch.__version__, transformers.__version__, tokenizers.__version__],
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def cached_model(
    data: Path, model_config: Mapping[str, object] = BENCH_MODEL_CONFIG, cache_dir: Path | None = None
) -> Path:
    """The model for `data` and `model_config`, built once and kept in the sandbox cache (CACHE_DIR/models):
    the larger bench model takes a while to write. Built in a temporary folder and renamed, under a file
    lock, so concurrent callers on one machine build it once and never see half a model."""
    root = (cache_dir or sandbox_config.CACHE_DIR) / "models"
    out = root / f"llama-{model_key(data, model_config)}"
    if out.is_dir():
        return out
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not out.is_dir():
            tmp = root / f"{out.name}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            build_model(tmp, data, model_config)
            tmp.rename(out)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--data", type=Path, required=True, help="the JSON Lines alpaca data (demodata)")
    parser.add_argument("--bench", action="store_true", help="the larger bench model (BENCH_MODEL_CONFIG)")
    args = parser.parse_args(argv)
    build_model(args.out_dir, args.data, BENCH_MODEL_CONFIG if args.bench else MODEL_CONFIG)
    print(f"wrote {'bench' if args.bench else 'tiny'} Llama to {args.out_dir}")


if __name__ == "__main__":
    main()

"""Ask a trained adapter one question on the workstation, through LLaMA-Factory's own chat model.

    <venv>/bin/python -m radeonlab.jobs.host.tryout < {"config", "adapter", "prompt", "max_new_tokens",
                                                       "compare_base"}

Run by the job's TRAINING venv (it imports llamafactory; the rest of jobs/host is stdlib-only), in a login
shell so profile.d sets the card's environment, with HF_HUB_OFFLINE=1: the base model is the job's own (a
local folder or the host's model cache). Prints {"answer": "..."} as its last line, with "base_answer" (the
base model alone, no adapter) when compare_base is true. The same template and finetuning type as the
training run, greedy decoding: a quick, repeatable look at what the adapter learned.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def chat_args(cfg: dict[str, Any], adapter: str | None, **generation: Any) -> dict[str, Any]:
    """LLaMA-Factory's inference arguments for the training run's model and template, with `adapter`
    (None: the base model alone)."""
    args = {
        "model_name_or_path": cfg["model_name_or_path"],
        "template": cfg.get("template", "default"),
        "trust_remote_code": cfg.get("trust_remote_code", False),
        "infer_backend": "huggingface",
        **{k: v for k, v in generation.items() if v is not None},
    }
    if adapter:
        args["adapter_name_or_path"] = adapter
        args["finetuning_type"] = cfg.get("finetuning_type", "lora")
    if cfg.get("model_revision"):
        args["model_revision"] = cfg["model_revision"]
    return args


def read_config(path: str) -> dict[str, Any]:
    import yaml

    with open(path) as f:
        return yaml.safe_load(f) or {}


def answer(args: dict[str, Any], prompt: str) -> str:
    from llamafactory.chat import ChatModel

    model = ChatModel(args)
    return model.chat([{"role": "user", "content": prompt}])[0].response_text


def main() -> int:
    req = json.load(sys.stdin)
    cfg = read_config(req["config"])
    greedy = {"do_sample": False, "max_new_tokens": req["max_new_tokens"]}
    out = {"answer": answer(chat_args(cfg, req["adapter"], **greedy), req["prompt"])}
    if req.get("compare_base"):
        out["base_answer"] = answer(chat_args(cfg, None, **greedy), req["prompt"])
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Ask a trained adapter one question on the workstation, through LLaMA-Factory's own chat model.

    <venv>/bin/python -m radeonlab.jobs.host.tryout < {"config", "adapter", "prompt", "max_new_tokens"}

Run by the job's TRAINING venv (it imports llamafactory; the rest of jobs/host is stdlib-only), in a login
shell so profile.d sets the card's environment, with HF_HUB_OFFLINE=1: the base model is the job's own (a
local folder or the host's model cache). Prints {"answer": "..."} as its last line. The same template and
finetuning type as the training run, greedy decoding: a quick, repeatable look at what the adapter learned.
"""

from __future__ import annotations

import json
import sys


def main() -> int:
    import yaml
    from llamafactory.chat import ChatModel

    req = json.load(sys.stdin)
    with open(req["config"]) as f:
        cfg = yaml.safe_load(f)
    args = {
        "model_name_or_path": cfg["model_name_or_path"],
        "adapter_name_or_path": req["adapter"],
        "template": cfg.get("template", "default"),
        "finetuning_type": cfg.get("finetuning_type", "lora"),
        "trust_remote_code": cfg.get("trust_remote_code", False),
        "infer_backend": "huggingface",
        "do_sample": False,
        "max_new_tokens": req["max_new_tokens"],
    }
    if cfg.get("model_revision"):
        args["model_revision"] = cfg["model_revision"]
    model = ChatModel(args)
    answer = model.chat([{"role": "user", "content": req["prompt"]}])[0].response_text
    print(json.dumps({"answer": answer}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A finished job's results: fetched to the laptop (checksummed, resumable), or tried out on the host.

`fetch_results` brings the adapter, its config, the trainer log, the rendered config.yaml, the loss plot and
train.log into a local folder through jobs/sync (sha256 computed on the host, verified here). `try_adapter`
asks the adapter one question ON THE HOST, in its training venv, through LLaMA-Factory's own chat model
(the same template as in training): the laptop needs no GPU and no training stack.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from radeonlab.jobs.apply.sync import FetchReport, fetch_files
from radeonlab.jobs.ssh.connection import Progress, Remote

from radeonlab.contract.records import JobPaths
from radeonlab.errors import RadeonlabError

RESULT_FILES: tuple[str, ...] = (
    "output/adapter_model.safetensors",
    "output/adapter_config.json",
    "output/trainer_log.jsonl",
    "config.yaml",
    "train.log",
)
OPTIONAL_FILES: tuple[str, ...] = ("output/training_loss.png",)  # plot_loss may have been turned off
TRY: dict[str, Any] = {"max_new_tokens": 16, "timeout_s": 600}

# Runs in the host's training venv; stdin {"config", "adapter", "prompt", "max_new_tokens"}; last line JSON.
_TRY = r"""
import json, sys
import yaml
req = json.load(sys.stdin)
with open(req["config"]) as f:
    cfg = yaml.safe_load(f)
from llamafactory.chat import ChatModel
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
model = ChatModel(args)
answer = model.chat([{"role": "user", "content": req["prompt"]}])[0].response_text
print(json.dumps({"answer": answer}))
"""


def fetch_results(
    remote: Remote, paths: JobPaths, local_dir: Path, progress: Progress | None = None
) -> FetchReport:
    """Fetch the job's result files into `local_dir` (same relative layout as the job folder)."""
    present = remote.run_script(
        'cd "$1" && shift && for f; do [ -f "$f" ] && echo "$f"; done; exit 0',
        [str(paths.root), *RESULT_FILES, *OPTIONAL_FILES],
    ).stdout.split()
    missing = [f for f in RESULT_FILES if f not in present]
    if missing:
        raise RadeonlabError(
            f"{remote.target.name}: job {paths.root.name} has no {', '.join(missing)} yet "
            "(still running, or it failed: see `radeonlab status` / `radeonlab logs`)"
        )
    names = [*RESULT_FILES, *(f for f in OPTIONAL_FILES if f in present)]
    local_dir.mkdir(parents=True, exist_ok=True)
    return fetch_files(remote, str(paths.root), names, local_dir, progress)


def try_adapter(remote: Remote, paths: JobPaths, venv: str, prompt: str) -> str:
    """The adapter's answer to `prompt`, generated on the host (greedy, a few tokens)."""
    python = f"{venv.rstrip('/')}/bin/python"
    request = {
        "config": str(paths.config),
        "adapter": str(paths.output),
        "prompt": prompt,
        "max_new_tokens": TRY["max_new_tokens"],
    }
    env = {
        "HF_HOME": str(paths.root / "cache/hf"),
        "MPLCONFIGDIR": str(paths.root / "cache/mpl"),
        "HF_HUB_OFFLINE": "1",  # the base model is the job's own (local or cached): never download here
    }
    # a login shell, like the training run: profile.d sets the ROCm paths and the card's overrides
    argv = ["bash", "-lc", 'exec "$0" -c "$1"', python, _TRY]
    result = remote.run(argv, env=env, stdin_text=json.dumps(request), check=False, timeout=TRY["timeout_s"])
    lines = [ln for ln in result.stdout.strip().splitlines() if ln.startswith("{")]
    if result.exit_code != 0 or not lines:
        tail = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RadeonlabError(f"{remote.target.name}: trying the adapter failed: {tail}")
    return str(json.loads(lines[-1])["answer"])

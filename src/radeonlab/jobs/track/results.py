"""A finished job's results: fetched to the laptop (checksummed, resumable), or tried out on the host.

`fetch_results` brings the adapter, its config, the trainer log, the rendered config.yaml, the loss plot and
train.log into a local folder (jobs/ssh/transfer.py: verified as they arrive), and writes `base_model.json`
beside them: the base model and its exact revision, so an adapter can be matched to its base. `--checkpoint N`
takes a checkpoint's adapter instead, `--all` the whole output folder. `try_adapter` asks the adapter one
question ON THE HOST, in its training venv, through LLaMA-Factory's own chat model (jobs/host/tryout.py).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from radeonlab.contract.jobdir import MODEL_FILES
from radeonlab.errors import InputError, JobStateError, RadeonlabError
from radeonlab.jobs.ssh.transfer import FetchReport, Progress, fetch
from radeonlab.jobs.track import onhost
from radeonlab.jobs.track.handle import JobHandle

ADAPTER = ("adapter_model.safetensors", "adapter_config.json")
RESULT_FILES: tuple[str, ...] = (
    *(f"output/{name}" for name in ADAPTER),
    "output/trainer_log.jsonl",
    "config.yaml",
    "train.log",
)
OPTIONAL_FILES: tuple[str, ...] = ("output/training_loss.png",)  # plot_loss may have been turned off
TRY: dict[str, Any] = {"max_new_tokens": 16, "timeout_s": 600}


def wanted_files(handle: JobHandle, checkpoint: int | None) -> list[str]:
    """The files a fetch takes: the adapter (of `checkpoint`, if given), or a full fine-tune's model, logs and
    config, if present."""
    listing = (
        handle.remote.tool("housekeeping", ["checkpoints", handle.dir.root]).last_json().get("listing") or []
    )
    present = {f"output/{p}" for p in listing}
    adapter = (
        [f"output/checkpoint-{checkpoint}/{n}" for n in ADAPTER]
        if checkpoint is not None
        else [f"output/{n}" for n in ADAPTER]
    )
    missing = [f for f in adapter if f not in present]
    if missing and checkpoint is None and any(f"output/{m}" in present for m in MODEL_FILES):
        # a full or freeze fine-tune: its result is the model itself (weights, config, tokenizer), the files
        # at the top of output/ (checkpoints stay: `--all` takes them)
        folders = {p.rsplit("/", 1)[0] for p in present}
        model = sorted(p for p in present if p.count("/") == 1 and p not in folders)
        rest = [f for f in RESULT_FILES[len(ADAPTER) :] if f not in model]
        return model + rest + [f for f in OPTIONAL_FILES if f in present and f not in model]
    if missing:
        if checkpoint is not None:
            have = sorted({p.split("/")[0] for p in listing if p.startswith("checkpoint-")})
            raise RadeonlabError(
                f"{handle.id}: no checkpoint-{checkpoint} adapter (checkpoints: {', '.join(have) or 'none'})"
            )
        raise JobStateError(
            f"{handle.target.name}: job {handle.id} has no {', '.join(missing)} yet "
            f"({handle.state.summary()}: see `radeonlab status` / `radeonlab logs`)"
        )
    return adapter + list(RESULT_FILES[len(ADAPTER) :]) + [f for f in OPTIONAL_FILES if f in present]


def fetch_results(
    handle: JobHandle,
    local_dir: Path,
    progress: Progress | None = None,
    *,
    checkpoint: int | None = None,
    everything: bool = False,
) -> FetchReport:
    """Fetch the job's results into `local_dir` (the job folder's relative layout), verified. A folder that
    holds another job's results is refused before anything is fetched (base_model.json names its job)."""
    refuse_mixing(local_dir, handle.id)
    local_dir.mkdir(parents=True, exist_ok=True)
    if everything:
        names, under = ["config.yaml", "train.log"], ["output"]
    else:
        names, under = wanted_files(handle, checkpoint), None
    report = fetch(handle.remote, handle.dir.root, local_dir, names=names, under=under, progress=progress)
    model = asdict(handle.job.model) if handle.job.model else {}  # as job.json has it
    base = {**model, "job": handle.id, "checkpoint": checkpoint}
    (local_dir / "base_model.json").write_text(json.dumps(base, indent=1) + "\n")
    return report


def refuse_mixing(local_dir: Path, job_id: str) -> None:
    """Two jobs' results in one folder would replace each other's adapter: refused, with the fix."""
    try:
        other = json.loads((local_dir / "base_model.json").read_text()).get("job")
    except (OSError, ValueError, AttributeError):
        return
    if other and other != job_id:
        raise InputError(f"{local_dir} holds the results of job {other}: fetch {job_id} into another folder")


def try_adapter(
    handle: JobHandle, prompt: str, max_new_tokens: int | None = None, adapter: str | None = None
) -> str:
    """The adapter's answer to `prompt`, generated on the host (greedy, a few tokens)."""
    request = {
        "config": handle.dir.config,
        "adapter": adapter or handle.dir.output,
        "prompt": prompt,
        "max_new_tokens": max_new_tokens or TRY["max_new_tokens"],
    }
    result = onhost.run_venv_tool(handle, "tryout", request, TRY["timeout_s"])
    answer = result.last_json()
    if not result.ok or "answer" not in answer:
        raise RadeonlabError(f"{handle.target.name}: trying the adapter failed: {result.stderr_tail()}")
    return str(answer["answer"])

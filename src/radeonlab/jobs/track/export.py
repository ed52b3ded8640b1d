"""`radeonlab export JOB --merge [--quantize 4|8]`: the adapter merged into its base model, on the host, then
fetched.

`run_export` runs jobs/host/export.py by the job's training venv (`llamafactory-cli export` with the job's
base model and adapter; jobs/track/onhost.py says in which environment): the merged model is written into
the job folder under `export/<name>/` atomically (a temporary folder renamed when complete) and recorded in
job.json's `exports` list. An export that is already there is not made twice. `fetch_export` then brings
`export/<name>/` into the local results folder (jobs/ssh/transfer.py: progress, sha256 verified,
resumable).

GPTQ (`--quantize`) needs optimum and gptqmodel on the host (radeonlab pins neither for ROCm:
jobs/spec/needs.py says so, and the host is refused before anything runs) and a calibration file with a
"text" column.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from radeonlab.errors import ChecksFailedError, InputError, JobStateError, RadeonlabError
from radeonlab.jobs.spec import needs as needs_module
from radeonlab.jobs.ssh.transfer import FetchReport, LocalFile, Progress, fetch, upload_blobs
from radeonlab.jobs.track.handle import JobHandle
from radeonlab.jobs.track.onhost import model_gone, require_ended, run_venv_tool

EXPORT: dict[str, Any] = {
    "timeout_s": 6 * 3600,  # merging a 70B model on a workstation's CPU takes long; a hang must still end
    "export_size_gb": 5,  # weights shard size (LLaMA-Factory's default)
    "dir": "export",  # in the job folder (jobs/host/export.py EXPORT_DIR)
}
Say = Callable[[str], None]


def export_name(quantize: int | None) -> str:
    """The folder under export/: `merged`, or `merged-gptq4` / `merged-gptq8`."""
    return f"merged-gptq{quantize}" if quantize else "merged"


def quantize_problems(handle: JobHandle, bits: int) -> list[Any]:
    """What a GPTQ export needs that the host's venv lacks (the needs table's export_quantization_bit)."""
    return needs_module.missing(needs_module.needs({"export_quantization_bit": bits}), handle.record.packages)


def run_export(
    handle: JobHandle,
    *,
    quantize: int | None = None,
    calibration: Path | None = None,
    say: Say = print,
) -> dict[str, Any]:
    """Export the job's merged model into its folder on the host; the export's record (job.json `exports`)."""
    require_ended(handle, "export")
    if quantize:
        lacking = quantize_problems(handle, quantize)
        if lacking:
            raise ChecksFailedError(
                f"{handle.target.name} lacks what export --quantize {quantize} needs: {lacking[0].message}; "
                f"fix: {lacking[0].fix}",
                lacking,
            )
        if calibration is None:
            raise InputError("--quantize needs --calibration FILE (json/jsonl rows with a `text` column)")
    name = export_name(quantize)
    request: dict[str, Any] = {
        "job_dir": handle.dir.root,
        "venv": handle.record.venv,
        "name": name,
        "quantize": quantize,
        "export_size": EXPORT["export_size_gb"],
    }
    if quantize and calibration is not None:
        local = LocalFile.of(calibration)
        upload_blobs(handle.remote, [local], handle.record.blobs_dir)
        request["calibration"] = {
            "sha256": local.sha256,
            "name": calibration.name,
            "blobs": handle.record.blobs_dir,
        }
    say(f"{handle.id}: exporting {name} on {handle.target.name} (log: {EXPORT['dir']}/{name}.log there)")
    result = run_venv_tool(handle, "export", request, EXPORT["timeout_s"])
    answer = result.last_json()
    kind = answer.get("kind")
    if kind == "model_gone":
        raise JobStateError(model_gone(handle, answer.get("model", "?"), answer.get("revision")))
    if kind in ("refused", "busy"):
        raise JobStateError(f"{handle.id} on {handle.target.name}: {answer['error']}")
    if not result.ok or "name" not in answer:
        why = answer.get("error") or result.stderr_tail()
        raise RadeonlabError(f"{handle.target.name}: export of {handle.id} failed: {why}")
    return answer


def fetch_export(
    handle: JobHandle, name: str, local_dir: Path, progress: Progress | None = None
) -> FetchReport:
    """`export/<name>/` of the job into local_dir/export/<name>/ (verified, resumable)."""
    local_dir.mkdir(parents=True, exist_ok=True)
    return fetch(
        handle.remote, handle.dir.root, local_dir, under=[f"{EXPORT['dir']}/{name}"], progress=progress
    )

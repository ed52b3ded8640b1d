"""Export a finished job's adapter on the workstation: `llamafactory-cli export` into the job folder.

    <venv>/bin/python -m radeonlab.jobs.host.export < {"job_dir", "venv", "name", "export_size",
                                                       "quantize", "calibration": {sha256, name, blobs}}

Run by the job's TRAINING venv (it reads config.yaml with PyYAML and starts the venv's llamafactory-cli), in
a login shell so profile.d sets the card's environment, with HF_HUB_OFFLINE=1 and the host's model cache:
the base model is the job's own (its model/ folder, or the Hub model at the exact commit it trained on).

The merged model is written into `export/.tmp-<name>-<pid>/` and renamed to `export/<name>/` only when
llamafactory-cli exported every file, so a killed export leaves no half model under the name `fetch`
takes; the next export of that name removes a dead one's temporary folder. llamafactory-cli dies with this
tool (PR_SET_PDEATHSIG). Beside the weights, `radeonlab-export.json` records where they came from, and
job.json gets an entry in its `exports` list. Prints one JSON object as its last line: the export's record,
or {"error", "kind"} (kind: busy | refused | model_gone | failed). Exit 0, 3 (not started), 1 (failed).
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
from typing import Any

from radeonlab.contract.jobdir import ADAPTER_FILES, FILES, alive, job_alive, read_json, write_json_atomic

EXPORT_DIR = "export"  # in the job folder
TMP_PREFIX = ".tmp-"  # export/.tmp-<name>-<pid>: being written by process <pid>
PROVENANCE = "radeonlab-export.json"
LOG_TAIL = 5  # lines of llamafactory-cli's log in an error
EXIT = {"ok": 0, "failed": 1, "refused": 3, "busy": 3, "model_gone": 3}
# Keys of the training config the export needs as they were (LLaMA-Factory's export arguments).
MODEL_KEYS = ("model_name_or_path", "model_revision", "template", "finetuning_type", "trust_remote_code")
WEIGHT_SUFFIXES = (".safetensors", ".bin")


class ExportError(Exception):
    def __init__(self, kind: str, message: str, **detail: Any) -> None:
        super().__init__(message)
        self.kind, self.detail = kind, detail


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def temporary_dirs(export_root: str, name: str) -> list[tuple[str, int]]:
    """(path, pid) of every export of `name` begun by process <pid>: its folder and/or its config."""
    prefix = f"{TMP_PREFIX}{name}-"
    found = set()
    for entry in os.listdir(export_root) if os.path.isdir(export_root) else []:
        pid = entry.removesuffix(".yaml")[len(prefix) :]
        if entry.startswith(prefix) and pid.isdigit():
            found.add((os.path.join(export_root, f"{prefix}{pid}"), int(pid)))
    return sorted(found)


def clear_dead(export_root: str, name: str) -> list[str]:
    """Remove the temporary folders (and configs) of exports whose process is gone; raise if one runs."""
    removed = []
    for path, pid in temporary_dirs(export_root, name):
        if alive(pid) and pid != os.getpid():
            raise ExportError("busy", f"an export of {name} is running on this host (pid {pid})")
        shutil.rmtree(path, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}.yaml")
        removed.append(os.path.basename(path))
    return removed


def export_args(config: dict[str, Any], job_dir: str, export_dir: str, req: dict[str, Any]) -> dict[str, Any]:
    """llamafactory-cli export's config: the training run's model and template, its adapter, the target."""
    args = {k: config[k] for k in MODEL_KEYS if config.get(k) not in (None, "")}
    args.setdefault("finetuning_type", "lora")
    args["adapter_name_or_path"] = os.path.join(job_dir, FILES["output"])
    args["export_dir"] = export_dir
    args["export_size"] = int(req.get("export_size") or 5)  # GB per weights shard (LLaMA-Factory's default)
    args["export_device"] = req.get("device") or "cpu"
    args["export_legacy_format"] = False  # safetensors
    if req.get("quantize"):
        args["export_quantization_bit"] = int(req["quantize"])
        args["export_quantization_dataset"] = req["quantize_dataset"]
        args["export_device"] = "auto"  # GPTQ calibrates on the card
    return args


def link_calibration(export_root: str, calibration: dict[str, str]) -> str:
    """The uploaded calibration file (a blob of the content store) as export/calibration/<name>: LLaMA-Factory
    picks the loader by the file's extension."""
    name = os.path.basename(calibration["name"])
    src = os.path.join(calibration["blobs"], "sha256", calibration["sha256"])
    dest = os.path.join(export_root, "calibration", name)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    if os.path.exists(dest):
        os.unlink(dest)
    os.link(src, dest)
    return dest


def check_job(job_dir: str) -> dict[str, Any]:
    """The job's rendered config, after refusing a running job, a missing adapter or base model folder."""
    state = read_json(os.path.join(job_dir, FILES["state"]))
    if not state:
        raise ExportError("refused", f"no job folder at {job_dir}")
    if job_alive(state):
        raise ExportError("refused", f"the job is {state.get('state')}: export it when it has ended")
    output = os.path.join(job_dir, FILES["output"])
    if not any(os.path.isfile(os.path.join(output, f)) for f in ADAPTER_FILES):
        raise ExportError("refused", f"no adapter in {output} (the job ended {state.get('state')})")
    import yaml

    with open(os.path.join(job_dir, FILES["config"])) as f:
        config = yaml.safe_load(f) or {}
    model = str(config.get("model_name_or_path") or "")
    if model.startswith("/"):
        if not os.path.isfile(os.path.join(model, "config.json")):
            raise ExportError("refused", f"the job's base model folder {model} is gone from the host")
    else:
        base_in_cache(model, config.get("model_revision"))
    return config


def base_in_cache(model: str, revision: str | None) -> str:
    """The Hub model's snapshot folder in the host's cache (HF_HUB_CACHE), with its config and weights;
    ExportError `model_gone` when it is not all there (pruned, `models rm`, another cache)."""
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(  # HF_HUB_CACHE as this process has it (the host's shared cache)
            model, revision=revision, cache_dir=os.environ.get("HF_HUB_CACHE"), local_files_only=True
        )
    except Exception as exc:  # noqa: BLE001 - LocalEntryNotFoundError and its kin: not in this cache
        raise ExportError(
            "model_gone", f"not in the cache ({type(exc).__name__})", model=model, revision=revision
        ) from None
    names = os.listdir(folder)
    if "config.json" not in names or not any(n.endswith(WEIGHT_SUFFIXES) for n in names):
        raise ExportError("model_gone", "config or weights missing", model=model, revision=revision)
    return folder


def _die_with_parent() -> None:
    """In the child: SIGKILL when this tool dies (Linux prctl PR_SET_PDEATHSIG), so nothing writes on."""
    # not Linux: a killed tool may leave llamafactory-cli running; its folder stays temporary
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


def run_llamafactory(venv: str, config_path: str, log_path: str) -> int:
    cli = os.path.join(venv, "bin", "llamafactory-cli")
    if not os.path.exists(cli):  # in a container host's image (jobs/host/runtime.py): the image's own
        cli = shutil.which("llamafactory-cli") or cli
    with open(log_path, "ab") as log:
        log.write(f"--- {now()} llamafactory-cli export {config_path}\n".encode())
        log.flush()
        return subprocess.call(
            [cli, "export", config_path],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )


def folder_files(folder: str) -> dict[str, int]:
    out = {}
    for base, _, names in os.walk(folder):
        for n in names:
            path = os.path.join(base, n)
            out[os.path.relpath(path, folder)] = os.path.getsize(path)
    return out


def log_tail(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            lines = [ln.rstrip() for ln in f if ln.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-LOG_TAIL:])


def export(req: dict[str, Any], venv: str) -> dict[str, Any]:
    job_dir, name = req["job_dir"], req["name"]
    if not name or "/" in name or name.startswith("."):
        raise ExportError("refused", f"not an export name: {name!r}")
    root = os.path.join(job_dir, EXPORT_DIR)
    final = os.path.join(root, name)
    job = read_json(os.path.join(job_dir, FILES["job"]))
    done = [e for e in job.get("exports") or [] if e.get("name") == name]
    if done and os.path.isdir(final):
        return {**done[-1], "already": True}
    config = check_job(job_dir)
    os.makedirs(root, exist_ok=True)
    cleared = clear_dead(root, name)
    if os.path.isdir(final):  # exported but not recorded (killed between rename and record): redo it
        shutil.rmtree(final)
    if req.get("calibration"):
        req = {**req, "quantize_dataset": link_calibration(root, req["calibration"])}
    tmp = os.path.join(root, f"{TMP_PREFIX}{name}-{os.getpid()}")
    config_path, log_path = f"{tmp}.yaml", os.path.join(root, f"{name}.log")
    import yaml

    with open(config_path, "w") as f:
        yaml.safe_dump(export_args(config, job_dir, tmp, req), f, sort_keys=False)
    code = run_llamafactory(venv, config_path, log_path)
    os.unlink(config_path)
    files = folder_files(tmp) if os.path.isdir(tmp) else {}
    weights = [n for n in files if n.endswith(WEIGHT_SUFFIXES)]
    if code != 0 or "config.json" not in files or not weights:
        shutil.rmtree(tmp, ignore_errors=True)
        why = f"exit {code}" if code else "no weights were written"
        raise ExportError("failed", f"llamafactory-cli export failed ({why}): {log_tail(log_path)}")
    record = {
        "name": name,
        "dir": f"{EXPORT_DIR}/{name}",
        "merged": True,
        "quantize": req.get("quantize"),
        "created_at": now(),
        "base_model": job.get("model") or {"name": config.get("model_name_or_path")},
        "adapter": os.path.join(job_dir, FILES["output"]),
        "files": len(files) + 1,
        "bytes": sum(files.values()),
        "cleared": cleared,
    }
    write_json_atomic(os.path.join(tmp, PROVENANCE), {**record, "job": job.get("id")})
    os.rename(tmp, final)  # complete: only now does the name `fetch` takes exist
    job = read_json(os.path.join(job_dir, FILES["job"]))
    job["exports"] = [e for e in job.get("exports") or [] if e.get("name") != name] + [record]
    write_json_atomic(os.path.join(job_dir, FILES["job"]), job)
    return record


def main() -> int:
    req = json.load(sys.stdin)
    try:
        result = export(req, req["venv"])
    except ExportError as exc:
        print(json.dumps({"error": str(exc), "kind": exc.kind, **exc.detail}))
        return EXIT[exc.kind]
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

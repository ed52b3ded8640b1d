"""The host record (/etc/radeonlab/host.json, CONTRACTS.md) and the per-host table: pure functions."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from roles.gpu.cards import Gpu
from roles.verify.defaults import RECORD_SCHEMA

RADEONLAB_VERSION = "0.1.0"
# Fields that change between runs without anything on the host having changed: a record that differs only
# in these is current, and is not rewritten (so a no-op rerun changes nothing).
VOLATILE_TOP = ("written_at",)
VOLATILE_GPU = ("vram_used",)


def gpu_entry(gpu: Gpu) -> dict[str, Any]:
    return {
        "index": gpu.rocr_index,
        "node": gpu.node,
        "gfx": gpu.gfx,
        "name": gpu.name,
        "device_id": gpu.device_id,  # fleet and placement compare it with the live card
        "revision": gpu.revision,
        "family": gpu.family,
        "vram_total": gpu.vram_total,
        "vram_used": gpu.vram_used,
        "bf16": gpu.bf16,
        "override": gpu.override,
        "igpu": gpu.igpu,
    }


def build_record(
    *,
    host: str,
    user: str,
    home: str,
    venv: str,
    jobs_dir: str,
    cpu_only: bool,
    rocm: Mapping[str, Any],
    report: Mapping[str, Any] | None,
    llamafactory_version: str,
    gpus: Sequence[Gpu],
    written_at: str,
) -> dict[str, Any]:
    report = report or {}
    hip, cuda = report.get("hip"), report.get("cuda")
    return {
        "schema": RECORD_SCHEMA,
        "host": host,
        "written_at": written_at,
        "radeonlab_version": RADEONLAB_VERSION,
        "user": user,
        "home": home,
        "venv": venv,
        "jobs_dir": jobs_dir,
        "cpu_only": cpu_only,
        "rocm": dict(rocm),
        "torch": {
            "version": report.get("torch"),
            "hip": hip,
            "cuda_available": bool(report.get("cuda_available")),
            # A CPU build (no HIP, no CUDA): the sandbox's stand-in for the ROCm build.
            "simulated_cpu_build": bool(report.get("torch")) and hip is None and cuda is None,
        },
        "llamafactory_version": (report.get("versions") or {}).get("llamafactory") or llamafactory_version,
        "gpus": [gpu_entry(g) for g in gpus],
    }


def _stable(record: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in record.items() if k not in VOLATILE_TOP}
    out["gpus"] = [{k: v for k, v in g.items() if k not in VOLATILE_GPU} for g in record.get("gpus", [])]
    return out


def is_current(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Does the record on the host already say everything the new one says (volatile fields aside)?"""
    return old is not None and _stable(old) == _stable(new)


def dumps(record: Mapping[str, Any]) -> str:
    return json.dumps(record, indent=2, sort_keys=False) + "\n"


TABLE_COLUMNS = ("host", "GPU(s)", "gfx", "VRAM", "override", "ROCm", "torch", "HIP", "GPU check")


def table_row(record: Mapping[str, Any], report: Mapping[str, Any] | None) -> list[str]:
    """One line of the end-of-deploy table."""
    gpus = record.get("gpus") or []
    report = report or {}
    if report.get("error"):
        check = report["error"]
    elif report.get("gpu_checks") == "run":
        check = ", ".join(
            f"{d['index']}: {d.get('dtype', '?')} matmul {'ok' if d.get('matmul_ok') else 'FAILED'}"
            + (f" {d['seconds'] * 1000:.1f} ms" if d.get("seconds") is not None else "")
            for d in report.get("devices", [])
        )
    else:
        check = str(report.get("gpu_checks") or "venv missing: not checked")
    if record.get("cpu_only"):
        check = f"cpu-only host; {check}"
    return [
        str(record.get("host")),
        "; ".join(str(g["name"]) for g in gpus) or "-",
        ", ".join(str(g["gfx"]) for g in gpus) or "-",
        ", ".join(f"{(g['vram_total'] or 0) / 1024**3:.0f} GiB" for g in gpus) or "-",
        ", ".join(str(g["override"] or "-") for g in gpus) or "-",
        str(record["rocm"].get("installed") or "not installed"),
        str(record["torch"].get("version") or "-"),
        str(record["torch"].get("hip") or "-"),
        check,
    ]

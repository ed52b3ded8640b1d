"""The host record (/etc/radeonlab/host.json, CONTRACTS.md) and the per-host table: pure functions."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from radeonlab.contract.parts import RocmInfo, TorchInfo
from radeonlab.contract.records import GpuRecord, HostRecord
from radeonlab.roles.gpu.cards import Gpu

RADEONLAB_VERSION = "0.1.0"
# Fields that change between runs without anything on the host having changed: a record that differs only
# in these is current, and is not rewritten (so a no-op rerun changes nothing).
VOLATILE_TOP = ("written_at",)
VOLATILE_GPU = ("vram_used",)


# How a job's container differs from the check's (jobs run as the training user, never sudo). Podman
# (rootless): --userns=keep-id maps the user to itself inside (the job's files stay the user's);
# --group-add=keep-groups passes the user's own supplementary groups (video, render: the access role's) on to
# /dev/kfd and /dev/dri, where a named --group-add would be a group of the user namespace that owns no device.
# Podman refuses keep-groups beside another --group-add (podman-run(1)), so AMD's named ones are left out.
# Docker: a named --group-add is looked up in the image's /etc/group, whose render group need not have the
# host's number, so the named ones are left out too; jobs/host/runtime.py adds --user and the user's groups
# by number when it starts the container.
ROOTLESS_OPTIONS = {"podman": ("--userns=keep-id", "--group-add=keep-groups"), "docker": ()}


def job_container_command(run_options: Sequence[str], engine: str = "podman") -> list[str]:
    """The host record's container_command: the training user's engine with AMD's run options as it takes
    them for a job. ["--device=/dev/kfd", "--group-add=video"] -> [podman, run, --device=/dev/kfd,
    --userns=keep-id, --group-add=keep-groups]; Docker: [docker, run, --device=/dev/kfd]."""
    kept = [str(o) for o in run_options if not str(o).startswith("--group-add")]
    return [engine, "run", *kept, *ROOTLESS_OPTIONS[engine]]


# <venv>/bin/python on a container host: the laptop runs the venv tools (chat, export, models, fetch --try)
# by that path on every host; here it starts them in the image (jobs/host/runtime.py exec), on the system
# python3 with radeonlab's host code, which the tool's wrapper puts on PYTHONPATH.
PYTHON_SHIM = """#!/bin/sh
# Written by radeonlab (roles/verify): this host's training stack is in its container image, not a venv.
# radeonlab's host tools run by this path start in the image (radeonlab.jobs.host.runtime).
exec python3 -m radeonlab.jobs.host.runtime exec -- python "$@"
"""


def gpu_entry(gpu: Gpu) -> dict[str, Any]:
    """One GPU of the host record (contract GpuRecord)."""
    return asdict(
        GpuRecord(
            index=gpu.rocr_index,
            node=gpu.node,
            gfx=gpu.gfx,
            name=gpu.name,
            device_id=gpu.device_id,  # fleet and placement compare it with the live card
            revision=gpu.revision,
            family=gpu.family,
            vram_total=gpu.vram_total,
            vram_used=gpu.vram_used,
            gtt_total=gpu.gtt_total,
            # What estimates and placement use: VRAM, or carve-out + GTT on an APU (roles/gpu/cards.py).
            usable_memory=gpu.usable_memory if gpu.usable_memory is not None else gpu.vram_total,
            bf16=gpu.bf16,
            override=gpu.override,
            igpu=gpu.igpu,
        )
    )


def stack_problem(
    report: Mapping[str, Any] | None,
    gpus: Sequence[Gpu],
    cpu_only: bool,
    allow_cpu: bool,
    device_targets: Sequence[str] = (),
) -> str | None:
    """Why the training stack cannot use this host's GPUs (one line with the fix), or None when it can."""
    if cpu_only or not gpus:
        return None
    if report is None:
        return "the venv's python is missing: the python_stack role did not run"
    if report.get("error"):
        return f"{report['error']} (re-run deploy/setup.py; the python_stack role installs torch)"
    if missing := missing_device_packages(report, device_targets):
        return (
            f"{', '.join(missing)} not installed: AMD's torch {installed_torch(report)} has no kernels for "
            "that GPU without it (torch[device-<gfx>] installs it; re-run deploy/setup.py)"
        )
    if report.get("cpu_build"):
        if allow_cpu:
            return None
        return (
            f"torch {report.get('torch')} is a CPU build: it cannot use the AMD GPU(s); install the ROCm "
            "wheel (check pytorch_source / pytorch_index_url), or set python_stack_allow_cpu_torch: true "
            "for a host that should train on its CPU"
        )
    if not report.get("cuda_available"):
        return (
            f"ROCm torch {report.get('torch')} sees no GPU: check that the training user is in the video "
            "and render groups (log in again after the access role added them), /dev/kfd, and "
            "HSA_OVERRIDE_GFX_VERSION in /etc/profile.d/radeonlab-gpu.sh"
        )
    failed = [d for d in report.get("devices") or [] if not d.get("matmul_ok")]
    if failed:
        d = failed[0]
        return f"GPU {d.get('index')} matmul failed: {d.get('error') or 'non-finite result'}"
    return None


def installed_torch(report: Mapping[str, Any]) -> str:
    """torch's installed distribution version (what pip installed), else torch.__version__."""
    return str((report.get("versions") or {}).get("torch") or report.get("torch") or "")


def missing_device_packages(report: Mapping[str, Any], targets: Sequence[str]) -> list[str]:
    """AMD's multi-arch torch (`+rocm<V>`) keeps each target's kernels in amd-torch-device-<gfx>, pulled by
    torch[device-<gfx>] (amdworld/python-packages.yaml [RELEASES]): the ones the report's venv lacks. AMD's
    build is told by the installed distribution's version (what pip installed), before torch.__version__."""
    if "+rocm" not in installed_torch(report):
        return []
    packages = {str(n).lower().replace("_", "-") for n in report.get("packages") or {}}
    return [f"amd-torch-device-{t}" for t in sorted(set(targets)) if f"amd-torch-device-{t}" not in packages]


def build_record(
    *,
    host: str,
    user: str,
    home: str,
    venv: str,
    jobs_dir: str,
    cpu_only: bool,
    model_cache: str = "",
    rocm: Mapping[str, Any],
    report: Mapping[str, Any] | None,
    llamafactory_version: str,
    gpus: Sequence[Gpu],
    written_at: str,
    allow_cpu: bool = False,
    problem: str | None = None,
    systemd: bool = False,
    torch_source: str = "",
    runtime: str = "venv",
    image: str = "",
    image_digest: str = "",
    base_image: str = "",
    base_image_digest: str = "",
    container_command: Sequence[str] = (),
    container_problem: str | None = None,
) -> dict[str, Any]:
    """The host record (contract HostRecord) as JSON-ready data; `problem` set means: not usable, and why."""
    report = report or {}
    record = HostRecord(
        host=host,
        user=user,
        venv=venv,
        jobs_dir=jobs_dir,
        written_at=written_at,
        radeonlab_version=RADEONLAB_VERSION,
        home=home,
        cpu_only=cpu_only,
        rocm=RocmInfo.from_dict(rocm),
        torch=TorchInfo(
            version=report.get("torch"),
            hip=report.get("hip"),
            cuda_available=bool(report.get("cuda_available")),
            cpu_build=bool(report.get("cpu_build")),
            cpu_allowed=allow_cpu,
            source=torch_source,  # "amd" (AMD's multi-arch wheels) | "pytorch" (PyTorch's own ROCm wheels)
        ),
        llamafactory_version=(report.get("versions") or {}).get("llamafactory") or llamafactory_version,
        gpus=[GpuRecord(**gpu_entry(g)) for g in gpus],
        packages=dict(report.get("packages") or {}),
        model_cache=model_cache,
        systemd=systemd,
        problem=problem,
        runtime=runtime,
        image=image,
        image_digest=image_digest,
        base_image=base_image,
        base_image_digest=base_image_digest,
        container_command=list(container_command),
        container_problem=container_problem,
    )
    return record.to_dict()


@dataclass(frozen=True)
class RecordContext:
    """What the host record says besides the stack check's report: the verify operation's inputs. One
    record_for() turns it and a report into the record, for the role and for the bench's Ansible anchor
    (tests/bench/ansible), so the two cannot drift apart."""

    host: str
    user: str
    home: str
    venv: str
    jobs_dir: str
    model_cache: str
    cpu_only: bool
    rocm: Mapping[str, Any]  # stream, version, installed
    llamafactory_version: str
    gpus: Sequence[Gpu]  # judged for the torch build (gpu_env.plan.for_torch)
    allow_cpu: bool = False
    systemd: bool = False
    torch_source: str = ""
    device_targets: Sequence[str] = ()  # the training GPUs' targets (AMD's torch: a device package each)
    runtime: str = "venv"  # or "container": the stack check ran in `image` (its digest: image_digest)
    image: str = ""
    image_digest: str = ""
    base_image: str = ""  # AMD's image the derived `image` was built from (roles/container derived.py)
    base_image_digest: str = ""
    container_command: Sequence[str] = ()  # the engine and its run options: how jobs start the image
    container_problem: str | None = None  # why the training user's engine cannot start it


def record_for(ctx: RecordContext, report: Mapping[str, Any] | None, written_at: str) -> dict[str, Any]:
    """The host record for this context and stack check report, with `problem` when the host is unusable."""
    return build_record(
        host=ctx.host,
        user=ctx.user,
        home=ctx.home,
        venv=ctx.venv,
        jobs_dir=ctx.jobs_dir,
        model_cache=ctx.model_cache,
        cpu_only=ctx.cpu_only,
        rocm=ctx.rocm,
        report=report,
        llamafactory_version=ctx.llamafactory_version,
        gpus=ctx.gpus,
        written_at=written_at,
        allow_cpu=ctx.allow_cpu,
        problem=stack_problem(report, ctx.gpus, ctx.cpu_only, ctx.allow_cpu, ctx.device_targets),
        systemd=ctx.systemd,
        torch_source=ctx.torch_source,
        runtime=ctx.runtime,
        image=ctx.image,
        image_digest=ctx.image_digest,
        base_image=ctx.base_image,
        base_image_digest=ctx.base_image_digest,
        container_command=list(ctx.container_command),
        container_problem=ctx.container_problem,
    )


def saved_check_will_do(
    ctx: RecordContext, old: Mapping[str, Any] | None, saved: Mapping[str, Any] | None
) -> bool:
    """Can the run skip the stack check? Yes when a saved report with unchanged inputs exists and the record
    on the host already says what it would say, without a problem (a problem is always re-checked)."""
    if saved is None or (old or {}).get("problem"):
        return False
    return is_current(old, record_for(ctx, saved, ""))


def _stable(record: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in record.items() if k not in VOLATILE_TOP}
    out["gpus"] = [{k: v for k, v in g.items() if k not in VOLATILE_GPU} for g in record.get("gpus", [])]
    return out


def is_current(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Does the record on the host already say everything the new one says (volatile fields aside)?"""
    return old is not None and _stable(old) == _stable(new)


def check_inputs(fingerprint: Sequence[str], script: str, matmul_size: int, gpus: Sequence[Gpu]) -> str:
    """Digest of everything the stack check's result depends on: the host's fingerprint lines
    (StackCheckState), the check script and its matrix size, and the GPUs (volatile fields aside).
    Equal digests: the same result."""
    stable_gpus = [{k: v for k, v in gpu_entry(g).items() if k not in VOLATILE_GPU} for g in gpus]
    inputs = {"host": list(fingerprint), "script": script, "matmul_size": matmul_size, "gpus": stable_gpus}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def reusable_report(saved: Mapping[str, Any] | None, inputs: str) -> Mapping[str, Any] | None:
    """The saved check's report when it was made with these very inputs and found no error, else None."""
    if not saved or saved.get("inputs") != inputs:
        return None
    report = saved.get("report")
    return report if report and not report.get("error") else None


def dumps(record: Mapping[str, Any]) -> str:
    return json.dumps(record, indent=2, sort_keys=False) + "\n"


TABLE_COLUMNS = ("host", "GPU(s)", "gfx", "VRAM", "override", "ROCm", "torch", "HIP", "GPU check")


def table_row(
    record: Mapping[str, Any], report: Mapping[str, Any] | None, checked_at: str | None = None
) -> list[str]:
    """One line of the end-of-deploy table. `checked_at`: the report is an earlier run's (not re-run: its
    inputs are unchanged), and the row says so and when it was observed."""
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
    if checked_at:
        check = f"not re-run, inputs unchanged; at {checked_at}: {check}"
    if record.get("cpu_only"):
        check = f"cpu-only host; {check}"
    elif (record.get("torch") or {}).get("cpu_build") and (record.get("torch") or {}).get("cpu_allowed"):
        check = f"CPU torch allowed by python_stack_allow_cpu_torch; {check}"
    if record.get("problem"):
        check = f"FAILED: {record['problem']}"
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


def usable_memory(gpu_entry: Mapping[str, Any]) -> int | None:
    """What a host record's GPU can hold for training: `usable_memory` (VRAM, or an APU's carve-out + GTT),
    else `vram_total` (records written before the field existed). For the estimate and placement."""
    value = gpu_entry.get("usable_memory")
    return int(value) if value is not None else gpu_entry.get("vram_total")

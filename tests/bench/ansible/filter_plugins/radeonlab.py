"""Jinja filters for the Ansible anchor playbook (tests/bench/ansible/site.yml), run on the controller.

They call radeonlab's own pure functions (the card tables, the gpu_env rules, the host record), the way an
Ansible user would put card knowledge into a filter or module plugin rather than into Jinja. The anchor then
measures the provisioning engine (Ansible vs pyinfra) doing the same work, not two versions of the card
knowledge, and the playbook's results cannot drift from deploy/setup.py's without tests/test_ansible_anchor.py
seeing it. The shell commands that read the host are the roles' fact commands, so both engines read the same.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from radeonlab.roles.access.check import access_problems
from radeonlab.roles.access.facts import DeviceNodes
from radeonlab.roles.gpu import sysfs
from radeonlab.roles.gpu_env.plan import as_gpus, for_rocm, gpu_env
from radeonlab.roles.rocm import repos
from radeonlab.roles.verify import record as rec
from radeonlab.roles.verify.facts import CHECK_SCRIPT, StackCheckState


def _plain(value: Any) -> Any:
    """Ansible 2.19 hands filters tagged str/dict/list subclasses: plain JSON types for radeonlab's code."""
    return json.loads(json.dumps(value))


def radeonlab_gpus(dump_lines: Sequence[str], rocm_version: str) -> list[dict[str, Any]]:
    """The GPU role's sysfs dump (roles/gpu/sysfs.py dump_command's output) -> the RadeonGpus fact's value."""
    return [g.to_dict() for g in sysfs.parse_dump(list(dump_lines), str(rocm_version))]


def radeonlab_gpu_env(gpus: Sequence[Mapping[str, Any]], rocm_version: str, min_vram: int) -> dict[str, Any]:
    """What roles/gpu_env writes to the profile.d file: comments, exports, and how many GPUs can train."""
    env = gpu_env(as_gpus(_plain(gpus)), str(rocm_version), int(min_vram))
    return {"comments": env.comments, "exports": env.exports, "training": len(env.training)}


def radeonlab_rocm_packages(settings: Mapping[str, Any], gfx_targets: Sequence[str | None]) -> list[str]:
    """The ROCm packages for the stream (the Core SDK picks one meta package per GPU family present)."""
    data = _plain(settings)
    if data["rocm_stream"] == "coresdk":
        return repos.coresdk_packages(data, list(gfx_targets))
    return repos.legacy_packages(data)


def radeonlab_device_nodes_command(patterns: Sequence[str]) -> str:
    return DeviceNodes().command(list(patterns))


def radeonlab_access_problems(
    lines: Sequence[str], user: str, groups: Sequence[str], expected: Sequence[str]
) -> list[str]:
    """The access role's check: which device nodes the user cannot open, with the groups it will have."""
    return access_problems(DeviceNodes().process(list(lines)), str(user), set(groups), list(expected))


def radeonlab_stack_state_command(venv: str, saved_path: str, user: str, devices: Sequence[str]) -> str:
    """The verify role's StackCheckState command: what the stack check depends on, and the saved check."""
    return StackCheckState().command(str(venv), str(saved_path), str(user), list(devices))


def _record(ctx: Mapping[str, Any], report: Mapping[str, Any] | None, now: str) -> dict[str, Any]:
    rocm_version = str(ctx["rocm_version"])
    return rec.build_record(
        host=ctx["host"],
        user=ctx["user"],
        home=ctx["home"],
        venv=ctx["venv"],
        jobs_dir=ctx["jobs_dir"],
        cpu_only=bool(ctx["cpu_only"]),
        rocm={"stream": ctx["rocm_stream"], "version": rocm_version, "installed": ctx["rocm_installed"]},
        report=report,
        llamafactory_version=str(ctx["llamafactory_version"]),
        gpus=[for_rocm(g, rocm_version) for g in as_gpus(ctx["gpus"])],
        written_at=now,
    )


def _old_record(text: str | None) -> dict[str, Any] | None:
    try:
        return json.loads(text) if text and text.strip() else None
    except json.JSONDecodeError:
        return None  # a damaged record is rewritten


def radeonlab_verify_plan(state_lines: Sequence[str], ctx: Mapping[str, Any]) -> dict[str, Any]:
    """Does the stack check have to run? No when the saved check was made with the same inputs and the
    record on the host already says what it would say (roles/verify/operations.py host_record)."""
    ctx = _plain(ctx)
    state = StackCheckState().process(list(state_lines))
    gpus = [for_rocm(g, str(ctx["rocm_version"])) for g in as_gpus(ctx["gpus"])]
    inputs = rec.check_inputs(state["fingerprint"], CHECK_SCRIPT, int(ctx["matmul_size"]), gpus)
    saved = rec.reusable_report(state["saved"], inputs)
    current = saved is not None and rec.is_current(_old_record(ctx["old_record"]), _record(ctx, saved, ""))
    return {"inputs": inputs, "needs_check": not current}


def radeonlab_host_record(report_lines: Sequence[str], ctx: Mapping[str, Any], inputs: str) -> dict[str, Any]:
    """The record text to write (the old one when only volatile fields would change) and the saved check
    line (None when the check failed: a failed check is not reused)."""
    ctx = _plain(ctx)
    lines = [line for line in report_lines if line.startswith("{")]
    report = json.loads(lines[-1]) if lines else None
    now = datetime.now(UTC).isoformat(timespec="seconds")
    new = _record(ctx, report, now)
    old = _old_record(ctx["old_record"])
    text = rec.dumps(old if old is not None and rec.is_current(old, new) else new)
    check = None
    if report is not None and not report.get("error"):
        check = json.dumps({"inputs": inputs, "checked_at": now, "report": report}, sort_keys=True) + "\n"
    return {"text": text, "check_state": check}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "radeonlab_gpus": radeonlab_gpus,
            "radeonlab_gpu_env": radeonlab_gpu_env,
            "radeonlab_rocm_packages": radeonlab_rocm_packages,
            "radeonlab_device_nodes_command": radeonlab_device_nodes_command,
            "radeonlab_access_problems": radeonlab_access_problems,
            "radeonlab_stack_state_command": radeonlab_stack_state_command,
            "radeonlab_verify_plan": radeonlab_verify_plan,
            "radeonlab_host_record": radeonlab_host_record,
        }

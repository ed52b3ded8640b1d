"""Jinja filters for the Ansible anchor playbook (tests/bench/ansible/site.yml), run on the controller.

They call radeonlab's own pure functions (the card tables, the gpu_env rules, the host record), the way an
Ansible user would put card knowledge into a filter or module plugin rather than into Jinja. The anchor then
measures the provisioning engine (Ansible vs pyinfra) doing the same work, not two versions of the card
knowledge, and the playbook's results cannot drift from deploy/setup.py's without
tests/e2e/test_ansible_anchor.py
seeing it. The shell commands that read the host are the roles' fact commands, so both engines read the same.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from radeonlab.deploy.stack import torch_build
from radeonlab.roles.access.check import access_problems
from radeonlab.roles.access.facts import DeviceNodes
from radeonlab.roles.gpu import sysfs
from radeonlab.roles.gpu.defaults import DEFAULTS as GPU_DEFAULTS
from radeonlab.roles.gpu_env.plan import TorchBuild, as_gpus, for_torch, gpu_env, training_targets
from radeonlab.roles.python_stack import plan as stack_plan
from radeonlab.roles.rocm import repos
from radeonlab.roles.verify import record as rec
from radeonlab.roles.verify.facts import CHECK_SCRIPT, StackCheckState


def _plain(value: Any) -> Any:
    """Ansible 2.19 hands filters tagged str/dict/list subclasses: plain JSON types for radeonlab's code."""
    return json.loads(json.dumps(value))


def _build(settings: Mapping[str, Any]) -> TorchBuild:
    """The host's torch build, as deploy/setup.py gives the roles (deploy/stack.py torch_build)."""
    return torch_build(lambda key, default: settings.get(key, default))


def _memory_floors(settings: Mapping[str, Any]) -> tuple[int, int]:
    vram = settings.get("gpu_min_vram_bytes", GPU_DEFAULTS["gpu_min_vram_bytes"])
    unified = settings.get("gpu_min_unified_memory_bytes", GPU_DEFAULTS["gpu_min_unified_memory_bytes"])
    return int(vram), int(unified)


def radeonlab_gpus(dump_lines: Sequence[str], rocm_version: str) -> list[dict[str, Any]]:
    """The GPU role's sysfs dump (roles/gpu/sysfs.py dump_command's output) -> the RadeonGpus fact's value."""
    return [g.to_dict() for g in sysfs.parse_dump(list(dump_lines), str(rocm_version))]


def radeonlab_training_targets(gpus: Sequence[Mapping[str, Any]], settings: Mapping[str, Any]) -> list[str]:
    """The exact gfx targets of the GPUs the host trains on (deploy/setup.py's `targets`): what ROCm's
    packages and AMD's torch device extras are chosen for."""
    data = _plain(settings)
    return training_targets(as_gpus(_plain(gpus)), _build(data), *_memory_floors(data))


def radeonlab_gpu_env(gpus: Sequence[Mapping[str, Any]], settings: Mapping[str, Any]) -> dict[str, Any]:
    """What roles/gpu_env writes to the profile.d file: notes, comments, exports, how many GPUs can train."""
    data = _plain(settings)
    build = _build(data)
    aotriton = bool(data["gpu_env_aotriton_experimental"])
    env = gpu_env(as_gpus(_plain(gpus)), build, *_memory_floors(data), aotriton)
    return {
        "notes": env.notes,
        "comments": env.comments,
        "exports": env.exports,
        "training": len(env.training),
        "torch": build.label,
    }


def radeonlab_rocm_packages(settings: Mapping[str, Any], gfx_targets: Sequence[str | None]) -> list[str]:
    """The ROCm packages for the stream (the Core SDK picks one meta package per training GPU target)."""
    data = _plain(settings)
    if data["rocm_stream"] == "coresdk":
        return repos.coresdk_packages(data, list(gfx_targets))
    return repos.legacy_packages(data)


def radeonlab_pip_steps(settings: Mapping[str, Any], gfx_targets: Sequence[str]) -> list[dict[str, Any]]:
    """The stack in three pip installs, as an Ansible playbook would write them (the product installs the
    same pins from its hash lock in one): torch as the python_stack role asks for it for these training
    targets (AMD's wheels: a device extra each) from the torch index, the requirements, then llamafactory
    without its dependencies. Ansible's pip module itself skips a step whose packages are installed."""
    data = _plain(settings)
    rocm = str(data["rocm_version"])
    request = stack_plan.torch_request(data, rocm, sorted({t for t in gfx_targets if t}))
    torch_args = ["--index-url", stack_plan.torch_index_url(data, rocm)]
    for link in data["pytorch_find_links"]:
        torch_args += ["--find-links", str(link)]
    index = stack_plan.index_url_args(str(data["python_stack_index_url"]))
    return [
        {"packages": request.requirements, "pip_args": torch_args},
        {"packages": list(data["python_stack_requirements"]), "pip_args": index},
        {"packages": [f"llamafactory=={data['llamafactory_version']}"], "pip_args": ["--no-deps", *index]},
    ]


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


def _context(ctx: Mapping[str, Any]) -> rec.RecordContext:
    """The verify role's RecordContext from the playbook's record_context (roles/verify/__init__.py's
    verify_host computes the same from host data and facts)."""
    data = ctx["settings"]
    build = _build(data)
    return rec.RecordContext(
        host=ctx["host"],
        user=ctx["user"],
        home=ctx["home"],
        venv=ctx["venv"],
        jobs_dir=ctx["jobs_dir"],
        model_cache=ctx["model_cache"],
        cpu_only=False,  # gpu_cpu_only hosts are not covered by the anchor
        rocm={
            "stream": data["rocm_stream"],
            "version": str(data["rocm_version"]),
            "installed": ctx["rocm_installed"] or None,
        },
        llamafactory_version=str(data["llamafactory_version"]),
        gpus=[for_torch(g, build) for g in as_gpus(ctx["gpus"])],
        allow_cpu=bool(data["python_stack_allow_cpu_torch"]),
        systemd=bool(ctx["systemd"]),
        torch_source=build.source,
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
    context = _context(ctx)
    state = StackCheckState().process(list(state_lines))
    inputs = rec.check_inputs(
        state["fingerprint"], CHECK_SCRIPT, int(ctx["settings"]["verify_matmul_size"]), context.gpus
    )
    saved = None if ctx["settings"]["verify_recheck"] else rec.reusable_report(state["saved"], inputs)
    reuse = rec.saved_check_will_do(context, _old_record(ctx["old_record"]), saved)
    return {"inputs": inputs, "needs_check": not reuse}


def radeonlab_host_record(report_lines: Sequence[str], ctx: Mapping[str, Any], inputs: str) -> dict[str, Any]:
    """The record text to write (the old one when only volatile fields would change), the saved check
    line (None when the check failed: a failed check is not reused), and the record's problem (the role
    fails the host when there is one)."""
    ctx = _plain(ctx)
    lines = [line for line in report_lines if line.startswith("{")]
    report = json.loads(lines[-1]) if lines else None
    now = datetime.now(UTC).isoformat(timespec="seconds")
    new = rec.record_for(_context(ctx), report, now)
    old = _old_record(ctx["old_record"])
    text = rec.dumps(old if old is not None and rec.is_current(old, new) else new)
    check = None
    if report is not None and not report.get("error"):
        check = json.dumps({"inputs": inputs, "checked_at": now, "report": report}, sort_keys=True) + "\n"
    return {"text": text, "check_state": check, "problem": new.get("problem")}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "radeonlab_gpus": radeonlab_gpus,
            "radeonlab_training_targets": radeonlab_training_targets,
            "radeonlab_gpu_env": radeonlab_gpu_env,
            "radeonlab_rocm_packages": radeonlab_rocm_packages,
            "radeonlab_pip_steps": radeonlab_pip_steps,
            "radeonlab_device_nodes_command": radeonlab_device_nodes_command,
            "radeonlab_access_problems": radeonlab_access_problems,
            "radeonlab_stack_state_command": radeonlab_stack_state_command,
            "radeonlab_verify_plan": radeonlab_verify_plan,
            "radeonlab_host_record": radeonlab_host_record,
        }

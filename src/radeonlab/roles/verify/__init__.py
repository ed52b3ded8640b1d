"""Verify a provisioned host (GPUs, ROCm, torch, a small matmul) and write its host record."""

from __future__ import annotations

from typing import Any

from pyinfra import host, state
from pyinfra.api import deploy

from radeonlab.roles.access import granted_devices
from radeonlab.roles.gpu_env.plan import for_torch
from radeonlab.roles.privilege import as_root
from radeonlab.roles.python_stack import stack_paths
from radeonlab.roles.rocm import repos
from radeonlab.roles.rocm import settings as rocm_settings
from radeonlab.roles.stack import StackChoice
from radeonlab.roles.verify import table
from radeonlab.roles.verify.defaults import DEFAULTS
from radeonlab.roles.verify.operations import host_record


def record_path(data: Any) -> str:
    """Where a host's record is (verify_record_path of its data, `host.data` or another host's): Slurm's
    configuration reads every node's."""
    return str(data.get("verify_record_path", DEFAULTS["verify_record_path"]))


@deploy("Verify the host and write its record", data_defaults=DEFAULTS)
def verify_host(
    stack: StackChoice,
    cpu_only: bool = False,
    recheck: bool | None = None,
    image: str = "",
    container: str = "",
) -> None:
    """Check the stack on the host and write its record (recheck: run the check even when nothing it
    depends on changed; default: the `verify_recheck` data). `stack`: the host's stack choice
    (deploy/stack.py): its GPUs, torch build, and the training GPUs' targets, whose device packages AMD's
    torch needs (amd-torch-device-<gfx>; none when provisioned without the GPU). On a container host:
    `container`, the `podman run ... IMAGE` prefix (roles/container plan.run_prefix) the check runs in, and
    `image`, its name; the image brings its own torch (no device packages, no wheel source)."""
    device_targets = stack.targets
    paths = stack_paths()
    build = stack.torch
    op = host_record(
        name="Write the host record",
        path=host.data.get("verify_record_path"),
        user=paths.user,
        home=paths.home,
        venv=paths.venv,
        jobs_dir=paths.jobs_dir,
        model_cache=paths.model_cache,
        cpu_only=cpu_only,
        rocm_stream=stack.rocm_stream,
        rocm_version=stack.rocm_version,
        rocm_version_file=repos.version_file(rocm_settings()),  # the rocm role's own keys
        llamafactory_version=stack.llamafactory_version,
        gpus=[for_torch(g, build) for g in stack.gpus],
        torch_source="" if container else build.source,
        # AMD's wheels keep each target's kernels in a device package; download.pytorch.org's carry them
        device_targets=list(device_targets) if build.source == "amd" and not container else [],
        check_path=host.data.get("verify_check_state_path"),
        # The devices the check's GPU access depends on: the ones the access role grants.
        devices=granted_devices(),
        matmul_size=int(host.data.get("verify_matmul_size")),
        recheck=bool(host.data.get("verify_recheck")) if recheck is None else recheck,
        allow_cpu_torch=bool(host.data.get("python_stack_allow_cpu_torch", False)),
        image=image,
        container=container,
        **as_root(),
    )
    if host.data.get("verify_print_table"):
        table.register(state, op._hash)

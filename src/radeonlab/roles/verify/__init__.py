"""Verify a provisioned host (GPUs, ROCm, torch, a small matmul) and write its host record."""

from __future__ import annotations

from collections.abc import Sequence

from pyinfra import host, state
from pyinfra.api import deploy

from radeonlab.roles.access.defaults import DEFAULTS as ACCESS_DEFAULTS
from radeonlab.roles.gpu.cards import Gpu
from radeonlab.roles.gpu_env.plan import for_torch, torch_build
from radeonlab.roles.privilege import as_root
from radeonlab.roles.python_stack import stack_paths
from radeonlab.roles.python_stack.defaults import DEFAULTS as PYTHON_STACK_DEFAULTS
from radeonlab.roles.rocm import repos
from radeonlab.roles.rocm.defaults import DEFAULTS as ROCM_DEFAULTS
from radeonlab.roles.verify import table
from radeonlab.roles.verify.defaults import DEFAULTS
from radeonlab.roles.verify.operations import host_record


@deploy("Verify the host and write its record", data_defaults=DEFAULTS)
def verify_host(
    gpus: Sequence[Gpu],
    cpu_only: bool = False,
    recheck: bool | None = None,
    device_targets: Sequence[str] = (),
) -> None:
    """Check the stack on the host and write its record (recheck: run the check even when nothing it
    depends on changed; default: the `verify_recheck` data). `device_targets`: the training GPUs' targets,
    whose device packages AMD's torch needs (amd-torch-device-<gfx>)."""
    paths = stack_paths()
    rocm_version = str(host.data.get("rocm_version", ROCM_DEFAULTS["rocm_version"]))
    rocm = {key: host.data.get(key, default) for key, default in ROCM_DEFAULTS.items()}
    build = torch_build(host.data.get, ROCM_DEFAULTS, PYTHON_STACK_DEFAULTS)
    op = host_record(
        name="Write the host record",
        path=host.data.get("verify_record_path"),
        user=paths.user,
        home=paths.home,
        venv=paths.venv,
        jobs_dir=paths.jobs_dir,
        model_cache=paths.model_cache,
        cpu_only=cpu_only,
        rocm_stream=str(host.data.get("rocm_stream", ROCM_DEFAULTS["rocm_stream"])),
        rocm_version=rocm_version,
        rocm_version_file=repos.version_file(rocm),
        llamafactory_version=str(
            host.data.get("llamafactory_version", PYTHON_STACK_DEFAULTS["llamafactory_version"])
        ),
        gpus=[for_torch(g, build) for g in gpus],
        torch_source=build.source,
        # AMD's wheels keep each target's kernels in a device package; download.pytorch.org's carry them
        device_targets=list(device_targets) if build.source == "amd" else [],
        check_path=host.data.get("verify_check_state_path"),
        # The devices the check's GPU access depends on: the ones the access role grants.
        devices=list(host.data.get("access_devices", ACCESS_DEFAULTS["access_devices"])),
        matmul_size=int(host.data.get("verify_matmul_size")),
        recheck=bool(host.data.get("verify_recheck")) if recheck is None else recheck,
        allow_cpu_torch=bool(host.data.get("python_stack_allow_cpu_torch", False)),
        **as_root(),
    )
    if host.data.get("verify_print_table"):
        table.register(state, op._hash)

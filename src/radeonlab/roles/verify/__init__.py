"""Verify a provisioned host (GPUs, ROCm, torch, a small matmul) and write its host record."""

from __future__ import annotations

from collections.abc import Sequence
from io import StringIO
from pathlib import PurePosixPath
from typing import Any

from pyinfra import host, state
from pyinfra.api import deploy
from pyinfra.operations import apt, files, server

from radeonlab.contract.jobdir import blobs_dir
from radeonlab.roles.access import granted_devices
from radeonlab.roles.container.engines import ENGINE_TABLE, PODMAN
from radeonlab.roles.gpu_env.plan import for_torch
from radeonlab.roles.privilege import as_root
from radeonlab.roles.python_stack import DIRECTORY_MODES, StackPaths, stack_paths
from radeonlab.roles.rocm import repos
from radeonlab.roles.rocm import settings as rocm_settings
from radeonlab.roles.stack import StackChoice
from radeonlab.roles.verify import record as rec
from radeonlab.roles.verify import table
from radeonlab.roles.verify.defaults import DEFAULTS
from radeonlab.roles.verify.operations import host_record, user_image


def record_path(data: Any) -> str:
    """Where a host's record is (verify_record_path of its data, `host.data` or another host's): Slurm's
    configuration reads every node's."""
    return str(data.get("verify_record_path", DEFAULTS["verify_record_path"]))


def container_jobs(paths: StackPaths, image: str, engine: str = PODMAN) -> None:
    """What jobs in the image need on a container host (no python_stack role there): the training user's
    way to the image (Podman: a copy in the user's own rootless store; Docker: the docker group, to the one
    daemon store), the folders the venv role makes (the jobs and the model cache, mounted into each job's
    container) and the python shim by which the laptop's venv tools start in the image."""
    row = ENGINE_TABLE[engine]
    if row.per_user_store:
        apt.packages(  # newuidmap/newgidmap: rootless Podman maps the user's subordinate ids (/etc/subuid)
            name="Install uidmap for the training user's rootless Podman",
            packages=["uidmap"],
            cache_time=24 * 3600,
            **as_root(),
        )
        user_image(
            name=f"Give {paths.user} the image {image} (its own rootless image store)",
            image=image,
            user=paths.user,
            **as_root(),
        )
    if row.user_group:
        # Docker's documentation: the docker group grants root-level privileges on the host (docs/guide/
        # runtimes.md says so); the training user needs it to start job containers without sudo.
        server.user(
            name=f"Add {paths.user} to {row.user_group} (the {engine} daemon's socket: root-equivalent)",
            user=paths.user,
            groups=[row.user_group],
            append=True,
            **as_root(),
        )
    bin_dir = f"{paths.venv}/bin"
    for path, mode in (
        (str(PurePosixPath(paths.venv).parent), DIRECTORY_MODES["venv_parent"]),
        (paths.jobs_dir, DIRECTORY_MODES["jobs_dir"]),
        (paths.model_cache, DIRECTORY_MODES["jobs_dir"]),
        (blobs_dir(paths.jobs_dir), DIRECTORY_MODES["blobs"]),
        (f"{blobs_dir(paths.jobs_dir)}/sha256", DIRECTORY_MODES["blobs"]),
        (paths.venv, "755"),
        (bin_dir, "755"),
    ):
        files.directory(
            name=f"Create {path}", path=path, user=paths.user, group=paths.group, mode=mode, **as_root()
        )
    files.put(
        name=f"{bin_dir}/python: the venv tools start in the image",
        src=StringIO(rec.PYTHON_SHIM),
        dest=f"{bin_dir}/python",
        user=paths.user,
        group=paths.group,
        mode="755",
        **as_root(),
    )


@deploy("Verify the host and write its record", data_defaults=DEFAULTS)
def verify_host(
    stack: StackChoice,
    cpu_only: bool = False,
    recheck: bool | None = None,
    image: str = "",
    container: str = "",
    run_options: Sequence[str] = (),
    engine: str = PODMAN,
) -> None:
    """Check the stack on the host and write its record (recheck: run the check even when nothing it
    depends on changed; default: the `verify_recheck` data). `stack`: the host's stack choice
    (deploy/stack.py): its GPUs, torch build, and the training GPUs' targets, whose device packages AMD's
    torch needs (amd-torch-device-<gfx>; none when provisioned without the GPU). On a container host:
    `container`, the `podman run ... IMAGE` prefix (roles/container plan.run_prefix) the check runs in, and
    `image`, its name; the image brings its own torch (no device packages, no wheel source);
    `run_options`, AMD's options, which the host record's container_command turns into the training user's
    (record.job_container_command); `engine`, the container engine (roles/container engines.py)."""
    device_targets = stack.targets
    paths = stack_paths()
    build = stack.torch
    if container:
        container_jobs(paths, image, engine)
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
        container_command=rec.job_container_command(run_options, engine) if container else [],
        engine=engine,
        **as_root(),
    )
    if host.data.get("verify_print_table"):
        table.register(state, op._hash)

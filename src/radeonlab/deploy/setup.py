"""Provision Radeon workstations for LoRA fine-tuning: `pyinfra -y inventories/home.py deploy/setup.py`.

Reads top to bottom: find the GPUs once, then ROCm, the GPU environment, device access, the Python training
stack, a verification that writes the host record (/etc/radeonlab/host.json) the job runner reads, and, in
an inventory with the groups slurm_controller / slurm_nodes, Slurm (roles/slurm). A host with
`radeonlab_runtime: container` gets Podman, AMD's ROCm PyTorch image and a training image built on it with
the lab's hash-locked stack (roles/container) instead of the venv, and its verification runs inside that
image (issue 29: docs/design/containers-sandbox.md).
"""

from pathlib import Path
from typing import Any

from pyinfra import host, logger
from pyinfra.api.exceptions import DeployError
from pyinfra.operations import python

from radeonlab.deploy.meeting import meet
from radeonlab.deploy.stack import choose_stack
from radeonlab.roles.access import grant_gpu_access
from radeonlab.roles.container import (
    LabLock,
    build_training_image,
    choose_engine,
    derived_current,
    install_container_runtime,
)
from radeonlab.roles.container.defaults import DEFAULTS as CONTAINER_DEFAULTS
from radeonlab.roles.container.defaults import RUNTIME_DEFAULT, RUNTIMES
from radeonlab.roles.container.engines import ENGINE_TABLE
from radeonlab.roles.container.images import default_image
from radeonlab.roles.container.pins import pins_path
from radeonlab.roles.container.plan import run_prefix
from radeonlab.roles.gpu.defaults import DEFAULTS as GPU_DEFAULTS
from radeonlab.roles.gpu.facts import AmdPciGpus
from radeonlab.roles.gpu_env import configure_gpu_env
from radeonlab.roles.python_stack import install_python_stack, lock_file, lock_inputs
from radeonlab.roles.rocm import install_rocm
from radeonlab.roles.rocm.driver import install_kernel_driver
from radeonlab.roles.slurm import install_slurm_packages, is_controller_only, setup_slurm
from radeonlab.roles.stack import StackChoice
from radeonlab.roles.verify import verify_host
from radeonlab.roles.wheel_cache import setup_wheel_cache


def provision(after_reboot: bool = False) -> None:
    """Provision the current host (pyinfra runs it once per host of the inventory); `after_reboot`: the pass
    run after the kernel driver's reboot."""
    # The runtime: venv (the default) or container (roles/container).
    runtime = host.data.get("radeonlab_runtime", RUNTIME_DEFAULT)
    if runtime not in RUNTIMES:
        raise DeployError(f"{host.name}: radeonlab_runtime is {runtime!r}; one of {', '.join(RUNTIMES)}")
    # 1. The stack choice, once: the GPUs (KFD topology + DRM sysfs) judged for the ROCm release being
    # installed, the torch build, and the exact targets of the GPUs this host trains on (by usable memory,
    # for that torch build: one ROCm package and one AMD device extra each). Every role below gets it.
    stack = choose_stack(host)
    gpus = stack.gpus
    cpu_only = bool(host.data.get("gpu_cpu_only", False))
    # A Slurm controller that runs no jobs (in slurm_controller, not in slurm_nodes) needs no GPU stack.
    slurm_controller_only = is_controller_only()
    if not gpus and not cpu_only and not slurm_controller_only:
        # Not driven yet is not absent: a card on the PCI bus gets AMD's kernel and driver and a reboot, then
        # this function runs again (the second pass finds it through KFD).
        sysfs_root = host.data.get("gpu_sysfs_root", GPU_DEFAULTS["gpu_sysfs_root"])
        on_pci = host.get_fact(AmdPciGpus, sysfs_root=sysfs_root) if not after_reboot else []
        if not on_pci:
            where = "after the kernel driver and reboot" if after_reboot else "none on the PCI bus either"
            raise DeployError(
                f"{host.name}: no AMD GPU found (no GPU node in /sys/class/kfd, {where}): is the amdgpu "
                "driver loaded? Set gpu_cpu_only: true to provision it without the GPU steps"
            )
        install_kernel_driver(on_pci)
        python.call(name="Provision after the reboot (second pass)", function=provision, after_reboot=True)
        return

    # Slurm's packages (in a Slurm lab) before the stack check below, which watches the dpkg database.
    install_slurm_packages()

    if slurm_controller_only:
        host.noop("Slurm controller only: no ROCm, GPU environment, Python stack or host record")
    else:
        # 2. ROCm and the GPU environment: only where GPU work will run.
        if cpu_only:
            stack = stack.without_gpu()
            host.noop("gpu_cpu_only: skipping ROCm, the GPU environment and the device check")
        else:
            install_rocm(stack=stack)
            configure_gpu_env(stack=stack)

        # 3. The training user: GPU groups (device check only with a GPU), the Python stack (through the lab's
        # wheel cache when the inventory names one: its host downloads and serves before any host installs),
        # the record.
        grant_gpu_access(check_devices=not cpu_only)
        if runtime == "venv":
            # pyinfra's @deploy types a role's result as OperationMeta; its wrapper returns the function's
            # value
            sources: dict[str, Any] = setup_wheel_cache(  # type: ignore[assignment]  # pyinfra's typing (above)
                stack=stack, stack_of=choose_stack
            )
            lock = lock_file(stack, sources)
            if lock.exists():
                logger.info(f"{host.name}: installs the Python stack from the hash lock {lock}")
            else:
                logger.info(f"{host.name}: no hash lock for its Python stack yet: this deploy writes {lock}")
            install_python_stack(stack=stack, sources=sources)
        else:
            image, lab_lock = container_inputs(stack)
            # the engine, once: container_engine, else the host's (Podman, or Docker where the host has it)
            engine = choose_engine(str(host.data.get("container_engine") or ""))
            install_container_runtime(
                image=image, pins_file=str(pins_path(Path(lab_lock.lock_dir))), engine=engine
            )
        # Every host of the run passes here together (deploy/meeting.py): in a run with both runtimes, a venv
        # host has written the lab's hash lock (above) before a container host builds its image from it.
        meet(name="The lab's hash locks are written", why="a container host builds its image from one next")
        if runtime == "venv":
            verify_host(stack=stack, cpu_only=cpu_only)
        else:
            # AMD's image brings ROCm's user space and torch; the training image adds the rest of the lab's
            # hash-locked stack, and verify runs its stack check inside it, with the options AMD documents
            # for ROCm containers; jobs run in it the same way (jobs/host/runtime.py).
            build_training_image(image=image, lab_lock=lab_lock, engine=engine)
            train = derived_current(host.data.get)
            options = host.data.get("container_run_options", CONTAINER_DEFAULTS["container_run_options"])
            verify_host(
                stack=stack,
                cpu_only=cpu_only,
                image=train,
                container=run_prefix(train, options, ENGINE_TABLE[engine]),
                run_options=options,  # jobs start the image with them too (the host record)
                engine=engine,
            )
            return  # Slurm on a container host is not done yet (docs/design/containers-sandbox.md)

    # 4. Slurm, after every record is written (slurm.conf is made from them); nothing without its groups.
    setup_slurm(stack=stack)


def container_inputs(stack: StackChoice) -> tuple[str, LabLock]:
    """A container host's base image (container_image, else AMD's image of the stack: images.py) and the
    lab's hash lock its training image installs (as roles/python_stack chooses a venv's)."""
    try:
        image = str(host.data.get("container_image") or "") or default_image(
            stack.rocm_version, stack.torch.torch_version
        )
    except ValueError as e:
        raise DeployError(f"{host.name}: {e}") from None
    inputs = lock_inputs(stack)
    lab_lock = LabLock(
        inputs["data"], inputs["rocm_version"], inputs["cwd"], inputs["extras"],
        inputs["index_args"], inputs["indexes"], inputs["lock_dir"],
    )  # fmt: skip
    return image, lab_lock

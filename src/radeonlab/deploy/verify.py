"""Re-check provisioned workstations and refresh their host records: `pyinfra -y INVENTORY deploy/verify.py`.

Changes nothing but /etc/radeonlab/host.json (and only when what it says changed) and the saved stack check;
prints the per-host table; in a Slurm lab it re-checks the munge key, the user's uid and the nodes'
registration on the controller. Unlike deploy/setup.py, it always runs the stack check (a torch import and a
matmul per GPU), even when nothing the check depends on changed.
"""

from pyinfra import host

from radeonlab.deploy.targets import host_training_targets
from radeonlab.roles.gpu.defaults import DEFAULTS as GPU_DEFAULTS
from radeonlab.roles.gpu.facts import RadeonGpus
from radeonlab.roles.gpu_env.plan import as_gpus
from radeonlab.roles.rocm.defaults import DEFAULTS as ROCM_DEFAULTS
from radeonlab.roles.slurm import check_slurm, is_controller_only
from radeonlab.roles.verify import verify_host


def reverify() -> None:
    """Re-check the current host and refresh its record."""
    gpus = as_gpus(
        host.get_fact(
            RadeonGpus,
            sysfs_root=host.data.get("gpu_sysfs_root", GPU_DEFAULTS["gpu_sysfs_root"]),
            rocm_version=str(host.data.get("rocm_version", ROCM_DEFAULTS["rocm_version"])),
        )
    )
    cpu_only = bool(host.data.get("gpu_cpu_only", False))
    # the training GPUs' targets, as deploy/setup.py computes them: AMD's torch needs their device packages
    targets = [] if cpu_only else host_training_targets(gpus)
    if not is_controller_only():
        verify_host(gpus=gpus, cpu_only=cpu_only, recheck=True, device_targets=targets)
    # In a Slurm lab, on the controller: one munge key everywhere, one uid for the user, every node known.
    check_slurm()

"""Re-check provisioned workstations and refresh their host records: `pyinfra -y INVENTORY deploy/verify.py`.

Changes nothing but /etc/radeonlab/host.json (and only when what it says changed) and the saved stack check;
prints the per-host table; in a Slurm lab it re-checks the munge key, the user's uid and the nodes'
registration on the controller. Unlike deploy/setup.py, it always runs the stack check (a torch import and a
matmul per GPU), even when nothing the check depends on changed.
"""

from pyinfra import host

from radeonlab.deploy.stack import choose_stack
from radeonlab.roles.slurm import check_slurm, is_controller_only
from radeonlab.roles.verify import verify_host


def reverify() -> None:
    """Re-check the current host and refresh its record."""
    cpu_only = bool(host.data.get("gpu_cpu_only", False))
    # the stack choice as deploy/setup.py makes it: AMD's torch needs the training GPUs' device packages
    stack = choose_stack(host)
    if not is_controller_only():
        verify_host(stack=stack.without_gpu() if cpu_only else stack, cpu_only=cpu_only, recheck=True)
    # In a Slurm lab, on the controller: one munge key everywhere, one uid for the user, every node known.
    check_slurm()

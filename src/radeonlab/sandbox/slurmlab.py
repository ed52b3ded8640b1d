"""SIMULATED: the inventory data that lets sandbox hosts form a Slurm lab (roles/slurm), kept here, not in
the role: every value below is an ordinary setting a real lab could set too, chosen for hosts that share one
machine's network namespace and kernel.

- Ports: every sandbox host listens on the same interfaces, so slurmctld and each slurmd get their own free
  port (a real lab uses 6817/6818 on every machine). Nodes are still reached at their own loopback address
  (NodeAddr = the host's ssh_hostname, 127.0.77.N), as on a LAN.
- No cgroups: the hosts see no cgroup filesystem of their own (and must not touch the machine's), so jobs
  are tracked by process tree (proctrack/linuxproc) and not contained (task/none): a job could open a GPU
  it was not given. Slurm 22.05's slurmd initialises its cgroup plugin even when nothing uses it, and with
  CgroupPlugin=autodetect it refuses to start without a cgroup mount; cgroup/v1 is loaded without one.
- The munge key file lives in the sandbox's state dir, not in the user's home.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# SIMULATED: no cgroups in the hosts (see the module docstring).
NO_CGROUPS = {
    "slurm_proctrack_type": "proctrack/linuxproc",
    "slurm_task_plugin": "task/none",
    "slurm_cgroup_plugin": "cgroup/v1",
    "slurm_cgroup_constrain": False,
}


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports free on every address right now (the kernel's choice of ephemeral ports)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            s = stack.enter_context(socket.socket())
            s.bind(("", 0))
            ports.append(s.getsockname()[1])
        return ports


def lab_data(
    state_dir: Path, controller: str, nodes: Iterable[str], **settings: Any
) -> dict[str, dict[str, Any]]:
    """Host data (name -> data) for a Slurm lab of sandbox hosts: the groups, the ports, no cgroups, the key
    file. `settings` are added for every host (e.g. slurm_slurmd_timeout)."""
    nodes = list(nodes)
    ctl_port, *node_ports = free_ports(1 + len(nodes))
    common = {
        **NO_CGROUPS,
        "slurm_controller_port": ctl_port,
        "slurm_slurmd_port": node_ports[0],
        "slurm_munge_key_file": str(state_dir / "slurm" / "munge.key"),
        **settings,
    }
    data: dict[str, dict[str, Any]] = {
        name: {**common, "sandbox_groups": ["slurm_nodes"], "slurm_node_port": port}
        for name, port in zip(nodes, node_ports, strict=True)
    }
    entry = data.setdefault(controller, {**common, "sandbox_groups": []})
    entry["sandbox_groups"] = [*entry["sandbox_groups"], "slurm_controller"]
    return data

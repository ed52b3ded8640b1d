"""The slurm role's settings (role-prefixed data keys): the one place they are set.

Sources, checked against the packages this role installs (Debian 12 "bookworm": slurm-wlm 22.05.8-4+deb12u3,
munge 0.5.15-2+deb12u1) and their man pages (slurm.conf(5), gres.conf(5), cgroup.conf(5) of 22.05):
- ports 6817/6818 are Slurm's built-in SlurmctldPort/SlurmdPort defaults (slurm.conf(5));
- the munge key: munge 0.5.15's `mungekey` writes 1024 bits (128 bytes) by default; munged accepts 32..1024
  bytes; the Debian package generates a random key per host at install, so two hosts never match until one
  key is distributed (seen on the sandbox hosts: each install wrote a different /etc/munge/munge.key);
- Debian's slurm-wlm packages create the `slurm` user with the fixed uid/gid 64030 (the same on every host),
  and ship systemd units slurmctld.service, slurmd.service, munge.service.
"""

from __future__ import annotations

from typing import Any

DEFAULTS: dict[str, Any] = {
    # --- which hosts (inventory groups) ---
    # The host that runs slurmctld (exactly one). No such group in the inventory: the role does nothing.
    "slurm_controller_group": "slurm_controller",
    # The hosts that run slurmd (the workstations Slurm places jobs on). The controller may be one of them.
    "slurm_nodes_group": "slurm_nodes",
    # --- per host (host data) ---
    # Slurm's NodeName for this host; empty: its inventory name (slurmd is started with -N <name>, so the
    # machine's own hostname does not have to match).
    "slurm_node_name": "",
    # The address the controller and the other nodes reach this host at (NodeAddr / SlurmctldHost's
    # address). Empty: radeonlab_node_address, else ssh_hostname, else the inventory name.
    "slurm_address": "",
    # This node's own slurmd port (NodeName ... Port=); 0: every slurmd listens on slurm_slurmd_port.
    # Only for hosts that share one network namespace (the SIMULATED lab); slurm.conf(5) advises against it
    # on real machines.
    "slurm_node_port": 0,
    # --- the cluster (set once, e.g. for the group "all"; every Slurm host must see the same values) ---
    "slurm_cluster_name": "radeonlab",
    "slurm_partition": "gpu",
    "slurm_controller_port": 6817,
    "slurm_slurmd_port": 6818,
    # Seconds without an answer from a slurmd before slurmctld marks the node DOWN (Slurm's default: 300).
    "slurm_slurmd_timeout": 300,
    # Process tracking and task containment. cgroups are what a real lab wants: jobs see only the GPUs they
    # were given (ConstrainDevices) and every process of a cancelled job is found. NOT VERIFIED here (no real
    # host with systemd and cgroup v2 was available); the SIMULATED lab sets proctrack/linuxproc + task/none.
    "slurm_proctrack_type": "proctrack/cgroup",
    "slurm_task_plugin": "task/cgroup,task/affinity",
    "slurm_cgroup_plugin": "autodetect",  # cgroup.conf CgroupPlugin
    "slurm_cgroup_constrain": True,  # cgroup.conf ConstrainCores/ConstrainDevices/ConstrainRAMSpace
    # CR_Core: cores and GPUs are what jobs consume; memory is not tracked (as the built-in queue).
    # CR_Core_Memory needs a DefMemPerGPU/DefMemPerCPU (slurm_extra_config) or a job takes the whole node.
    "slurm_select_type_parameters": "CR_Core",
    # Finished jobs, one line each, world-readable on the controller (jobcomp/filetxt: no database needed).
    "slurm_jobcomp_log": "/var/log/slurm/jobcomp.log",
    # Seconds slurmctld keeps a finished job (`squeue -t all`, `scontrol show job`); Slurm's default is 300.
    "slurm_min_job_age": 86400,
    # Accounting (per-user usage, `sacct`, fair share) needs slurmdbd and a database, which this role does
    # not set up (docs/guide/slurm.md, fair share). Empty: no accounting; else the host running slurmdbd.
    "slurm_accounting_host": "",
    "slurm_accounting_port": 6819,  # slurmdbd's DbdPort default
    # Extra slurm.conf lines, verbatim, in this order (e.g. "PriorityType=priority/multifactor").
    "slurm_extra_config": [],
    # --- munge ---
    # The lab's one munge key, on the machine that runs pyinfra: generated there on first use (128 random
    # bytes, mode 0600), then copied to every Slurm host (/etc/munge/munge.key, munge:munge 0400).
    # Keep it secret and back it up: whoever holds it can act as any user towards Slurm.
    "slurm_munge_key_file": "~/.config/radeonlab/slurm/munge.key",
    # --- packages (Debian's archive; Ubuntu ships the same names) ---
    "slurm_controller_packages": ["slurmctld", "slurm-client", "munge"],
    "slurm_node_packages": ["slurmd", "slurm-client", "munge"],
    # --- daemons where systemd is not the init (containers, the SIMULATED hosts) ---
    # Seconds a daemon started by the role may take to answer (munged's socket, slurmctld's port).
    "slurm_start_timeout": 20,
    # Seconds the deploy's check waits for every node to register with slurmctld.
    "slurm_register_timeout": 60,
}

"""Slurm for the lab: munge with one key, slurmctld on the controller, slurmd on every workstation, slurm.conf
from the inventory and the host records, gres.conf from radeonlab's own GPU detection (see README.md).

An inventory without the groups `slurm_controller` / `slurm_nodes` is not touched: `setup_slurm` does
nothing there.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from pyinfra import host, inventory
from pyinfra.api import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.deb import DebPackages
from pyinfra.operations import apt, files, server, systemd

from radeonlab.roles.gpu_env import profile_path
from radeonlab.roles.privilege import as_root
from radeonlab.roles.slurm import daemons, plan
from radeonlab.roles.slurm.defaults import DEFAULTS
from radeonlab.roles.slurm.facts import SlurmDaemons
from radeonlab.roles.slurm.operations import action_of, detached_daemon, slurm_check, slurm_config
from radeonlab.roles.stack import StackChoice

TEMPLATES = Path(__file__).parent / "templates"
JINJA = {"trim_blocks": True, "lstrip_blocks": True}


def settings() -> dict[str, Any]:
    return {key: host.data.get(key, default) for key, default in DEFAULTS.items()}


def slurm_lab() -> plan.Lab | None:
    """The inventory's Slurm lab (None: it has no Slurm groups); a one-line DeployError when it is wrong."""
    groups = {name: [h.name for h in members] for name, members in inventory.groups.items()}
    try:
        return plan.lab_of(groups, settings())
    except plan.SlurmPlanError as e:
        raise DeployError(f"{host.name}: Slurm: {e}") from None


def is_controller_only() -> bool:
    """This host runs slurmctld and no jobs: deploy/setup.py gives it no GPU stack."""
    lab = slurm_lab()
    return lab is not None and lab.controller_only(host.name)


@deploy("Install Slurm", data_defaults=DEFAULTS)
def install_slurm_packages() -> None:
    """This host's Slurm and munge packages, from the distribution's archive (nothing without the Slurm
    groups). deploy/setup.py runs it before the verify role: the stack check watches the dpkg database, and a
    package installed after it would make the next run check again."""
    data = settings()
    lab = slurm_lab()
    if lab is None or host.name not in lab.hosts():
        return
    wanted = [*data["slurm_node_packages"]] if host.name in lab.nodes else []
    wanted += data["slurm_controller_packages"] if host.name == lab.controller else []
    installed = host.get_fact(DebPackages)
    missing = [p for p in dict.fromkeys(wanted) if p not in installed]
    if missing:
        apt.packages(name="Install Slurm and munge", packages=missing, update=True, **as_root())


@deploy("Set up Slurm", data_defaults=DEFAULTS)
def setup_slurm(stack: StackChoice) -> None:
    """Install and configure this host's part of the lab's Slurm (nothing without the Slurm groups);
    `stack`: the host's stack choice (deploy/stack.py), whose training GPUs the node hands out."""
    data = settings()
    lab = slurm_lab()
    if lab is None:
        return  # no Slurm groups in the inventory: nothing to do, nothing to say
    if host.name not in lab.hosts():
        host.noop("not in the Slurm groups: no Slurm here")
        return
    is_controller, is_node = host.name == lab.controller, host.name in lab.nodes
    try:
        name = plan.node_name(host.name, host.data)
        key = plan.load_or_create_key(str(data["slurm_munge_key_file"]))
        chosen = _training_gpus(stack) if is_node else []
        gres = plan.gres_lines(name, chosen)
    except plan.SlurmPlanError as e:
        raise DeployError(f"{host.name}: Slurm: {e}") from None
    pidfiles = {d.name: d.pidfile for d in daemons.DAEMONS.values()}
    use_systemd = bool(host.get_fact(SlurmDaemons, pidfiles=pidfiles)["systemd"])
    timeout = float(data["slurm_start_timeout"])

    # 1. The packages: install_slurm_packages(), earlier in the deploy.
    # 2. munge: the lab's one key (a package install generated a different one on each host).
    key_op = files.put(
        name="Install the lab's munge key",
        src=io.BytesIO(key),
        dest=plan.PATHS["munge_key"],
        user="munge",
        group="munge",
        mode="400",
        **as_root(),
    )
    _run("munged", use_systemd, timeout, restart_if=key_op.did_change)

    # 3. Folders and the node's own files.
    if is_controller:
        files.directory(
            name="Create slurmctld's state folder",
            path=plan.PATHS["state_save"],
            user="slurm",
            group="slurm",
            mode="700",
            **as_root(),
        )
        # There from the start (slurmctld writes it when the first job ends): the runner reads it as a user.
        files.file(
            name="Create the job completion log",
            path=str(data["slurm_jobcomp_log"]),
            user="slurm",
            group="slurm",
            mode="644",
            **as_root(),
        )
    files.template(
        name="Write cgroup.conf",
        src=str(TEMPLATES / "cgroup.conf.j2"),
        dest=plan.PATHS["cgroup_conf"],
        user="root",
        group="root",
        mode="644",
        jinja_env_kwargs=JINJA,
        cgroup_plugin=data["slurm_cgroup_plugin"],
        constrain=bool(data["slurm_cgroup_constrain"]),
        **as_root(),
    )
    node_files = _node_files(name, gres, plan.rocr_map(chosen)) if is_node else None

    # 4. slurm.conf, the same on every host, from every node's host record (written earlier in this run).
    slurm_config(
        name="Write slurm.conf from the inventory and the host records", lab=lab, data=data, **as_root()
    )
    action = action_of(host.name)

    # 5. The daemons: a node or port change restarts them, any other change is a reconfigure (running jobs
    # go on either way: their slurmstepd processes are not restarted).
    if is_controller:
        _run("slurmctld", use_systemd, timeout, restart_if=lambda: action() == "restart")
        server.shell(
            name="Reconfigure Slurm (scontrol reconfigure)",
            commands=["scontrol reconfigure"],
            _if=lambda: action() == "reconfigure",
            **as_root(),
        )
    if node_files is not None:
        restart = node_files.options_changed
        _run("slurmd", use_systemd, timeout, restart_if=lambda: action() == "restart" or restart())
        server.shell(
            name="Reconfigure Slurm for this node's new gres.conf",
            commands=["scontrol reconfigure"],
            _if=lambda: action() == "none" and node_files.gres_changed() and not restart(),
            **as_root(),
        )

    # 6. The check, on the controller: one munge key, one uid, every node registered.
    if is_controller:
        check_slurm_lab(lab, data)


def check_slurm_lab(lab: plan.Lab, data: dict[str, Any]) -> None:
    slurm_check(
        name="Check the Slurm lab (munge key, user ids, nodes registered)",
        lab=lab,
        register_timeout=int(data["slurm_register_timeout"]),
        **as_root(),
    )


@deploy("Check Slurm", data_defaults=DEFAULTS)
def check_slurm() -> None:
    """The deploy's verification alone (deploy/verify.py): runs on the controller, changes nothing."""
    lab = slurm_lab()
    if lab is not None and host.name == lab.controller:
        check_slurm_lab(lab, settings())


class NodeFiles(NamedTuple):
    gres_changed: Callable[[], bool]
    options_changed: Callable[[], bool]  # slurmd's command line: it must restart


def _training_gpus(stack: StackChoice) -> list[Mapping[str, Any]]:
    return plan.training_gpus([g.to_dict() for g in stack.gpus], stack.rocm_version, stack.min_vram)


def _node_files(name: str, gres: list[str], rocr_map: list[int]) -> NodeFiles:
    """gres.conf, the task prolog and slurmd's options (its node name)."""
    files.directory(
        name="Create slurmd's spool folder",
        path=plan.PATHS["slurmd_spool"],
        user="root",
        group="root",
        mode="755",
        **as_root(),
    )
    gres_op = files.template(
        name="Write gres.conf from radeonlab's GPU detection",
        src=str(TEMPLATES / "gres.conf.j2"),
        dest=plan.PATHS["gres_conf"],
        user="root",
        group="root",
        mode="644",
        jinja_env_kwargs=JINJA,
        node_name=name,
        comments=[] if gres else ["no GPU to hand out on this node"],
        lines=gres,
        **as_root(),
    )
    files.template(
        name="Write the task prolog (the node's GPU environment for every job)",
        src=str(TEMPLATES / "task-prolog.sh.j2"),
        dest=plan.PATHS["task_prolog"],
        user="root",
        group="root",
        mode="755",
        jinja_env_kwargs=JINJA,
        node_name=name,
        profile=profile_path(),
        rocr_map=rocr_map,
        **as_root(),
    )
    options = files.line(
        name="Give slurmd its node name",
        path=plan.PATHS["slurmd_defaults"],
        line="^SLURMD_OPTIONS=.*",
        replace=f'SLURMD_OPTIONS="-N {name}"',
        **as_root(),
    )
    return NodeFiles(gres_op.did_change, options.did_change)


def _run(name: str, use_systemd: bool, timeout: float, restart_if: Callable[[], bool]) -> None:
    """Keep daemon `name` running (a systemd unit, or detached where systemd is not the init)."""
    daemon = daemons.DAEMONS[name]
    if not use_systemd:
        detached_daemon(
            name=f"Run {name}", daemon=daemon, timeout=timeout, restart_if=restart_if, **as_root()
        )
        return
    systemd.service(name=f"Run {daemon.unit}", service=daemon.unit, running=True, enabled=True, **as_root())
    systemd.service(
        name=f"Restart {daemon.unit}", service=daemon.unit, restarted=True, _if=restart_if, **as_root()
    )

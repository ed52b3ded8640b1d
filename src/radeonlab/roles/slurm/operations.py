"""The slurm role's own operations: the ones that need other hosts' facts, read when they execute.

pyinfra runs each operation on every host before the next one, so by the time `slurm_config` runs, every
node's host record has been written by roles/verify in this same run, and by the time `slurm_check` runs on
the controller, every node runs munged and slurmd.
"""

from __future__ import annotations

import io
import shlex
from collections.abc import Callable, Mapping
from typing import Any

from gevent.lock import BoundedSemaphore
from pyinfra import host, inventory, state
from pyinfra.api import operation
from pyinfra.facts.files import FileContents
from pyinfra.facts.server import Hostname
from pyinfra.operations import files

from radeonlab.roles.gpu import min_vram_bytes
from radeonlab.roles.slurm import checks, daemons, plan
from radeonlab.roles.slurm.facts import (
    MungeCredential,
    MungeDecode,
    SlurmDaemons,
    SlurmNodeInfo,
    SlurmNodeStates,
    UserId,
)
from radeonlab.roles.verify import record_path

# Per run (keyed by the pyinfra state): each node's record + `slurmd -C`, read once for all hosts, and what
# each host's slurm.conf change needs ("none" | "reconfigure" | "restart"), read by later operations' _if.
_NODE_INFO: dict[tuple[int, str], dict[str, Any]] = {}
_NODE_INFO_LOCK = BoundedSemaphore()
ACTIONS: dict[tuple[int, str], str] = {}


def action_of(name: str) -> Callable[[], str]:
    """A callable for `_if=`: what host `name`'s slurm.conf change needs, once slurm_config has run."""
    return lambda: ACTIONS.get((id(state), name), "none")


def _node_info(name: str) -> dict[str, Any]:
    """A node's SlurmNodeInfo, read once per run while executing (never cached from a dry look ahead)."""
    key = (id(state), name)
    with _NODE_INFO_LOCK:
        if key in _NODE_INFO:
            return _NODE_INFO[key]
        node = inventory.get_host(name)
        info = node.get_fact(SlurmNodeInfo, record_path=record_path(node.data))
        if state.is_executing:
            _NODE_INFO[key] = info
        return info


def render_slurm_conf(lab: plan.Lab, data: Mapping[str, Any]) -> str:
    """slurm.conf for the whole lab, from every node's host record and `slurmd -C`."""
    specs = []
    for inv_name in lab.nodes:
        node = inventory.get_host(inv_name)
        info = _node_info(inv_name)
        if not info.get("slurmd_c"):
            raise plan.SlurmPlanError(f"{inv_name}: `slurmd -C` gave nothing (is slurmd installed there?)")
        min_vram = min_vram_bytes(node.data)
        name = plan.node_name(inv_name, node.data)
        specs.append(
            plan.node_spec(name, node.data, info.get("record"), info["slurmd_c"], min_vram, inv_name)
        )
    controller = inventory.get_host(lab.controller)
    hostname = controller.get_fact(Hostname) or lab.controller
    return plan.slurm_conf(data, hostname, plan.address(lab.controller, controller.data), specs)


def _fail(lines: list[str]):
    """Fail this host's operation with these lines on stderr (pyinfra prints them)."""
    yield f"echo {shlex.quote(chr(10).join(lines))} >&2; exit 1"


@operation()
def slurm_config(lab: plan.Lab, data: Mapping[str, Any], path: str = plan.PATHS["slurm_conf"]):
    """
    Write slurm.conf (root:root 0644), the same text on every Slurm host, and remember whether the change
    needs a restart or a reconfigure (``action_of``).

    .. code:: python

        slurm_config(name="Write slurm.conf", lab=plan.Lab("ctl", ("ws1", "ws2")), data=settings())
    """
    try:
        text = render_slurm_conf(lab, data)
    except plan.SlurmPlanError as e:
        yield from _fail([f"Slurm: {e}"])
        return
    lines = host.get_fact(FileContents, path=path)
    old = None if lines is None else "\n".join(lines) + "\n"
    # A comment-only change is written but needs no daemon told (change_action says "none").
    ACTIONS[(id(state), host.name)] = plan.change_action(old, text)
    if old == text:
        host.noop(f"{path} is current")
        return
    yield from files.put._inner(src=io.StringIO(text), dest=path, user="root", group="root", mode="644")


@operation()
def detached_daemon(daemon: daemons.Daemon, timeout: float, restart_if: Callable[[], bool] = lambda: False):
    """
    Keep a daemon running where systemd is not the init: start it when its pid file names no live process,
    restart it when ``restart_if()`` says so (evaluated when the operation runs).

    .. code:: python

        detached_daemon(name="Run slurmd", daemon=daemons.DAEMONS["slurmd"], timeout=20)
    """
    running = host.get_fact(SlurmDaemons, pidfiles={daemon.name: daemon.pidfile}).get(daemon.name)
    restart = state.is_executing and bool(restart_if())
    if running and not restart:
        host.noop(f"{daemon.name} runs (pid {running})")
        return
    yield daemons.daemon_script(daemon, timeout, stop_first=bool(running))


def _training_user(name: str) -> str:
    data = inventory.get_host(name).data
    return str(data.get("python_stack_user") or data.get("ssh_user") or "")


@operation()
def slurm_check(lab: plan.Lab, register_timeout: int):
    """
    On the controller: every node's munge credential decodes here (one key), the training user has one uid
    on every Slurm host, and every node has registered with slurmctld. Changes nothing; fails with one
    line per problem.

    .. code:: python

        slurm_check(name="Check the Slurm lab", lab=plan.Lab("ctl", ("ws1",)), register_timeout=60)
    """
    if not state.is_executing:
        return  # credentials are made for the real check, not for a dry look ahead
    problems = []
    for name in lab.nodes:
        if name == lab.controller:
            continue
        credential = inventory.get_host(name).get_fact(MungeCredential)
        if credential is None:
            problems.append(f"munged does not answer on {name} (munge -n failed)")
            continue
        decoded = host.get_fact(MungeDecode, credential=credential)
        problem = checks.munge_problem(name, lab.controller, decoded)
        if problem:
            problems.append(problem)
    user = _training_user(lab.controller)
    if user:
        uids = {name: inventory.get_host(name).get_fact(UserId, user=user) for name in lab.hosts()}
        problems += checks.uid_problems(user, uids)
    if not problems:  # a node with another key cannot register either: that line would only repeat
        names = [plan.node_name(n, inventory.get_host(n).data) for n in lab.nodes]
        states = host.get_fact(SlurmNodeStates, timeout=register_timeout)
        problems += checks.registration_problems(names, states)
    if problems:
        yield from _fail([f"Slurm: {p}" for p in problems])
        return
    host.noop(f"Slurm: {len(lab.nodes)} node(s) registered, one munge key, one uid for {user or 'the user'}")

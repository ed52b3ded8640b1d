"""Give the training user the GPU device groups and check that it can open the device nodes."""

from __future__ import annotations

import shlex

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.files import Directory, File
from pyinfra.operations import python, server

from radeonlab.roles.access.check import LINGER_DIR, access_problems, linger_command, relogin_note
from radeonlab.roles.access.defaults import DEFAULTS
from radeonlab.roles.access.facts import DeviceNodes, UserProcessCount
from radeonlab.roles.privilege import as_root
from radeonlab.roles.python_stack import stack_paths
from radeonlab.roles.python_stack.facts import UserGroups


def granted_devices() -> list[str]:
    """The device nodes this role grants (access_devices): the verify role's stack check opens them."""
    return list(host.data.get("access_devices", DEFAULTS["access_devices"]))


@deploy("Give the training user GPU access", data_defaults=DEFAULTS)
def grant_gpu_access(check_devices: bool = True) -> None:
    """Add the training user to video + render (keeping its other groups); then, unless told not to (a host
    without GPU), check the device nodes' modes and groups against the user's groups."""
    user = host.data.get("access_user") or stack_paths().user
    groups = list(host.data.get("access_groups"))
    for group in host.data.get("access_system_groups"):
        server.group(name=f"Create the system group {group}", group=group, system=True, **as_root())
    existing = host.get_fact(UserGroups, user=user) or {}
    added = [g for g in groups if g not in {existing.get("group"), *existing.get("groups", [])}]
    groups_op = server.user(
        name=f"Add {user} to {', '.join(groups)}",
        user=user,
        groups=groups,
        append=True,  # never drop the user's other groups (sudo!)
        **as_root(),
    )
    note = relogin_note(user, added, host.get_fact(UserProcessCount, user=user, **as_root()))
    if note:
        python.call(
            name=f"Say that {user}'s open sessions must log in again",
            function=lambda: logger.warning(f"{host.print_prefix}{note}"),
            _if=groups_op.did_change,
        )
    linger = linger_command(
        user,
        systemd_runs=bool(host.get_fact(Directory, path="/run/systemd/system")),
        lingering=bool(host.get_fact(File, path=f"{LINGER_DIR}/{user}")),
        wanted=bool(host.data.get("access_linger")),
    )
    if linger:
        server.shell(
            name=f"Let {user}'s systemd manager outlive its sessions (jobs with limits.memory_gb)",
            commands=[shlex.join(linger)],
            **as_root(),
        )
    if not check_devices:
        return
    # The groups the user has once the operation above ran: decided now, from facts, not after the fact.
    after = {existing.get("group", user), *existing.get("groups", []), *groups}
    problems = access_problems(
        host.get_fact(DeviceNodes, patterns=list(host.data.get("access_devices"))),
        user,
        after,
        host.data.get("access_devices"),
    )
    for problem in problems:
        if host.data.get("access_strict"):
            raise DeployError(f"{host.name}: {problem}")
        logger.warning(f"{host.print_prefix}{problem}")

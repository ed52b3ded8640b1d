"""Can a user open the GPU device nodes? Decided from modes and groups: pure functions, no pyinfra.

POSIX permission order: the owner bits apply to the owner, else the group bits to group members, else the
other bits. ACLs granted at login (systemd-logind's uaccess, desktop sessions only) are not counted: a
training job started over SSH does not get them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypedDict

RW_OWNER, RW_GROUP, RW_OTHER = 0o600, 0o060, 0o006


class DeviceNode(TypedDict):
    """One device node as facts.DeviceNodes reads it: its permission bits, owner and group."""

    mode: int
    user: str
    group: str


def can_read_write(node: DeviceNode, user: str, groups: Iterable[str]) -> bool:
    mode = int(node["mode"])
    if user == "root":
        return True
    if node["user"] == user:
        return mode & RW_OWNER == RW_OWNER
    if node["group"] in set(groups):
        return mode & RW_GROUP == RW_GROUP
    return mode & RW_OTHER == RW_OTHER


def access_problems(
    nodes: Mapping[str, DeviceNode], user: str, groups: Iterable[str], expected: Iterable[str]
) -> list[str]:
    """One line per device the user cannot read and write, each saying how to fix it."""
    groups = set(groups)
    problems = []
    for pattern in expected:
        prefix = pattern.rstrip("*")
        if not any(path.startswith(prefix) for path in nodes):
            problems.append(
                f"{pattern} does not exist: is the amdgpu kernel driver loaded? (modprobe amdgpu)"
            )
    for path, node in sorted(nodes.items()):
        if not can_read_write(node, user, groups):
            problems.append(
                f"{user} cannot read+write {path} (mode {int(node['mode']):o}, "
                f"{node['user']}:{node['group']}): "
                f"add {user} to group {node['group']} (usermod -aG {node['group']} {user}) and log in again"
            )
    return problems


LINGER_DIR = "/var/lib/systemd/linger"  # systemd-logind: one empty file per user whose manager stays up


def linger_command(user: str, systemd_runs: bool, lingering: bool, wanted: bool) -> list[str] | None:
    """`loginctl enable-linger USER` when it is wanted and not yet on, else None (nothing to do).

    Why: `limits.memory_gb` runs the training in a scope of the user's systemd manager (`systemd-run --user
    --scope`); without lingering, logind stops that manager, and the job with it, when the user's last SSH
    session closes, i.e. right after `submit` returns. Hosts without systemd have no manager to keep.
    """
    if not wanted or not systemd_runs or lingering:
        return None
    return ["loginctl", "enable-linger", user]


def relogin_note(user: str, added: Iterable[str], processes: int) -> str | None:
    """One line when groups are added while `user` has processes running: a process keeps the groups it
    started with, and so does every process a session starts, so open sessions (an SSH shell, a desktop
    login, a running tmux) must log in again before they can open the GPU (AMD's ROCm install guide: after
    adding the user to video and render, log out and in, or reboot). New logins, jobs and the deploy's own
    stack check (a fresh login) get the groups at once. None when nothing is added or nothing runs."""
    added = sorted(set(added))
    if not added or processes <= 0:
        return None
    return (
        f"{user} was added to {', '.join(added)} while {processes} of its processes run: its open sessions "
        f"keep their old groups; log in again there (new logins and jobs have them)"
    )

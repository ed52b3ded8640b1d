"""Facts the access role reads: parse only, never change anything."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from radeonlab.roles.access.check import DeviceNode


class DeviceNodes(FactBase):
    """Owner, group and mode of device nodes.

    {"/dev/kfd": {"mode": 0o660, "user": "root", "group": "render"}}

    Patterns (renderD*) are expanded by the remote shell; nodes that do not exist are left out.
    """

    default = dict

    def command(self, patterns: list[str]) -> str:
        # Patterns come from role data and are meant to be globbed, so they are not quoted.
        return f'for d in {" ".join(patterns)}; do [ -e "$d" ] && stat -c \'%n %a %U %G\' "$d"; done; true'

    def process(self, output: list[str]) -> dict[str, DeviceNode]:
        nodes: dict[str, DeviceNode] = {}
        for line in output:
            parts = line.split()
            if len(parts) == 4:
                path, mode, user, group = parts
                nodes[path] = {"mode": int(mode, 8), "user": user, "group": group}
        return nodes


class UserProcessCount(FactBase):
    """How many processes `user` runs now (from /proc: no procps needed; 0 for a user without any)."""

    def command(self, user: str) -> str:
        return f"stat -c %U /proc/[0-9]* 2>/dev/null | grep -cx -- {shlex.quote(user)} || true"

    def process(self, output: list[str]) -> int:
        lines = [line.strip() for line in output if line.strip().isdigit()]
        return int(lines[-1]) if lines else 0

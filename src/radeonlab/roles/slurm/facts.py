"""Facts the slurm role reads: parse only, never change anything (each prints nothing when absent)."""

from __future__ import annotations

import json
import shlex

from pyinfra.api import FactBase
from typing_extensions import override

_MARK = "@@radeonlab-slurmd-C"


class SlurmNodeInfo(FactBase):
    """
    What slurm.conf says about a node, in one round trip: its host record and `slurmd -C`.

    .. code:: python

        {"record": {"host": "ws1", "gpus": [...]}, "slurmd_c": "NodeName=ws1 CPUs=2 ... RealMemory=24105"}

    ``record`` is None without a (valid) record; ``slurmd_c`` is None before slurmd is installed.
    """

    default = dict

    @override
    def command(self, record_path: str) -> str:
        return (
            f"cat {shlex.quote(record_path)} 2>/dev/null; echo; echo {_MARK}; "
            "command -v slurmd >/dev/null 2>&1 && slurmd -C 2>/dev/null | head -n 1; true"
        )

    @override
    def process(self, output: list[str]) -> dict[str, object]:
        text = "\n".join(output)
        head, _, tail = text.partition(_MARK)
        try:
            record = json.loads(head) if head.strip() else None
        except json.JSONDecodeError:
            record = None
        return {"record": record, "slurmd_c": tail.strip() or None}


class MungeCredential(FactBase):
    """A fresh munge credential made on the host (`munge -n`: empty payload, 300 s, decodable once), or None
    when munged does not answer. Used by the deploy's check to prove two hosts share the key."""

    @override
    def command(self) -> str:
        return "munge -n 2>/dev/null || true"

    @override
    def process(self, output: list[str]) -> str | None:
        cred = "".join(line.strip() for line in output)
        return cred if cred.startswith("MUNGE:") else None


class MungeDecode(FactBase):
    """Can this host's munged decode `credential`? {"ok": bool, "error": "<unmunge's message>"}."""

    default = dict

    @override
    def command(self, credential: str) -> str:
        return (
            f"out=$(printf '%s\\n' {shlex.quote(credential)} | unmunge 2>&1 >/dev/null); rc=$?; "
            'echo "rc=$rc"; printf "%s\\n" "$out" | head -n 1'
        )

    @override
    def process(self, output: list[str]) -> dict[str, object]:
        rc = next((line[3:] for line in output if line.startswith("rc=")), "")
        error = " ".join(line.strip() for line in output if not line.startswith("rc=")).strip()
        return {"ok": rc.strip() == "0", "error": error.removeprefix("unmunge: ").removeprefix("Error: ")}


class UserId(FactBase):
    """The numeric uid of `user`, or None when the user does not exist."""

    @override
    def command(self, user: str) -> str:
        return f"id -u {shlex.quote(user)} 2>/dev/null || true"

    @override
    def process(self, output: list[str]) -> int | None:
        text = "".join(output).strip()
        return int(text) if text.isdigit() else None


class SlurmDaemons(FactBase):
    """
    Which of the lab's daemons run, from their pid files, and whether systemd is the init:

    .. code:: python

        {"systemd": False, "munged": 312, "slurmctld": None, "slurmd": 340}

    A pid counts only when /proc/<pid>/comm names the daemon (a stale pid file is not a running daemon).
    """

    default = dict

    @override
    def command(self, pidfiles: dict[str, str]) -> str:
        checks = [
            f"p=$(cat {shlex.quote(path)} 2>/dev/null); "
            f'if [ -n "$p" ] && [ "$(cat /proc/$p/comm 2>/dev/null)" = {shlex.quote(name)} ]; '
            f'then echo "{name}=$p"; else echo "{name}="; fi'
            for name, path in pidfiles.items()
        ]
        systemd = "if [ -d /run/systemd/system ]; then echo systemd=1; else echo systemd=0; fi"
        return "; ".join([systemd, *checks])

    @override
    def process(self, output: list[str]) -> dict[str, object]:
        values = dict(line.split("=", 1) for line in output if "=" in line)
        out: dict[str, object] = {"systemd": values.pop("systemd", "0").strip() == "1"}
        for name, pid in values.items():
            out[name] = int(pid) if pid.strip().isdigit() else None
        return out


class SlurmNodeStates(FactBase):
    """
    `sinfo -h -N -o '%N|%T|%E'` once every node answers, or after ``timeout`` seconds (then as it is):

    .. code:: python

        {"ws1": ("idle", "none"), "ws2": ("down*", "Not responding")}

    Empty when sinfo cannot reach slurmctld.
    """

    default = dict

    @override
    def command(self, timeout: int) -> str:
        answering = "(idle|allocated|mixed|completing|planned|reserved)"
        return (
            f"i=0; while :; do out=$(sinfo -h -N -o '%N|%T|%E' 2>/dev/null); "
            f"if [ -n \"$out\" ] && ! printf '%s\\n' \"$out\" | grep -qvE '^[^|]+\\|{answering}\\|'; "
            f"then break; fi; i=$((i + 1)); [ $i -ge {int(timeout)} ] && break; sleep 1; done; "
            'printf "%s\\n" "$out"'
        )

    @override
    def process(self, output: list[str]) -> dict[str, tuple[str, str]]:
        from radeonlab.roles.slurm.checks import parse_node_states

        return parse_node_states("\n".join(output))

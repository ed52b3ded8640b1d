"""Facts the python_stack role reads: parse only, never change anything."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from pyinfra.api import FactBase

# Runs under the venv's python: a real module beside this one, sent with -c (see versions.py).
_VERSIONS_SCRIPT = (Path(__file__).parent / "versions.py").read_text()


class PythonVersion(FactBase):
    """The version of a Python interpreter ("3.11.2"), or None when it is not installed."""

    def command(self, python: str = "python3") -> str:
        code = 'import sys; print("%d.%d.%d" % sys.version_info[:3])'
        return f"{shlex.quote(python)} -c {shlex.quote(code)} 2>/dev/null || true"

    def process(self, output: list[str]) -> str | None:
        text = "\n".join(output).strip()
        return text or None


class InstalledDistributions(FactBase):
    """Installed versions of the named distributions in a venv: {"torch": "2.13.0+rocm7.2", "peft": None}.

    Our own fact because pyinfra's PipPackages regex does not match local versions like 2.13.0+rocm7.2.
    Empty dict when the venv's python does not exist yet.
    """

    default = dict

    def command(self, python: str, names: list[str]) -> str:
        args = " ".join(shlex.quote(n) for n in names)
        return (
            f"if [ -x {shlex.quote(python)} ]; then "
            f"{shlex.quote(python)} -c {shlex.quote(_VERSIONS_SCRIPT)} {args}; fi"
        )

    def process(self, output: list[str]) -> dict[str, str | None]:
        text = "\n".join(output).strip()
        return json.loads(text) if text else {}


class UserGroups(FactBase):
    """A user's primary group and other groups: {"group": "lab", "groups": ["sudo", "video"]}, or None when
    the user does not exist.

    Two `id` calls for one user: pyinfra's Users fact runs several processes for every account (seconds on
    a no-op run when each role asks for it).
    """

    def command(self, user: str) -> str:
        u = shlex.quote(user)
        return f"if id -u {u} >/dev/null 2>&1; then id -gn {u}; id -Gn {u}; fi"

    def process(self, output: list[str]) -> dict[str, object] | None:
        if len(output) < 2:
            return None
        group = output[0].strip()
        return {"group": group, "groups": [g for g in output[1].split() if g != group]}

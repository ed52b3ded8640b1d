"""Facts the verify role reads: parse only, never change anything."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from pyinfra.api import FactBase

CHECK_SCRIPT = (Path(__file__).parent / "check_stack.py").read_text()


class StackReport(FactBase):
    """What the venv's torch sees (roles/verify/check_stack.py's JSON), or None when the venv is missing."""

    def command(self, python: str, matmul_size: int = 1024) -> str:
        py = shlex.quote(python)
        return f"if [ -x {py} ]; then {py} -c {shlex.quote(CHECK_SCRIPT)} {int(matmul_size)}; fi"

    def process(self, output: list[str]) -> dict | None:
        lines = [line for line in output if line.startswith("{")]
        return json.loads(lines[-1]) if lines else None


class HostRecord(FactBase):
    """The host record as written by an earlier run (parsed JSON), or None."""

    def command(self, path: str) -> str:
        return f"cat {shlex.quote(path)} 2>/dev/null || true"

    def process(self, output: list[str]) -> dict | None:
        text = "\n".join(output).strip()
        try:
            return json.loads(text) if text else None
        except json.JSONDecodeError:
            return None  # a damaged record is rewritten

"""Facts the ROCm role reads: parse only, never change anything."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase


class RocmInstalledVersion(FactBase):
    """The installed ROCm release as /opt/rocm/.info/version says it ("7.2.4-97"), or None."""

    def command(self, path: str = "/opt/rocm/.info/version") -> str:
        # Prints nothing (exit 0) when ROCm is not installed.
        return f"cat {shlex.quote(path)} 2>/dev/null || true"

    def process(self, output: list[str]) -> str | None:
        text = "\n".join(output).strip()
        return text or None

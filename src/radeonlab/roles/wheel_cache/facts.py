"""Facts the wheel_cache role reads: parse only, never change anything."""

from __future__ import annotations

import shlex
from pathlib import Path

from pyinfra.api import FactBase

# Prints "ok" when the cache's index root answers HTTP 200: a real module beside this one (probe_index.py).
_PROBE = (Path(__file__).parent / "probe_index.py").read_text()


class WheelCacheState(FactBase):
    """The cache host's state: {"stamp": digest of the last complete download or None, "serving": bool,
    "systemd": bool (systemd is the running init)}."""

    def command(self, cache_dir: str, stamp_file: str, probe_url: str) -> str:
        stamp = shlex.quote(f"{cache_dir}/{stamp_file}")
        return (
            f"echo stamp=$(cat {stamp} 2>/dev/null); "
            "if [ -d /run/systemd/system ]; then echo systemd=1; else echo systemd=0; fi; "
            f"echo serving=$(python3 -c {shlex.quote(_PROBE)} {shlex.quote(probe_url)})"
        )

    def process(self, output: list[str]) -> dict[str, object]:
        values = dict(line.split("=", 1) for line in output if "=" in line)
        return {
            "stamp": values.get("stamp", "").strip() or None,
            "systemd": values.get("systemd", "").strip() == "1",
            "serving": values.get("serving", "").strip() == "ok",
        }

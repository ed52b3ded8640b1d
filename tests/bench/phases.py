"""Run a provisioning command and time it phase by phase from its own progress lines (a measurement aid).

pyinfra prints `--> Starting operation: <name>` and Ansible `TASK [<name>]` as each step starts on every
host: a phase lasts until the next one starts (the last until the process exits); what comes before the first
is "start-up" (connecting, fact gathering, change detection). Lines are stamped as they arrive (the
child's output is read unbuffered), so phases are wall-clock times of the whole run, all hosts in parallel.
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

PYINFRA_STEP = re.compile(r"^--> Starting operation: (.+?)\s*$")
ANSIBLE_STEP = re.compile(r"^TASK \[(.+?)\]")
START_UP = "start-up"


@dataclass
class Timed:
    returncode: int
    seconds: float
    output: str
    phases: list[tuple[str, float]] = field(default_factory=list)  # (step name, seconds), in order

    def slowest(self, n: int = 5) -> list[tuple[str, float]]:
        return sorted(self.phases, key=lambda p: -p[1])[:n]


def phases_of(
    stamped: list[tuple[float, str]], start: float, end: float, step: re.Pattern
) -> list[tuple[str, float]]:
    """(time, line) pairs -> [(step, seconds)]: each step until the next starts, the last until `end`."""
    marks = [(START_UP, start)] + [(m.group(1), t) for t, line in stamped if (m := step.match(line))]
    return [(name, (marks[i + 1][1] if i + 1 < len(marks) else end) - t) for i, (name, t) in enumerate(marks)]


def run_timed(
    argv: list[str], cwd: Path, env: dict[str, str], step: re.Pattern, timeout: float = 3600
) -> Timed:
    env = {**env, "PYTHONUNBUFFERED": "1"}  # lines as they are printed, not when a pipe buffer fills
    start = time.perf_counter()
    stamped: list[tuple[float, str]] = []
    with subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            stamped.append((time.perf_counter(), line.rstrip("\n")))
            if time.perf_counter() - start > timeout:
                proc.kill()
        returncode = proc.wait()
    end = time.perf_counter()
    output = "\n".join(line for _, line in stamped)
    return Timed(returncode, end - start, output, phases_of(stamped, start, end, step))

"""`radeonlab sandbox demo` (what scripts/demo.sh runs) as a user sees it: short output, watch's live panel
on a terminal, one closing block (what was trained, where the adapter is, what it answered), phases that add
up to the wall time. Each run provisions its own SIMULATED workstation and trains 300 steps on its CPU."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.faultlab import wait_for

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

EXE = str(Path(sys.executable).with_name("radeonlab"))
MAX_LINES = 60
STEPS = 300  # demo.py's max_steps


def assert_closing_block(out: str, state: Path) -> None:
    trained = re.search(r"^trained: +(.*)$", out, re.M)
    assert trained, out
    assert all(w in trained.group(1) for w in ("tiny-llama", "lora rank 8", "rows of demo", f"{STEPS} steps"))
    adapter = re.search(r"^adapter: +(\S+)$", out, re.M)
    assert adapter and (Path(adapter.group(1)) / "adapter_config.json").is_file(), out
    assert re.search(r"^answered: +'.*' \(the data says 'GARDEN'\)$", out, re.M), out
    where = re.escape(str(state))
    assert re.search(rf"^state: +{where} \(no host left\)\n +`rm -rf {where}` removes", out, re.M), out


def test_the_demo_through_a_pipe_is_short_and_its_phases_add_up(tmp_path: Path) -> None:
    state = tmp_path / "demo"
    t0 = time.monotonic()
    done = subprocess.run([EXE, "sandbox", "--state-dir", str(state), "demo"], capture_output=True, text=True,
                          timeout=900)  # fmt: skip
    wall = time.monotonic() - t0
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert len(lines) <= MAX_LINES, done.stdout
    steps = [int(m.group(1)) for line in lines if (m := re.match(rf"step (\d+)/{STEPS} ", line))]
    assert 8 <= len(steps) <= 12 and steps[-1] == STEPS, steps  # a line per 10 % of the steps
    assert_closing_block(done.stdout, state)
    summary = re.search(r"wall time (\d+)s = (.*)$", done.stdout, re.M)
    assert summary, done.stdout
    phases = [int(s) for s in re.findall(r" (\d+)s(?:,|$)", summary.group(2))]
    assert len(phases) >= 6, summary.group(0)
    # each phase is rounded to a second; Python's start before the first phase is outside them
    assert abs(sum(phases) - wall) <= len(phases) + 5, (summary.group(0), wall)
    assert (state / "logs" / "provision.log").read_text().strip()  # pyinfra's output went to its log


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


@pytest.mark.skipif(subprocess.run(["which", "tmux"], capture_output=True).returncode != 0, reason="no tmux")
def test_the_demo_on_a_terminal_redraws_watchs_panel_in_place(tmp_path: Path) -> None:
    state = tmp_path / "demo"
    session = f"demo-{os.getpid()}"
    command = shlex.join([EXE, "sandbox", "--state-dir", str(state), "demo"]) + '; echo "demo exited $?"'
    tmux("new-session", "-d", "-s", session, "-x", "160", "-y", "50", command)
    try:
        tmux("set-option", "-t", session, "remain-on-exit", "on")

        def screen() -> str:
            return tmux("capture-pane", "-p", "-S", "-", "-t", session)

        def panel() -> list[tuple[int, int]] | None:
            rows = [(row, int(m.group(1))) for row, line in enumerate(screen().splitlines())
                    if (m := re.search(rf"\b(\d+)/{STEPS}  ETA", line))]  # fmt: skip
            return rows if rows and 0 < rows[-1][1] < STEPS else None

        first = wait_for(panel, 600, "watch's panel on the terminal", every=0.3)
        second = wait_for(lambda: (p := panel()) and p != first and p, 120, "the panel to change", every=0.3)
        # the same single row, a later step: redrawn in place, not a line per step
        assert len(first) == len(second) == 1, (first, second)
        assert first[0][0] == second[0][0] and second[0][1] > first[0][1], (first, second)
        wait_for(lambda: "demo exited" in screen(), 600, "the demo's end", every=1)
        out = screen()
        joined = tmux("capture-pane", "-p", "-J", "-S", "-", "-t", session)  # wrapped lines joined again
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    assert "demo exited 0" in out, out
    assert len(out.rstrip("\n").splitlines()) <= MAX_LINES, out  # the terminal's lines, wrapped ones counted
    assert_closing_block("\n".join(line.rstrip() for line in joined.splitlines()), state)

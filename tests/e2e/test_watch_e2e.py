"""`radeonlab watch` as users see it, on the session's shared SIMULATED workstation (CPU torch: the numbers
are the CPU's, the GPU readings the simulated card's).

One demo job is watched three ways at once: on a terminal (tmux: the panel is redrawn in place), with
`--json` (a line per logged step carrying tokens/s, an end line with LLaMA-Factory's effective tokens/s) and
through a pipe (a line per step).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from radeonlab.cli import main
from radeonlab.sandbox.demo import write_job_folder
from radeonlab.sandbox.hosts import Sandbox
from radeonlab.sandbox.provision import SHARED_TRAINER, shared_trainer
from tests.support.faultlab import wait_for

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
INVENTORY = str(REPO / "inventories/sandbox.py")
EXE = str(Path(sys.executable).with_name("radeonlab"))
STEPS = 400  # the tiny model logs tens of steps a second: this many keep the panel busy between looks


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


def step_rows(screen: str) -> list[tuple[int, int]]:
    """(row, step) of every line of the panel's progress row: `<step>/<total>  ETA ...`."""
    return [
        (row, int(m.group(1)))
        for row, line in enumerate(screen.splitlines())
        if (m := re.search(rf"\b(\d+)/{STEPS}  ETA", line))
    ]


def test_one_job_watched_on_a_terminal_as_json_and_through_a_pipe(sandbox: Sandbox, tmp_path: Path) -> None:
    shared_trainer(sandbox)
    env = {"RADEONLAB_SANDBOX_DIR": str(sandbox.state_dir), "RADEONLAB_HOME": str(tmp_path / "laptop")}
    spec = write_job_folder(tmp_path, {"max_steps": STEPS, "save_steps": 1000})
    submitted = CliRunner().invoke(
        main,
        ["submit", str(spec), "-i", INVENTORY, "--host", SHARED_TRAINER],
        env=env,
        catch_exceptions=False,
    )
    assert submitted.exit_code == 0, submitted.output
    (job_id,) = re.findall(r"submitted (\S+) to", submitted.stdout)

    def watcher(*extra: str) -> subprocess.Popen:
        argv = [EXE, "watch", job_id, "-i", INVENTORY, *extra]
        return subprocess.Popen(argv, env={**os.environ, **env}, stdout=subprocess.PIPE, text=True)

    as_json, piped = watcher("--json"), watcher()
    session = f"watch14-{os.getpid()}"
    command = shlex.join([EXE, "watch", job_id, "-i", INVENTORY]) + '; echo "watch exited $?"'
    env_args = [arg for k, v in env.items() for arg in ("-e", f"{k}={v}")]
    tmux("new-session", "-d", "-s", session, "-x", "120", "-y", "40", *env_args, command)
    try:
        tmux("set-option", "-t", session, "remain-on-exit", "on")

        def screen() -> str:
            return tmux("capture-pane", "-p", "-S", "-200", "-t", session)

        def running() -> list[tuple[int, int]] | None:
            rows = step_rows(screen())
            return rows if any(0 < s < STEPS for _, s in rows) else None

        try:
            first = wait_for(running, 180, "the panel's first steps", every=0.2)
            wait_for(lambda: step_rows(screen()) != first, 30, "the panel to change", every=0.2)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the screen:\n{screen()}") from None
        mid_run = screen()
        second = step_rows(mid_run)
        assert re.search(r"(?m)^tokens/s +\d", mid_run), mid_run  # the panel's tokens/s row has a number
        # One progress row, redrawn in the same place with a later step: a panel, not scrolling lines.
        assert len(first) == 1 and len(second) == 1, (first, second)
        assert first[0][0] == second[0][0] and second[0][1] > first[0][1], (first, second)
        wait_for(lambda: "watch exited" in screen(), 300, "watch to end with the job")
        text = screen()
        print("\n" + text.strip())
        assert "watch exited 0" in text and f"{job_id}: succeeded" in text
        assert len(step_rows(text)) == 1 and "Traceback" not in text
    except BaseException:
        as_json.kill(), piped.kill()
        raise
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)

    out, _ = as_json.communicate(timeout=120)
    assert as_json.returncode == 0, out[-2000:]
    lines = [json.loads(line) for line in out.splitlines()]
    steps = [line for line in lines if line.get("loss") is not None]  # LF's closing log line has no loss
    assert [s["step"] for s in steps] == list(range(1, STEPS + 1)), [s["step"] for s in steps]
    assert all(s["tokens_per_s"] > 0 for s in steps[:3]), steps[:3]  # from the first logged steps
    end = lines[-1]
    assert end["final"] is True and end["state"] == end["end"] == "succeeded", end
    assert end["effective_tokens_per_s"] > 0, end

    out, _ = piped.communicate(timeout=120)
    assert piped.returncode == 0, out[-2000:]
    assert len(re.findall(rf"step +\d+/{STEPS}  loss ", out)) == STEPS, out[-2000:]
    assert out.strip().splitlines()[-1].startswith(f"{job_id}: succeeded")

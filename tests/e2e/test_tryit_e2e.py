"""docs/guide/try-it.md works as written (issue 25): its `bash` blocks, run in order in one shell exactly as
a user pastes them, on what a fresh clone is after `./scripts/bootstrap.sh` (.venv, the checkout's files, an
empty laptop store), each command exiting 0 and saying what the page says it does. The page provisions one
SIMULATED workstation (`sandbox up --provision`, the shared base rootfs and wheel caches) and trains the demo
spec for a few steps on its CPU."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from radeonlab.sandbox import reap
from radeonlab.sandbox.hosts import Sandbox

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs/guide/try-it.md"
BLOCK = re.compile(r"^```bash\n(.*?)^```", re.M | re.S)
# what the page leaves in the clone, made fresh in the test's own copy (never the checkout's)
MADE_BY_THE_PAGE = {"try", "runs"}
TIMEOUT_S = 1500
# The verbs the page must walk through (issue 25 item 2), each a command of its own.
VERBS = ("sandbox up", "check", "submit", "watch", "logs", "fetch", "chat", "export", "dashboard")
UP = "radeonlab sandbox up --hosts 1 --provision"
# Run right after UP, beside the page: `sandbox provision` (the verb `up --provision` runs) again on the
# provisioned host, a no-op that exits 0 and says so. This run is also the suite's evidence for `up
# --provision` and `sandbox provision` (one provisioning for both: CI time).
REPROVISION = "radeonlab sandbox provision"


def page_commands(text: str) -> list[str]:
    """Every command of the page's `bash` blocks, in order: one per line (a trailing backslash joins the
    next), blank and comment-only lines left out."""
    commands: list[str] = []
    for block in BLOCK.findall(text):
        pending = ""
        for line in block.splitlines():
            if line.endswith("\\"):
                pending += line[:-1]
                continue
            line, pending = pending + line, ""
            if line.strip() and not line.lstrip().startswith("#"):
                commands.append(line)
    return commands


def test_the_pages_blocks_split_into_commands() -> None:
    text = "x\n```bash\na  # one\n\n# note\nb \\\n  c\n```\n```text\nnot run\n```\n```bash\nd &\n```\n"
    assert page_commands(text) == ["a  # one", "b   c", "d &"]


def test_the_page_walks_through_every_verb() -> None:
    commands = page_commands(PAGE.read_text())
    for verb in VERBS:
        assert any(re.match(rf"radeonlab {verb}\b", c) for c in commands), verb
    assert commands[-1] == "radeonlab sandbox down"
    assert UP in commands
    assert any(c.startswith("radeonlab chat ") and "--prompt" in c for c in commands)


def fresh_clone(tmp: Path) -> Path:
    """The checkout as a fresh clone sees it (its files linked, nothing made by an earlier run of the page)
    with the .venv bootstrap makes (the one running these tests)."""
    clone = tmp / "clone"
    clone.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in {".git", ".venv", *MADE_BY_THE_PAGE}:
            (clone / entry.name).symlink_to(entry)
    venv = Path(sys.prefix)
    assert (venv / "bin/activate").is_file() and (venv / "bin/radeonlab").is_file(), venv
    (clone / ".venv").symlink_to(venv)
    return clone


def script(commands: list[str], out: Path) -> str:
    """One bash running the commands in order, in the same shell (exports carry on), each one's output and
    exit status in out/N.out, out/N.rc; it stops at the first that fails."""
    lines = []
    for i, command in enumerate(commands):
        lines += [
            f'echo "$EPOCHREALTIME" > {out}/{i}.t0',
            "{ " + command,
            f"}} > {out}/{i}.out 2>&1",
            f'rc=$?; echo $rc > {out}/{i}.rc; echo "$EPOCHREALTIME" > {out}/{i}.t1; [ $rc = 0 ] || exit $rc',
        ]
    return "\n".join(lines) + "\n"


def user_env(tmp: Path, state: Path) -> dict[str, str]:
    """This machine's environment (pip's settings, PYTHONPATH) as a new user of the clone has it: the venv's
    bin on PATH, no radeonlab setting but the sandbox's state dir, an empty laptop store, no config file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RADEONLAB_") and k != "VIRTUAL_ENV"}
    env["PATH"] = f"{Path(sys.prefix) / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    env["RADEONLAB_SANDBOX_DIR"] = str(state)
    env["RADEONLAB_HOME"] = str(tmp / "laptop")
    env["RADEONLAB_CONFIG"] = str(tmp / "no-config.toml")
    return env


def claim_when_kept(state: Path) -> None:
    """`sandbox up` marks its hosts kept (they outlive the command); this test owns them instead, so a killed
    run's hosts are stale for the next session's reap."""
    owner = state / reap.OWNER_FILE
    try:
        kept = json.loads(owner.read_text()).get("kept")
    except (OSError, ValueError):
        return
    if kept:
        reap.claim(state)


Ran = list[tuple[str, int | None, str, float]]


def run_the_page(tmp: Path, commands: list[str]) -> tuple[Ran, list[str]]:
    """Each command's (command, exit status, output, seconds) as far as they ran, and the hosts the page's
    own commands left (before this test's clean-up)."""
    clone, state, out = fresh_clone(tmp), tmp / "state", tmp / "out"
    out.mkdir()
    (tmp / "page.sh").write_text(script(commands, out))
    proc = subprocess.Popen(["bash", str(tmp / "page.sh")], cwd=clone, env=user_env(tmp, state),
                            stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            claim_when_kept(state)
            time.sleep(1)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        else:  # a background command the page forgot to stop (the dashboard) goes with the test
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        sbx = Sandbox(state)
        left = sorted(sbx.hosts)
        sbx.destroy_all()
        assert sbx.leftovers() == []
    ran = []
    for i, command in enumerate(commands):
        if not (out / f"{i}.t0").exists():
            break
        done = (out / f"{i}.rc").exists()  # else the command was killed at the deadline
        rc = int((out / f"{i}.rc").read_text()) if done else None
        t1 = float((out / f"{i}.t1").read_text()) if done else time.time()
        ran.append((command, rc, (out / f"{i}.out").read_text(), t1 - float((out / f"{i}.t0").read_text())))
    return ran, left


def test_the_page_runs_as_written_on_a_fresh_clone(tmp_path: Path) -> None:
    commands = page_commands(PAGE.read_text())
    commands.insert(commands.index(UP) + 1, REPROVISION)
    t0 = time.monotonic()
    ran, left = run_the_page(tmp_path, commands)
    report = "\n".join(f"[{s:6.1f}s rc={rc}] $ {c}\n{o[-1500:]}" for c, rc, o, s in ran)
    print(f"\ntry-it page: {len(ran)} commands in {time.monotonic() - t0:.0f}s\n{report}")
    failed = [(c, rc) for c, rc, _, _ in ran if rc != 0]
    assert not failed and len(ran) == len(commands), report[-8000:]
    out = {c: o for c, _, o, _ in ran}

    def output(prefix: str) -> str:
        return next(o for c, o in out.items() if c.startswith(prefix))

    assert re.search(r"^provisioned ws1 in [\d.]+s$", output("radeonlab sandbox up"), re.M)
    assert re.search(r"^provisioned ws1 in [\d.]+s$", output(REPROVISION), re.M)
    # reachable, its card, and provisioned (the column after torch), no job yet: 0 queued
    fleet = output("radeonlab fleet")
    assert re.search(r"^ ws1 +yes +AMD Radeon RX 7900 XTX \(gfx1100\) .* yes +- +0 *$", fleet, re.M), fleet
    assert "try/demo.yaml: 0 error(s)" in output("radeonlab check")
    submitted = re.search(r"^submitted (\S+) to ws1: running$", output("radeonlab submit"), re.M)
    assert submitted, output("radeonlab submit")
    job = submitted.group(1)
    submit = next(c for c in out if c.startswith("radeonlab submit"))
    steps = int(re.search(r"max_steps=(\d+)", submit).group(1))  # type: ignore[union-attr]
    watched = output("radeonlab watch")
    assert re.search(rf"^step {steps}/{steps} +loss", watched, re.M), watched
    assert re.search(rf"^{job}: succeeded", watched, re.M), watched
    assert output("radeonlab logs").strip()
    assert re.search(rf"^ {job[:12]}.* +ws1 +succeeded +{steps}/{steps} ", output("radeonlab list"), re.M)
    results = tmp_path / "clone/runs" / job
    assert f"results in {results}" in output("radeonlab fetch")
    assert (results / "output/adapter_model.safetensors").is_file() and (results / "train.log").is_file()
    assert f"merged model in {results}/export/merged" in output("radeonlab export")
    assert (results / "export/merged/config.json").is_file()
    lab = json.loads(output("curl ").strip().splitlines()[-1])
    assert [h["host"] for h in lab["hosts"]] == ["ws1"], lab
    assert re.search(r"^all hosts destroyed under ", output("radeonlab sandbox down"), re.M)
    assert left == []  # `down` itself destroyed them

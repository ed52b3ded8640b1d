"""The supervisor's notifications without SSH: the real Supervisor (from the shipped host code, in its own
process) runs a job whose SIMULATED llamafactory-cli logs a NaN loss while config.yaml's learning_rate is
above 1, walks the NaN ladder and succeeds; a webhook sink on loopback must get started, first step, two
remedies and succeeded in that order, and the training process must not see the URLs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from radeonlab.jobs.host.notify_messenger import ENV
from radeonlab.jobs.host.remedies import STEP_KEYS
from radeonlab.jobs.ssh import hostcode
from tests.support.notify_sink import Sink

TOKEN = "tk_sup_3rv1s0r"
FAKE_CLI = f"""#!{sys.executable}
# SIMULATED llamafactory-cli: NaN from step 2 while learning_rate > 1 (then it hangs, as LLaMA-Factory
# would carry on); else 3 falling losses and an adapter. Records whether it was given the notification URLs.
import json, os, re, sys, time
text = open(sys.argv[2]).read()
lr = float(re.search(r"(?m)^learning_rate: (.*)$", text).group(1))
os.makedirs("output", exist_ok=True)
with open("saw-urls", "a") as f:
    f.write(str("{ENV}" in os.environ) + "\\n")
with open("output/trainer_log.jsonl", "a") as f:
    for step in range(1, 4):
        loss = float("nan") if lr > 1 and step >= 2 else 1.0 / step
        f.write(json.dumps({{"current_steps": step, "total_steps": 3, "loss": loss, "lr": lr}}) + "\\n")
        f.flush()
        time.sleep(0.3)
    if lr > 1:
        time.sleep(60)
open("output/adapter_model.safetensors", "wb").write(b"simulated adapter")
"""
RUN = """
import json, os, sys
from radeonlab.jobs.host.process import StateFile
from radeonlab.jobs.host.runtime import Runtime
from radeonlab.jobs.host.supervisor import Supervisor
job_dir, argv, env = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.stdin.read())
venv = Runtime(venv=os.path.dirname(os.path.dirname(argv[0])))
sys.exit(Supervisor(job_dir, argv, env, [], StateFile(job_dir), venv).run(False))
"""


def job_folder(tmp_path: Path) -> tuple[Path, Path]:
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "llamafactory-cli").write_text(FAKE_CLI)
    (venv / "llamafactory-cli").chmod(0o755)
    # the messenger's python: this test's (it has apprise), started through its own venv's path
    (venv / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (venv / "python").chmod(0o755)
    job = tmp_path / "jobs" / "nan-20260101-000000-abcd"
    for rel, data in hostcode.files().items():
        (job / "host" / rel).parent.mkdir(parents=True, exist_ok=True)
        (job / "host" / rel).write_bytes(data)
    record = {"id": job.name, "name": "nan", "spec_file": "nan.yaml", "created_at": "2026-01-01T00:00:00Z",
              "host": "ws1", "attempts": [{"n": 1, "created_at": "x"}],
              "remedies": {"nan": {"enabled": True, "steps": []}},
              "lf_defaults": {k: {"flash_attn": "auto"}.get(k) for k in STEP_KEYS}}  # fmt: skip
    (job / "job.json").write_text(json.dumps(record))
    (job / "config.json").write_text(json.dumps({"learning_rate": 1e30, "output_dir": str(job / "output")}))
    (job / "config.yaml").write_text("learning_rate: 1.0e+30\n")
    return job, venv / "llamafactory-cli"


def test_the_supervisor_tells_each_step_of_a_rescued_job_in_order(tmp_path: Path) -> None:
    job, cli = job_folder(tmp_path)
    with Sink() as sink:
        env = {"PATH": os.environ["PATH"], ENV: json.dumps([sink.url(TOKEN)])}
        argv = [str(cli), "train", str(job / "config.yaml")]
        done = subprocess.run(
            [sys.executable, "-c", RUN, str(job), json.dumps(argv)],
            input=json.dumps(env),
            env={**os.environ, "PYTHONPATH": str(job / "host")},
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, done.stderr
        sink.wait_for(lambda s: any(t.endswith("succeeded") for t in s.titles()), 30, "the success message")
    assert [t.split(": ", 1)[1] for t in sink.titles()] == [
        "started", "first step logged", "remedy taken", "remedy taken", "succeeded",
    ]  # fmt: skip
    assert all(t.startswith(f"radeonlab {job.name} on ws1: ") for t in sink.titles())
    remedies = [m["message"] for m in sink.received if m["title"].endswith("remedy taken")]
    assert "flash_attn auto -> disabled" in remedies[0] and "learning_rate 1e+30 -> 5e-05" in remedies[1]
    assert "final_loss: 0.3333" in sink.received[-1]["message"]
    assert (job / "saw-urls").read_text().split() == ["False"] * 3  # three attempts, none saw the URLs
    assert "radeonlab notify: succeeded: url 1 (json) sent" in done.stderr  # what launcher.log gets
    assert TOKEN not in done.stderr + done.stdout
    for path in job.rglob("*"):
        assert not path.is_file() or TOKEN.encode() not in path.read_bytes(), path

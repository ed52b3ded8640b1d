"""Notifications end to end on the session's shared provisioned SIMULATED workstation (real training of the
tiny model, CPU torch standing in for ROCm torch): the host's supervisor tells a webhook sink on loopback
(an Apprise json:// URL, as a user would point it at ntfy or Discord) what happens, in order, with the job
id, whether the laptop is there or not; a sink that is down changes nothing for the job; the URL's token is
in no file of the job folder, no log, no row of the laptop's SQLite and no process's command line."""

from __future__ import annotations

import re
import socket
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from radeonlab.cli import main
from radeonlab.sandbox import demodata, tinymodel
from radeonlab.sandbox.demo import write_spec
from radeonlab.sandbox.hosts import Sandbox, SandboxHost
from radeonlab.sandbox.provision import SHARED_TRAINER, shared_trainer
from tests.support.notify_sink import Sink

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
INVENTORY = str(REPO / "inventories/sandbox.py")
HOST = SHARED_TRAINER
JOBS_DIR = "/home/lab/radeonlab/jobs"
TOKEN = "ntfy_tk_9f3c0e5e2d7a41b8"  # what must never be written down


@dataclass
class Lab:
    host: SandboxHost
    work: Path
    env: dict[str, str]
    sink: Sink
    seen_ps: list[str]


@pytest.fixture(scope="module")
def lab(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    provisioned = shared_trainer(sandbox)
    work = tmp_path_factory.mktemp("notify")
    data = demodata.write_dataset(work / "data")
    tinymodel.build_model(work / "tiny-llama", data)
    env = {"RADEONLAB_SANDBOX_DIR": str(sandbox.state_dir), "RADEONLAB_HOME": str(work / "laptop")}
    with Sink() as sink:
        yield Lab(provisioned.host, work, env, sink, [])
    provisioned.host.set_data(radeonlab_notify=None)


def cli(lab: Lab, *args: str):
    return CliRunner().invoke(main, list(args), env=lab.env, catch_exceptions=False)


def spec(lab: Lab, name: str, overrides: dict[str, object], block: str = "") -> Path:
    path = write_spec(lab.work, overrides, name=name)
    if block:
        path.write_text(path.read_text() + "radeonlab:\n" + block)
    return path


def submit(lab: Lab, path: Path) -> str:
    result = cli(lab, "submit", str(path), "-i", INVENTORY, "--host", HOST)
    assert result.exit_code == 0, result.output
    assert TOKEN not in result.output
    return re.search(r"submitted (\S+) to", result.stdout).group(1)  # type: ignore[union-attr]


def watch_with_ps(lab: Lab, job_id: str):
    """`radeonlab watch` to the end, while every process line of the host is read twice a second."""
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            lab.seen_ps.append(lab.host.exec(["ps", "-eww", "-o", "user,pid,args"], check=False).stdout)
            done.wait(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        return cli(lab, "watch", job_id, "-i", INVENTORY)
    finally:
        done.set()
        sampler.join()


def events_of(lab: Lab, job_id: str) -> list[str]:
    """What the sink got about `job_id`, as the event words of the titles, in arrival order."""
    prefix = f"radeonlab {job_id} on {HOST}: "
    return [t[len(prefix) :] for t in lab.sink.titles() if t.startswith(prefix)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_notify_test_sends_from_the_host(lab: Lab) -> None:
    result = cli(lab, "notify-test", lab.sink.url(TOKEN), "--host", HOST, "-i", INVENTORY)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"{HOST}: url 1 (json): delivered"
    assert f"radeonlab notify-test on {HOST}: test message" in lab.sink.titles()
    down = f"json://127.0.0.1:{free_port()}/x/{TOKEN}"
    refused = cli(lab, "notify-test", down, "--host", HOST, "-i", INVENTORY)
    assert refused.exit_code == 1 and "url 1 (json): NOT delivered after 3 tries" in refused.stdout
    assert TOKEN not in refused.output


def test_a_nan_job_reports_start_first_step_each_remedy_and_success_in_order(lab: Lab) -> None:
    overrides = {"max_steps": 12, "save_steps": 2, "learning_rate": "1.0e+30"}
    job_id = submit(lab, spec(lab, "nan.yaml", overrides, f'  notify: ["{lab.sink.url(TOKEN)}"]\n'))
    watched = watch_with_ps(lab, job_id)
    assert watched.exit_code == 0, watched.output
    lab.sink.wait_for(lambda s: "succeeded" in events_of(lab, job_id), 60, "the success message")
    events = events_of(lab, job_id)
    # The NaN ladder of tests/e2e/test_jobs_health_e2e.py: two remedies (flash_attn, then learning_rate).
    assert events == ["started", "first step logged", "remedy taken", "remedy taken", "succeeded"], events
    mine = [m for m in lab.sink.received if job_id in m["title"]]
    by_title = {m["title"].rsplit(": ", 1)[1]: m["message"] for m in mine}
    assert "cause: NaN at step" in by_title["remedy taken"]
    success = by_title["succeeded"]
    assert f"adapter: {JOBS_DIR}/{job_id}/output" in success
    assert re.search(r"final_loss: \d", success) and re.search(r"tokens_per_s: \d", success), success
    assert re.search(r"duration: \d+(m\d\ds|s)", success), success


def test_a_failure_reports_its_reason_and_log_tail_from_the_inventory_default(lab: Lab) -> None:
    lab.host.set_data(radeonlab_notify=[lab.sink.url(TOKEN)])  # no notify in the spec: the host's default
    overrides = {"max_steps": 12, "save_steps": 50, "learning_rate": "1.0e+30"}
    job_id = submit(lab, spec(lab, "fails.yaml", overrides, "  remedies: {nan: off}\n"))
    watched = watch_with_ps(lab, job_id)
    assert watched.exit_code == 1, watched.output
    lab.sink.wait_for(lambda s: "FAILED" in events_of(lab, job_id), 60, "the failure message")
    assert events_of(lab, job_id) == ["started", "first step logged", "FAILED"]
    failed = lab.sink.received[-1]
    assert failed["type"] == "failure"
    assert "reason: nan at step" in failed["message"].lower() and "log:" in failed["message"]


def test_with_the_sink_down_the_job_still_succeeds(lab: Lab) -> None:
    down = f"json://127.0.0.1:{free_port()}/hook/{TOKEN}"
    job_id = submit(lab, spec(lab, "down.yaml", {"max_steps": 6}, f'  notify: ["{down}"]\n'))
    watched = watch_with_ps(lab, job_id)
    assert watched.exit_code == 0, watched.output
    assert watched.stdout.strip().splitlines()[-1].startswith(f"{job_id}: succeeded")
    # the messenger outlives the launcher: its retries for the last message end after the job did
    line = "radeonlab notify: succeeded: url 1 (json) NOT delivered after 3 tries"
    log = f"{JOBS_DIR}/{job_id}/launcher.log"
    lab.sink.wait_for(lambda _: line in lab.host.exec(["cat", log]).stdout, 120, "the messenger's last word")
    text = lab.host.exec(["cat", log]).stdout
    assert "radeonlab notify: started: url 1 (json) NOT delivered after 3 tries" in text, text


def test_the_token_is_written_nowhere(lab: Lab) -> None:
    """Runs last: every job of this module sent to a URL holding TOKEN."""
    jobs = lab.host.exec(["grep", "-rlaF", TOKEN, JOBS_DIR], check=False)
    assert jobs.returncode == 1 and jobs.stdout == "", jobs.stdout  # grep: 1 = no file holds it
    logs = lab.host.exec(["grep", "-rlaF", TOKEN, "/home/lab", "/tmp", "/var/log"], check=False)
    assert logs.stdout == "", logs.stdout
    assert lab.seen_ps and not [s for s in lab.seen_ps if TOKEN in s]
    assert any("radeonlab.jobs.host.notify_send" in s for s in lab.seen_ps)  # the sampler saw the messenger
    db = Path(lab.env["RADEONLAB_HOME"]) / "jobs.db"
    with sqlite3.connect(db) as conn:
        rows = [str(r) for r in conn.execute("SELECT * FROM jobs")]
    assert rows and not [r for r in rows if TOKEN in r]
    assert TOKEN.encode() not in db.read_bytes()

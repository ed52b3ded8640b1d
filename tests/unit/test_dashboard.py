"""The dashboard without a workstation: stream events in -> what the page shows out; host probes -> fleet
rows; and the real web server (uvicorn on loopback) over a stand-in lab: the page, its own static files and
plotly.js, the server-sent events, and cancel refused to anything but the dashboard's own page."""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from radeonlab.cli.views import fleet_table, gpu_text
from radeonlab.contract.records import Attempt, JobRecord, StateRecord
from radeonlab.contract.state import JobState
from radeonlab.dashboard import app as webapp
from radeonlab.dashboard.model import JobView, host_row
from radeonlab.jobs.fleet.probe import parse_probe
from radeonlab.jobs.host.readings import GpuReading
from radeonlab.jobs.track.follow import TRAIN_LOG, TRAINER_LOG, Event
from radeonlab.sandbox.simcards import CARDS

STATIC = Path(webapp.__file__).parent / "static"


def point(step: int, loss: float | None, **extra: Any) -> bytes:
    line = {"current_steps": step, "total_steps": 10, "loss": loss, "lr": 1e-3 / step, **extra}
    return (json.dumps(line) + "\n").encode()


def job_view() -> JobView:
    job = JobRecord(id="demo-1", name="demo", spec_file="demo.yaml", created_at="2026-12-01T10:00:00Z",
                    host="ws1", gpus=[0])  # fmt: skip
    return JobView.of("ws1", job, StateRecord(JobState.RUNNING), True)


def test_stream_events_become_series_readings_attempts_and_a_log_tail() -> None:
    view = job_view()
    view.apply(Event("data", file=TRAINER_LOG, data=point(1, 2.0, total_tokens=512, elapsed_time="0:00:02")))
    view.apply(Event("data", file=TRAINER_LOG, data=point(2, float("nan")) + point(3, 1.5)[:10]))
    view.apply(Event("data", file=TRAINER_LOG, data=point(3, 1.5)[10:] + point(10, None)))  # summary line
    assert view.steps == [1, 2, 3] and view.loss == [2.0, None, 1.5]
    assert view.tokens_per_s[0] == 256.0 and view.total_steps == 10
    gpus = [GpuReading(0, vram_used=2 * 10**9, vram_total=24 * 10**9, busy_percent=97.0), GpuReading(1)]
    view.apply(Event("gpus", gpus=gpus))
    assert [g["index"] for g in view.gpus] == [0] and view.gpus[0]["busy_percent"] == 97.0
    view.apply(Event("data", file=TRAIN_LOG, data=b"a\nprogress 10%\rprogress 50%\rprogress 90%\n\nhalf"))
    view.apply(Event("data", file=TRAIN_LOG, data=b" line\n"))
    assert list(view.log) == ["a", "progress 90%", "half line"]
    attempts = [
        Attempt(n=1, created_at="t", state="stopped"),
        Attempt(n=2, created_at="t", cause="NaN at step 2"),
    ]
    attempts[1].changes = {"flash_attn": ["auto", "disabled"]}
    job = JobRecord(id="demo-1", name="demo", spec_file="", created_at="", host="ws1", attempts=attempts)
    view.apply(Event("state", state=StateRecord(JobState.RUNNING), alive=True, job=job))
    assert len(view.attempts) == 2 and "flash_attn auto -> disabled" in view.attempts[1]
    detail = view.detail(since=2)
    assert detail["steps"] == [3] and detail["points"] == 3 and detail["last_loss"] == 1.5
    json.dumps(detail, allow_nan=False)  # NaN travels as a gap, never as invalid JSON
    view.apply(Event("data", file=TRAINER_LOG, data=point(1, 3.0), restarted=True))  # a fresh start
    assert view.steps == [1] and view.generation == 1


def test_a_probe_becomes_a_fleet_row_and_an_unreachable_host_says_why() -> None:
    probe = {
        "record": None,
        "record_error": "no host record",
        "gpus": [{"index": 0, "vram_used": 1, "vram_total": 2, "temp_edge_c": 51.0, "busy_percent": 3.0}],
        "jobs": [
            {"id": "j1", "state": {"state": "running"}, "alive": True, "gpus": [0]},
            {"id": "j2", "state": {"state": "queued"}, "alive": True, "gpus": [0]},
            {"id": "j3", "state": {"state": "running"}, "alive": False, "gpus": [0]},
        ],  # fmt: skip
    }
    row = host_row(parse_probe("ws2", probe))
    assert row["reachable"] and not row["provisioned"] and row["note"] == "no host record"
    assert (row["running"], row["queued"]) == (["j1"], ["j2"])
    assert row["gpus"][0]["temp_c"] == 51.0


def test_the_page_and_the_cli_write_a_cards_memory_the_same_way_in_gib() -> None:
    """The SIMULATED RX 7900 XTX (24560 MiB): the page once said "1.6 GB / 25.8 GB", the CLI "1.5/24.0 GiB".
    Both now take the server's one formatter (radeonlab/units.py); the page has no byte formatter left."""
    xtx = CARDS["rx7900xtx"]
    reading = {"index": 0, "vram_used": xtx["vram_used"], "vram_total": xtx["vram_total"]}
    probe = {"record": None, "gpus": [reading]}
    view = parse_probe("ws1", probe)
    row = host_row(view)
    assert row["gpus"][0]["vram_text"] == "1.5/24.0 GiB"
    assert "VRAM 1.5/24.0 GiB" in gpu_text(view.gpus[0])  # `watch`'s line
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(fleet_table([view]))
    assert "1.5/24.0 GiB" in console.export_text()  # `fleet`'s table
    job = job_view()
    job.apply(Event("gpus", gpus=view.gpus))
    assert job.gpus[0]["vram_text"] == "1.5/24.0 GiB"  # the job panel's GPU rows
    script = (STATIC / "dashboard.js").read_text()
    assert "g.vram_text" in script and "1e9" not in script and " GB" not in script


@pytest.mark.parametrize(
    ("headers", "refused"),
    [
        ({"host": "127.0.0.1:8686", "origin": "http://127.0.0.1:8686", "x-radeonlab-token": "t0k"}, None),
        (
            {"host": "127.0.0.1:8686", "origin": "http://evil.example", "x-radeonlab-token": "t0k"},
            "cross-site",
        ),
        (
            {"host": "127.0.0.1:8686", "origin": "http://127.0.0.1:9999", "x-radeonlab-token": "t0k"},
            "cross-site",
        ),
        ({"host": "127.0.0.1:8686", "x-radeonlab-token": "t0k"}, "no Origin"),
        ({"host": "127.0.0.1:8686", "origin": "http://127.0.0.1:8686", "x-radeonlab-token": "nope"}, "token"),
        ({"host": "127.0.0.1:8686", "origin": "http://127.0.0.1:8686"}, "token"),
    ],
)
def test_only_the_dashboards_own_page_may_change_anything(headers: dict, refused: str | None) -> None:
    why = webapp.allowed(headers, "t0k")
    assert (why is None) if refused is None else (refused in str(why))


class StandInLab:
    """What app.py reads of poller.Lab, with no host behind it."""

    def __init__(self) -> None:
        self.version, self.cancelled, self.view = 1, [], job_view()
        self.view.apply(Event("data", file=TRAINER_LOG, data=point(1, 2.0) + point(2, 1.0)))

    def snapshot(self) -> dict:
        return {"version": self.version, "hosts": [], "jobs": [self.view.summary()]}

    def job_detail(self, job_id: str, since: int = 0) -> dict | None:
        return self.view.detail(since) if job_id == self.view.id else None

    def cancel(self, job_id: str) -> StateRecord:
        self.cancelled.append(job_id)
        return StateRecord(JobState.CANCELLED, reason="cancelled by user")


def serve_app(lab: StandInLab, password: str | None = None) -> Iterator[tuple[str, StandInLab]]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    names = webapp.host_names("127.0.0.1", sock.getsockname()[1])
    app = webapp.create_app(lab, names=names, allow_cancel=True, token="t0k", password=password)  # type: ignore[arg-type]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    until = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < until
        time.sleep(0.05)
    yield url, lab
    server.should_exit = True
    thread.join(10)


@pytest.fixture
def served() -> Iterator[tuple[str, StandInLab]]:
    yield from serve_app(StandInLab())


def fetch(url: str, method: str = "GET", headers: dict | None = None) -> tuple[int, bytes, dict]:
    request = urllib.request.Request(
        url, method=method, headers=headers or {}, data=b"" if method == "POST" else None
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def test_the_page_and_its_scripts_come_from_the_package_only(served: tuple[str, StandInLab]) -> None:
    url, _ = served
    status, body, headers = fetch(url + "/")
    assert status == 200 and b'<script src="/static/plotly.min.js">' in body
    assert b'"token": "t0k"' in body and "default-src 'self'" in headers["content-security-policy"]
    assert b"http://" not in body and b"https://" not in body  # no CDN, no other site
    status, body, _ = fetch(url + "/static/plotly.min.js")
    assert status == 200 and len(body) > 1_000_000 and b"plotly.js" in body[:300]
    assert fetch(url + "/static/dashboard.js")[0] == 200
    assert fetch(url + "/static/..%2Fapp.py")[0] == 404
    assert json.loads(fetch(url + "/api/jobs/demo-1?since=1")[1])["steps"] == [2]


def test_events_carry_the_lab_and_the_chosen_jobs_points(served: tuple[str, StandInLab]) -> None:
    url, _ = served
    with urllib.request.urlopen(url + "/events?job=demo-1", timeout=10) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [r.readline().decode().strip() for _ in range(6)]
    assert lines[0] == "event: lab" and json.loads(lines[1][6:])["jobs"][0]["id"] == "demo-1"
    assert lines[3] == "event: job" and json.loads(lines[4][6:])["loss"] == [2.0, 1.0]


def test_cancel_is_refused_cross_site_and_done_from_the_page(served: tuple[str, StandInLab]) -> None:
    url, lab = served
    cancel = url + "/api/jobs/demo-1/cancel"
    origin = url
    assert fetch(cancel, "POST", {"Origin": "http://evil.example", "X-Radeonlab-Token": "t0k"})[0] == 403
    assert fetch(cancel, "POST", {"Origin": origin})[0] == 403
    assert fetch(cancel, "GET")[0] == 405
    assert lab.cancelled == []
    status, body, _ = fetch(cancel, "POST", {"Origin": origin, "X-Radeonlab-Token": "t0k"})
    assert status == 200 and json.loads(body)["state"] == "cancelled" and lab.cancelled == ["demo-1"]


def test_a_request_for_another_name_is_refused_on_every_route(served: tuple[str, StandInLab]) -> None:
    """DNS rebinding: a page of evil.example whose name now resolves to 127.0.0.1 is 'same origin' with
    itself; its requests say `Host: evil.example:PORT`. None gets the page (and its cancel token), the lab, a
    job's log tail, or a cancel; the dashboard's own names still work, cancel with the token included."""
    url, lab = served
    port = url.rsplit(":", 1)[1]
    foreign = {"Host": f"evil.example:{port}"}
    for path in ("/", "/api/lab", "/api/jobs/demo-1", "/static/dashboard.js", "/events"):
        status, body, _ = fetch(url + path, headers=foreign)
        assert status == 421 and b"t0k" not in body and b"demo-1" not in body, path
    rebound = {**foreign, "Origin": f"http://evil.example:{port}", "X-Radeonlab-Token": "t0k"}
    assert fetch(url + "/api/jobs/demo-1/cancel", "POST", rebound)[0] == 421
    assert lab.cancelled == []
    for name in ("127.0.0.1", "localhost"):
        own = {"Host": f"{name}:{port}"}
        assert fetch(url + "/", headers=own)[0] == 200
        page = {**own, "Origin": f"http://{name}:{port}", "X-Radeonlab-Token": "t0k"}
        status, body, _ = fetch(url + "/api/jobs/demo-1/cancel", "POST", page)
        assert status == 200, body
    assert lab.cancelled == ["demo-1", "demo-1"]
    assert webapp.host_names("192.168.1.9", 8686) >= {"192.168.1.9:8686", "127.0.0.1:8686", "[::1]:8686"}
    assert "0.0.0.0:8686" not in webapp.host_names("0.0.0.0", 8686)


def test_with_a_password_every_route_needs_it() -> None:
    lab = StandInLab()
    served_app = serve_app(lab, password="hunter2")
    url, _ = next(served_app)
    try:
        status, _, headers = fetch(url + "/")
        assert status == 401 and headers["www-authenticate"].startswith("Basic")
        wrong = {"Authorization": "Basic " + base64.b64encode(b"me:nope").decode()}
        assert fetch(url + "/api/lab", headers=wrong)[0] == 401
        good = {"Authorization": "Basic " + base64.b64encode(b"me:hunter2").decode()}
        assert fetch(url + "/api/lab", headers=good)[0] == 200
        page = {"Origin": url, "X-Radeonlab-Token": "t0k"}
        assert fetch(url + "/api/jobs/demo-1/cancel", "POST", page)[0] == 401
        status, _, _ = fetch(url + "/api/jobs/demo-1/cancel", "POST", {**good, **page})
        assert status == 200 and lab.cancelled == ["demo-1"]
    finally:
        served_app.close()


def test_cancel_beyond_loopback_without_a_password_does_not_start(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from radeonlab.cli import main

    monkeypatch.delenv("RADEONLAB_DASHBOARD_PASSWORD", raising=False)
    args = ["dashboard", "--bind", "0.0.0.0", "--allow-cancel", "-i", "nowhere.py"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "RADEONLAB_DASHBOARD_PASSWORD" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_read_only_by_default() -> None:
    page = webapp.page(False, "secret-token")
    assert '"allowCancel": false' in page and "secret-token" not in page
    assert "</script><" not in webapp.page(True, "</script><b>").split('type="application/json">')[1][:40]


def test_a_host_that_cannot_be_reached_is_shown_so_and_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from radeonlab.dashboard import poller
    from radeonlab.jobs.fleet.inventory import HostTarget

    monkeypatch.setitem(poller.POLL, "reconnect_s", 0.2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])  # closed again once the block ends: connection refused
    target = HostTarget("ws9", "127.0.0.1", port)
    lab = poller.Lab("inv.py", {"ws9": target}, [target])
    assert lab.snapshot()["hosts"][0]["error"] == "not asked yet"
    lab.start()
    try:
        until = time.monotonic() + 10
        while "cannot reach ws9" not in str(lab.snapshot()["hosts"][0]["error"]):
            assert time.monotonic() < until, lab.snapshot()
            time.sleep(0.05)
        first = lab.version
        until = time.monotonic() + 10
        while lab.version == first:  # asked again (every reconnect_s), not given up on
            assert time.monotonic() < until
            time.sleep(0.05)
    finally:
        lab.stop()
    row = lab.snapshot()["hosts"][0]
    assert row["host"] == "ws9" and row["reachable"] is False and lab.snapshot()["jobs"] == []

"""`radeonlab dashboard` in a real browser: headless Chromium (Debian's, driven by Playwright) against two
SIMULATED workstations, one training the tiny model (CPU torch standing in for ROCm torch), one bare.

The page lists both hosts and the job, the job's chart gains points by itself, the chart saves as SVG and PNG,
a stopped host shows as unreachable while the other keeps updating, a cross-site form POST to cancel is
refused (the job runs on), and the page's own cancel button works. Screenshots and the saved charts are kept
in the test's output folder (printed)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

from radeonlab.cli import main
from radeonlab.sandbox import demodata, tinymodel
from radeonlab.sandbox.demo import write_spec
from radeonlab.sandbox.hosts import Sandbox, SandboxHost
from radeonlab.sandbox.provision import SHARED_TRAINER, shared_trainer

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
INVENTORY = str(REPO / "inventories/sandbox.py")
BARE = "dash2"
JOBS_DIR = "/home/lab/radeonlab/jobs"
CHROMIUM = "/usr/bin/chromium"
FLAGS = [  # what works here (no GPU, no network beyond loopback)
    *("--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"),
    *("--disable-background-networking", "--disable-component-update", "--disable-sync"),
]
GAINS_WITHIN_S = 15.0


@dataclass
class Lab:
    trainer: SandboxHost
    bare: SandboxHost
    job_id: str
    url: str
    out: Path
    env: dict[str, str]


def job_state(host: SandboxHost, job_id: str) -> str:
    return json.loads(host.exec(["cat", f"{JOBS_DIR}/{job_id}/state.json"]).stdout)["state"]


@pytest.fixture(scope="module")
def lab(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: scripts/bootstrap.sh installs Debian's chromium")
    trainer = shared_trainer(sandbox).host
    bare = sandbox.create_host(BARE, card="rx9070xt")  # reachable, not provisioned
    work = tmp_path_factory.mktemp("dashboard")
    out = work / "output"
    out.mkdir()
    print(f"\ndashboard test output: {out}")
    data = demodata.write_dataset(work / "data")
    tinymodel.build_model(work / "tiny-llama", data)
    env = {"RADEONLAB_SANDBOX_DIR": str(sandbox.state_dir), "RADEONLAB_HOME": str(work / "laptop")}
    spec = write_spec(work, {"max_steps": 5000, "save_steps": 5000}, name="long.yaml")
    submitted = CliRunner().invoke(
        main, ["submit", str(spec), "-i", INVENTORY, "--host", SHARED_TRAINER], env=env
    )
    assert submitted.exit_code == 0, submitted.output
    job_id = re.search(r"submitted (\S+) to", submitted.stdout).group(1)  # type: ignore[union-attr]
    argv = [str(Path(sys.executable).with_name("radeonlab")), "dashboard", "--port", "0", "--allow-cancel",
            "-i", INVENTORY, "--limit", f"{SHARED_TRAINER},{BARE}"]  # fmt: skip
    with open(out / "dashboard.log", "w") as log:
        server = subprocess.Popen(
            argv, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=log, text=True
        )
    try:
        line = server.stdout.readline()  # type: ignore[union-attr]
        match = re.search(r"(http://127\.0\.0\.1:\d+/) \(cancel allowed", line)
        assert match, line + (out / "dashboard.log").read_text()
        yield Lab(trainer, bare, job_id, match.group(1), out, env)
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
        if job_state(trainer, job_id) in ("queued", "running"):
            CliRunner().invoke(main, ["cancel", job_id, "-i", INVENTORY], env=env)
        sandbox.destroy_host(BARE)


@pytest.fixture(scope="module")
def page(lab: Lab) -> Iterator:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        context = browser.new_context(accept_downloads=True, viewport={"width": 1280, "height": 1400})
        page = context.new_page()
        page.on("dialog", lambda dialog: dialog.accept())  # the cancel button's "are you sure?"
        page.goto(f"{lab.url}#job={lab.job_id}")
        yield page
        browser.close()


def points(page) -> int:  # noqa: ANN001 - a playwright Page
    return int(
        page.evaluate(
            "() => { const c = document.getElementById('chart'); return c.data ? c.data[0].x.length : 0; }"
        )
    )


def gains(page, within: float = GAINS_WITHIN_S) -> tuple[int, int]:  # noqa: ANN001
    """(points now, points once the chart has more), failing after `within` seconds."""
    before = points(page)
    page.wait_for_function(
        f"() => document.getElementById('chart').data[0].x.length > {before}", timeout=within * 1000
    )
    return before, points(page)


def test_both_hosts_and_the_running_job_are_listed_and_the_chart_gains_points(page, lab: Lab) -> None:  # noqa: ANN001
    page.wait_for_selector(f'#hosts tr[data-host="{SHARED_TRAINER}"][data-reachable="true"]', timeout=60_000)
    page.wait_for_selector(f'#hosts tr[data-host="{BARE}"][data-reachable="true"]', timeout=60_000)
    assert "no host record" in page.inner_text(f'#hosts tr[data-host="{BARE}"]')
    assert "RX 7900 XTX" in page.inner_text(f'#hosts tr[data-host="{SHARED_TRAINER}"]')
    page.wait_for_selector(f'#jobs tr[data-job="{lab.job_id}"][data-state="running"]', timeout=120_000)
    page.wait_for_function(
        "() => (document.getElementById('chart').data || [{x: []}])[0].x.length > 0", timeout=180_000
    )  # fmt: skip  (the first logged step: torch's start on the host)
    before, after = gains(page)
    print(f"\nchart: {before} -> {after} points within {GAINS_WITHIN_S:.0f} s")
    assert lab.job_id in page.inner_text("#job-title")
    assert page.inner_text("#job-gpus").strip()  # the job's GPU readings
    assert page.inner_text("#job-log").strip()  # the log tail
    page.screenshot(path=str(lab.out / "dashboard.png"), full_page=True)


def test_the_chart_saves_as_svg_and_png(page, lab: Lab) -> None:  # noqa: ANN001
    for fmt, magic in (("svg", b"<svg"), ("png", b"\x89PNG")):
        with page.expect_download(timeout=30_000) as download:
            page.click(f"#save-{fmt}")
        path = lab.out / f"chart.{fmt}"
        download.value.save_as(str(path))
        assert path.read_bytes().startswith(magic), path
        assert path.stat().st_size > 2000
    assert "loss" in (lab.out / "chart.svg").read_text()


def test_a_stopped_host_shows_unreachable_and_the_other_keeps_updating(page, lab: Lab) -> None:  # noqa: ANN001
    lab.bare.stop()
    row = f'#hosts tr[data-host="{BARE}"][data-reachable="false"]'
    page.wait_for_selector(row, timeout=60_000)
    assert "unreachable" in page.inner_text(row)
    before, after = gains(page)
    assert after > before
    assert page.locator(f'#hosts tr[data-host="{SHARED_TRAINER}"][data-reachable="true"]').count() == 1
    page.screenshot(path=str(lab.out / "dashboard-host-down.png"), full_page=True)


class _CrossSite:
    """Another site on another port, whose page auto-submits a form POST to the dashboard's cancel."""

    def __init__(self, target: str) -> None:
        html = (f'<form id="f" method="POST" action="{target}"></form>'
                '<script>document.getElementById("f").submit()</script>').encode()  # fmt: skip

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(html)))
                self.end_headers()
                self.wfile.write(html)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.2", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.2:{self.server.server_address[1]}/"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_cross_site_post_to_cancel_is_refused_and_the_page_cancels(page, lab: Lab) -> None:  # noqa: ANN001
    cancel = f"{lab.url}api/jobs/{lab.job_id}/cancel"
    evil = _CrossSite(cancel)
    try:
        other = page.context.new_page()
        response = other.goto(evil.url)
        other.wait_for_url(cancel, timeout=15_000)  # the browser did send the POST...
        assert "cross-site request from http://127.0.0.2" in other.content()  # ...and it was refused
        other.close()
    finally:
        evil.close()
    try:
        urllib.request.urlopen(urllib.request.Request(cancel, data=b"", method="POST"), timeout=10)
        raise AssertionError("a POST without Origin and token was accepted")
    except urllib.error.HTTPError as e:
        assert e.code == 403
    time.sleep(2)
    assert job_state(lab.trainer, lab.job_id) == "running"
    assert response is not None
    page.click(f'button[data-cancel="{lab.job_id}"]')
    page.wait_for_selector(f'#jobs tr[data-job="{lab.job_id}"][data-state="cancelled"]', timeout=60_000)
    assert job_state(lab.trainer, lab.job_id) == "cancelled"

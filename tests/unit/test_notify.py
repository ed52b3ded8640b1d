"""Notifications without a workstation: the spec's `notify`, the secret it becomes, the messages, and the two
host-side halves (jobs/host/notify_messenger.py on the system python, jobs/host/notify_send.py with Apprise)
sending to a webhook sink on loopback, in order, with retries, never quoting a URL."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from radeonlab.contract.state import EndReason
from radeonlab.jobs.apply import secrets
from radeonlab.jobs.host import notify_messenger as notifier
from radeonlab.jobs.host import notify_send as notify
from radeonlab.jobs.spec.block import parse_block
from radeonlab.jobs.ssh import hostcode
from tests.support.notify_sink import Sink

TOKEN = "tk_5ecr3t_notify_token"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- the spec and the secret -------------------------------------------------------------------------------
def test_notify_in_the_block_takes_a_list_or_one_url_and_never_quotes_a_bad_one() -> None:
    problems: list[tuple[int, str]] = []
    assert parse_block({"notify": ["ntfys://topic", "json://h/x"]}, {}, problems).notify == [
        "ntfys://topic",
        "json://h/x",
    ]
    assert parse_block({"notify": "ntfys://topic"}, {}, problems).notify == ["ntfys://topic"]
    assert parse_block({}, {}, problems).notify is None  # absent: the inventory's default applies
    assert parse_block({"notify": []}, {}, problems).notify == []  # off, whatever the inventory says
    assert problems == []
    block = parse_block({"notify": ["no-scheme-" + TOKEN, 3]}, {"radeonlab.notify.0": 7}, problems)
    assert block.notify == []
    assert [line for line, _ in problems] == [7, 1]
    assert "notify item 1 is not an Apprise URL" in problems[0][1]
    assert all(TOKEN not in message for _, message in problems)


def test_the_spec_wins_over_the_inventory_and_the_urls_travel_as_one_secret() -> None:
    host = {"radeonlab_notify": ["json://inventory/" + TOKEN]}
    assert secrets.notify_urls(None, host) == ["json://inventory/" + TOKEN]
    assert secrets.notify_urls(["ntfys://spec"], host) == ["ntfys://spec"]
    assert secrets.notify_urls([], host) == []
    assert secrets.notify_urls(None, {"radeonlab_notify": "ntfys://one"}) == ["ntfys://one"]
    assert secrets.notify_secret(None, {}) == {}
    assert secrets.notify_secret(None, host) == {
        "RADEONLAB_NOTIFY_URLS": json.dumps(["json://inventory/" + TOKEN])
    }


# --- what a message says -----------------------------------------------------------------------------------
def test_messages_name_the_job_and_host_and_every_end_maps_to_one_event() -> None:
    m = notifier.message("remedy", "demo-1", "ws1", {"attempt": 2, "cause": "NaN at step 3", "x": None})
    assert m["title"] == "radeonlab demo-1 on ws1: remedy taken"
    assert m["fields"] == {"job": "demo-1", "host": "ws1", "attempt": 2, "cause": "NaN at step 3"}
    assert notifier.end_event(EndReason.SUCCEEDED) == "succeeded"
    assert notifier.end_event(EndReason.CANCELLED) == "cancelled"
    ends = {notifier.end_event(e) for e in EndReason if e not in (EndReason.SUCCEEDED, EndReason.CANCELLED)}
    assert ends == {"failed"}
    assert [notifier.duration(s) for s in (41, 192, 3720)] == ["41s", "3m12s", "1h02m"]
    assert "attempt: 2" in notify.body_text(m) and "x:" not in notify.body_text(m)


def test_a_success_reports_loss_tokens_and_the_adapter_and_a_failure_the_log_tail(tmp_path: Path) -> None:
    out = tmp_path / "output"
    out.mkdir()
    lines = [{"current_steps": 1, "loss": 2.5, "throughput": 100.0}, {"current_steps": 2, "loss": 1.23456}]
    (out / "trainer_log.jsonl").write_text("".join(json.dumps(p) + "\n" for p in lines) + '{"cut')
    fields = notifier.result_fields(str(tmp_path))
    assert fields == {"adapter": str(out), "final_loss": 1.2346, "tokens_per_s": 100.0}
    (out / "train_results.json").write_text(json.dumps({"effective_tokens_per_sec": 321.04}))
    assert notifier.result_fields(str(tmp_path))["tokens_per_s"] == 321.0
    (tmp_path / "train.log").write_text(
        "".join(f"line {i}\n" for i in range(40)) + "\n\nRuntimeError: boom\n"
    )
    tail = notifier.last_log_lines(str(tmp_path), 3).splitlines()
    assert tail == ["line 38", "line 39", "RuntimeError: boom"]


# --- jobs/host/notify_send.py (Apprise) ---------------------------------------------------------------------
def test_urls_come_as_a_json_list_or_words_and_logs_name_only_the_scheme() -> None:
    assert notify.parse_urls('["json://a/b", " ntfys://t "]') == ["json://a/b", "ntfys://t"]
    assert notify.parse_urls("json://a/b  ntfys://t\n") == ["json://a/b", "ntfys://t"]
    assert notify.parse_urls("  ") == []
    assert notify.scheme("ntfys://" + TOKEN) == "ntfys"
    assert notify.scheme(TOKEN) == "?"


def test_each_url_gets_a_few_tries_with_a_growing_pause() -> None:
    calls, pauses = [], []

    def flaky(url: str, message: dict, timeout: float) -> bool:
        calls.append(url)
        if "boom" in url:
            raise RuntimeError("plugin bug")
        return url.endswith("ok") or len([c for c in calls if c == url]) == 3

    outcomes = notify.deliver(
        ["json://a/ok", "json://b/third", "json://c/boom"],
        {"event": "started"},
        attempts=3,
        timeout=1.0,
        backoff=2.0,
        sleep=pauses.append,
        send=flaky,
    )
    assert [(o["url"], o["ok"], o["tries"]) for o in outcomes] == [(1, True, 1), (2, True, 3), (3, False, 3)]
    assert pauses == [2.0, 4.0, 2.0, 4.0]
    assert all(TOKEN not in json.dumps(o) for o in outcomes)


def run_notify(urls: list[str], messages: list[dict], *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, notify.ENV: json.dumps(urls)}
    stdin = "".join(json.dumps(m) + "\n" for m in messages)
    return subprocess.run(
        [sys.executable, "-m", "radeonlab.jobs.host.notify_send", *extra],
        input=stdin,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_tool_posts_each_message_to_a_json_webhook_in_order() -> None:
    with Sink() as sink:
        messages = [
            notifier.message(e, "demo-1", "ws1", {"n": i}) for i, e in enumerate(("started", "failed"))
        ]
        done = run_notify([sink.url(TOKEN)], messages)
    assert done.returncode == 0, done.stderr
    assert sink.titles() == ["radeonlab demo-1 on ws1: started", "radeonlab demo-1 on ws1: FAILED"]
    assert [m["type"] for m in sink.received] == ["info", "failure"]
    assert "n: 1" in sink.received[1]["message"]
    assert sink.paths == [f"/hook/{TOKEN}"] * 2  # the URL's path (its token) was used...
    assert TOKEN not in done.stdout + done.stderr  # ...and never printed
    assert [json.loads(ln)["ok"] for ln in done.stdout.splitlines()] == [True, True]


def test_a_sink_that_is_down_costs_the_retries_and_exit_1_only() -> None:
    url = f"json://127.0.0.1:{closed_port()}/hook/{TOKEN}"
    done = run_notify([url], [{"event": "started", "title": "t"}], "--attempts", "2", "--backoff", "0.1")
    assert done.returncode == 1
    assert json.loads(done.stdout) == {
        "event": "started",
        "url": 1,
        "scheme": "json",
        "ok": False,
        "tries": 2,
    }
    assert "url 1 (json) NOT delivered after 2 tries" in done.stderr
    assert TOKEN not in done.stdout + done.stderr and "127.0.0.1" not in done.stderr


# --- jobs/host/notify_messenger.py (the supervisor's side) -----------------------------------------------
@pytest.fixture
def shipped(tmp_path: Path) -> Path:
    """radeonlab's host code as a job folder holds it (<job>/host), what the messenger runs from."""
    for rel, data in hostcode.files().items():
        path = tmp_path / "job" / "host" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return tmp_path / "job"


def job_notifier(job_dir: Path, urls: list[str], python: str = sys.executable, rank: int = 0):
    env = {notifier.ENV: json.dumps(urls), "PATH": os.environ["PATH"]}
    job = SimpleNamespace(id="demo-1", host="ws1", rank=rank)
    made = notifier.Notifier.for_job(str(job_dir), job, env, python)
    assert notifier.ENV not in env  # taken out of the training environment
    return made


def test_the_supervisor_side_sends_in_order_once_each_and_the_last_message_after_it_closed(
    shipped: Path,
) -> None:
    with Sink() as sink:
        n = job_notifier(shipped, [sink.url(TOKEN)])
        for event in ("started", "first_step", "first_step", "started"):
            n.send(event, step=1)
        n.send("remedy", attempt=2, cause="NaN at step 2")
        n.finished(EndReason.SUCCEEDED, None, 2)
        sink.wait_for(lambda s: len(s.received) >= 4, 30, "four messages")
        time.sleep(0.5)  # nothing more arrives
    events = [t.split(": ", 1)[1] for t in sink.titles()]
    assert events == ["started", "first step logged", "remedy taken", "succeeded"]
    assert "duration:" in sink.received[-1]["message"] and "adapter:" in sink.received[-1]["message"]


def test_nothing_the_messenger_meets_reaches_the_job(shipped: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    down = f"json://127.0.0.1:{closed_port()}/hook/{TOKEN}"
    # with 60 s between tries the messenger needs minutes for these messages: the job must not wait for it
    monkeypatch.setitem(notifier.NOTIFY, "backoff_s", 60.0)
    t0 = time.monotonic()
    slow = job_notifier(shipped, [down])
    for event in ("started", "first_step", "remedy"):
        slow.send(event)
    slow.finished(EndReason.TRAINING_FAILED, "exit 1", 1)
    assert time.monotonic() - t0 < 30  # a deadline well under one backoff: nothing waited for the retries
    assert slow.proc is not None and slow.proc.poll() is None  # still retrying, on its own
    slow.proc.kill()
    slow.proc.wait(timeout=30)
    monkeypatch.setitem(notifier.NOTIFY, "backoff_s", 0.1)
    n = job_notifier(shipped, [down])
    n.send("started")
    n.finished(EndReason.TRAINING_FAILED, "exit 1", 1)
    assert n.proc is not None and n.proc.wait(timeout=120) == 1  # it tried, then gave up on its own
    missing = job_notifier(shipped, [down], python="/nonexistent/venv/bin/python")
    missing.send("started")  # no venv python: notifications off, no exception
    assert missing.broken and not missing.enabled
    silent = job_notifier(shipped, [down], rank=1)  # multi-node: rank 0 alone notifies
    silent.send("started")
    assert silent.proc is None

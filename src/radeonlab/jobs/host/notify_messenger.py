"""The supervisor's side of notifications: what each message says, and one messenger process per job run.

Standard library only (the supervisor runs on the host's system python3). The sending itself is
jobs/host/notify_send.py in the training venv (it imports apprise). The first message of a job run starts it
once, detached in its own session, with the URLs in its environment (RADEONLAB_NOTIFY_URLS, taken out of the
training environment here, so llamafactory-cli never sees them), its stdout discarded and its stderr on the
launcher's own log (launcher.log). Each message is one JSON line on its stdin: messages are sent in order, and
nothing here waits for a service. When the launcher ends, the pipe closes and the messenger sends what is left
(the final message included: the launcher does not wait for it), then exits. A messenger that cannot
start or has died only costs the notifications: the job goes on.

Multi-node jobs notify from rank 0 only. URLs never reach argv, job.json, state.json or a log line.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from radeonlab.contract.jobdir import FILES
from radeonlab.contract.state import EndReason

# (argv, env, what) -> the (argv, env) that run it in the host's runtime (jobs/host/runtime.py)
Wrap = Callable[[list[str], dict[str, str], str], tuple[list[str], dict[str, str]]]

# the secret's name: jobs/apply and jobs/track (laptop) and jobs/host/notify_send.py use it too
ENV = "RADEONLAB_NOTIFY_URLS"
NOTIFY: dict[str, float] = {
    "attempts": 3,  # tries per URL and message (jobs/host/notify_send.py)
    "timeout_s": 10.0,  # one try
    "backoff_s": 5.0,  # before the second try, doubled before each next one
    "log_lines": 12,  # how much of train.log a failure message quotes
    "log_tail_bytes": 16384,
}
ONCE = ("started", "first_step")  # sent once per job run, however many attempts it takes
TITLES = {
    "started": "started",
    "first_step": "first step logged",
    "remedy": "remedy taken",
    "succeeded": "succeeded",
    "failed": "FAILED",
    "cancelled": "cancelled",
    "test": "test message",
}


def end_event(end: EndReason) -> str:
    """The message an end sends: succeeded, cancelled, or failed (every other reason)."""
    if end is EndReason.SUCCEEDED:
        return "succeeded"
    return "cancelled" if end is EndReason.CANCELLED else "failed"


def duration(seconds: float) -> str:
    """1h02m, 3m12s, 41s."""
    s = int(seconds)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def message(event: str, job_id: str, host: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """One message: a title that names the job and what happened, a short body, the fields as they are."""
    title = f"radeonlab {job_id} on {host}: {TITLES.get(event, event)}"
    body = {
        "started": "The job left the queue and training starts.",
        "first_step": "Training logged its first step.",
        "remedy": "A remedy was taken and a new attempt starts.",
        "succeeded": "Training finished and its adapter or model was written.",
        "failed": "The job failed.",
        "cancelled": "The job was cancelled.",
    }.get(event, "")
    clean = {k: v for k, v in fields.items() if v is not None}
    return {"event": event, "title": title, "body": body, "fields": {"job": job_id, "host": host, **clean}}


def _tail(path: str, size: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - size))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def last_log_lines(job_dir: str, n: int | None = None) -> str:
    """The last non-empty lines of train.log (a failure's message shows them)."""
    n = int(NOTIFY["log_lines"]) if n is None else n
    text = _tail(os.path.join(job_dir, FILES["train_log"]), int(NOTIFY["log_tail_bytes"]))
    lines = [ln.rstrip() for ln in text.replace("\r", "\n").splitlines() if ln.strip()]
    return "\n".join(lines[-n:])


def result_fields(job_dir: str) -> dict[str, Any]:
    """What a success message reports: final loss, tokens/s, where the adapter is (host paths)."""
    out: dict[str, Any] = {"adapter": os.path.join(job_dir, FILES["output"])}
    last_loss, tps = None, None
    for line in _tail(os.path.join(job_dir, FILES["trainer_log"]), 1 << 16).splitlines():
        try:
            point = json.loads(line)
        except ValueError:
            continue
        if isinstance(point, dict) and isinstance(point.get("loss"), int | float):
            last_loss = point["loss"]
        if isinstance(point, dict) and isinstance(point.get("throughput"), int | float):
            tps = point["throughput"]
    try:
        with open(os.path.join(job_dir, FILES["output"], "train_results.json")) as f:
            results = json.load(f)
    except (OSError, ValueError):
        results = {}
    effective = results.get("effective_tokens_per_sec") if isinstance(results, dict) else None
    rate = effective or tps
    out["final_loss"] = round(last_loss, 4) if last_loss is not None else None
    out["tokens_per_s"] = round(float(rate), 1) if rate else None
    return out


class Notifier:
    """Sends one job run's messages through one messenger process (see the module docstring)."""

    def __init__(
        self,
        urls: str,
        python: str,
        code_dir: str,
        job_dir: str,
        job_id: str,
        host: str,
        wrap: Wrap | None = None,
    ) -> None:
        self.urls, self.python, self.code_dir = urls, python, code_dir
        self.wrap = wrap  # runs the messenger in the host's runtime (the supervisor's in_runtime)
        self.job_dir, self.job_id, self.host = job_dir, job_id, host
        self.sent: set[str] = set()
        self.began = time.monotonic()
        self.proc: subprocess.Popen | None = None
        self.broken = False

    @classmethod
    def for_job(
        cls, job_dir: str, job: Any, env: dict[str, str], python: str, wrap: Wrap | None = None
    ) -> Notifier:
        """The job's notifier; takes the URLs out of `env` (the training environment). `python`: the training
        stack's (the venv's, or the image's run through `wrap`). Rank > 0 of a multi-node job: silent."""
        urls = env.pop(ENV, "")
        if job.rank > 0:
            urls = ""
        return cls(urls, python, os.path.join(job_dir, FILES["code"]), job_dir, job.id, job.host, wrap)

    @property
    def enabled(self) -> bool:
        return bool(self.urls.strip()) and not self.broken

    def fields_for(self, event: str, fields: dict[str, Any]) -> dict[str, Any]:
        if event == "succeeded":
            fields = {**result_fields(self.job_dir), **fields, "reason": None}
        if event == "failed":
            fields = {**fields, "log": last_log_lines(self.job_dir)}
        if event in ("succeeded", "failed", "cancelled"):
            fields = {**fields, "duration": duration(time.monotonic() - self.began)}
        return fields

    def send(self, event: str, **fields: Any) -> None:
        """Queue one message (never raises, never waits for a service)."""
        if not self.enabled or (event in ONCE and event in self.sent):
            return
        self.sent.add(event)
        line = json.dumps(message(event, self.job_id, self.host, self.fields_for(event, fields)))
        try:
            proc = self.proc or self.start()
            assert proc.stdin is not None
            proc.stdin.write(line + "\n")
            proc.stdin.flush()
        except (OSError, ValueError, AssertionError) as exc:  # no venv python, the messenger died...
            self.broken = True
            print(f"radeonlab notify: notifications off for this run: {exc}", file=sys.stderr, flush=True)

    def start(self) -> subprocess.Popen:
        argv = [self.python, "-m", "radeonlab.jobs.host.notify_send"]
        argv += ["--attempts", str(int(NOTIFY["attempts"])), "--timeout", str(NOTIFY["timeout_s"])]
        argv += ["--backoff", str(NOTIFY["backoff_s"])]
        env = {**os.environ, "PYTHONPATH": self.code_dir, ENV: self.urls}
        if self.wrap is not None:
            argv, env = self.wrap(argv, env, "notify")
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,  # stderr: inherited, the launcher's launcher.log
            env=env,
            text=True,
            start_new_session=True,  # outlives the launcher: the last message is still sent
            close_fds=True,  # no GPU lock fds: a slow service must not hold the GPU
        )
        return self.proc

    def finished(self, end: EndReason, reason: str | None, attempt: int | None) -> None:
        """The job's last message (succeeded, failed or cancelled); then the pipe closes."""
        self.send(end_event(end), reason=reason or end.message, attempt=attempt)
        self.close()

    def close(self) -> None:
        """No more messages: the messenger sends what it has and exits on its own."""
        if self.proc is not None and self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()

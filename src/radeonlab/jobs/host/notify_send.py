"""Send a job's notifications from the workstation with Apprise (ntfy, Discord, Slack, Matrix, e-mail, JSON
webhooks...), so they arrive while the laptop sleeps.

Runs on the workstation with the TRAINING VENV's python (apprise is installed there by roles/python_stack);
the other jobs/host modules run on the system python3 with the stdlib alone. The supervisor starts it once
per job run through jobs/host/notify_messenger.py; `radeonlab notify-test` runs it with one message.

    RADEONLAB_NOTIFY_URLS='["json://...", "ntfys://..."]' python -m radeonlab.jobs.host.notify_send \
        [--attempts N] [--timeout S] [--backoff S] < messages

Messages: one JSON object per stdin line, {"event", "title", "body", "fields": {...}}, sent in order until
stdin ends (one line is one message). Each message goes to every URL, with up to --attempts tries per URL
(--backoff seconds, doubling, between them; --timeout seconds each). Per URL one JSON line on stdout:
{"event", "url": n, "scheme", "ok", "tries"}; one line for people on stderr (the launcher's launcher.log).

The URLs are secrets (tokens inside): they come from the environment only (a JSON list, or URLs separated
by whitespace), never from argv; what this prints names a URL only by its position and scheme; Apprise's own
log, which may quote a URL, is switched off.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import Any

import apprise

ENV = "RADEONLAB_NOTIFY_URLS"
DEFAULTS: dict[str, float] = {
    "attempts": 3,  # tries per URL and message
    "timeout_s": 10.0,  # seconds one try may take (Apprise's own connect/read timeouts are 4 s each)
    "backoff_s": 2.0,  # before the second try; doubled before each next one
}
TYPES = {  # event -> Apprise's message type (the icon/colour services show)
    "failed": apprise.NotifyType.FAILURE,
    "succeeded": apprise.NotifyType.SUCCESS,
    "remedy": apprise.NotifyType.WARNING,
    "cancelled": apprise.NotifyType.WARNING,
}


def parse_urls(text: str) -> list[str]:
    """The URLs of RADEONLAB_NOTIFY_URLS: a JSON list, or separated by whitespace."""
    text = text.strip()
    if not text:
        return []
    if text.startswith("["):
        return [str(u).strip() for u in json.loads(text) if str(u).strip()]
    return text.split()


def scheme(url: str) -> str:
    """What a log line may say about a URL: its scheme only (a host part can be a secret ntfy topic)."""
    head = url.split("://", 1)[0]
    return head if head.isidentifier() and "://" in url else "?"


def body_text(message: dict[str, Any]) -> str:
    """The body, then one `key: value` line per field (what a chat client shows)."""
    lines = [str(message.get("body") or "")]
    fields = message.get("fields") or {}
    if fields:
        lines += [""] + [f"{k}: {v}" for k, v in fields.items() if v not in (None, "", [], {})]
    return "\n".join(lines).strip()


def quiet_apprise() -> None:
    """Apprise logs the services' answers and sometimes the target URL: none of it goes anywhere."""
    log = logging.getLogger("apprise")
    log.handlers[:] = [logging.NullHandler()]
    log.propagate = False
    log.setLevel(logging.CRITICAL + 1)


def send_one(url: str, message: dict[str, Any], timeout: float) -> bool:
    """One try of one message to one URL; False when Apprise does not take the URL or the service refused."""
    sender = apprise.Apprise()
    if not sender.add(url):
        return False
    result = sender.notify(
        body=body_text(message) or str(message.get("event") or "radeonlab"),
        title=str(message.get("title") or ""),
        notify_type=TYPES.get(str(message.get("event")), apprise.NotifyType.INFO),
        timeout=timeout,
    )
    return bool(result)


def deliver(
    urls: list[str],
    message: dict[str, Any],
    *,
    attempts: int,
    timeout: float,
    backoff: float,
    sleep: Any = time.sleep,
    send: Any = send_one,
) -> list[dict[str, Any]]:
    """Send `message` to each URL with retries; one outcome per URL (no URL in it)."""
    out = []
    for n, url in enumerate(urls, 1):
        ok, tries, wait = False, 0, backoff
        while not ok and tries < attempts:
            if tries:
                sleep(wait)
                wait *= 2
            tries += 1
            try:
                ok = send(url, message, timeout)
            except Exception:  # a plugin's own bug must not stop the other URLs or messages
                ok = False
        out.append({"event": message.get("event"), "url": n, "scheme": scheme(url), "ok": ok, "tries": tries})
    return out


def log_line(outcome: dict[str, Any]) -> str:
    what = "sent" if outcome["ok"] else f"NOT delivered after {outcome['tries']} tries"
    return f"radeonlab notify: {outcome['event']}: url {outcome['url']} ({outcome['scheme']}) {what}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="radeonlab.jobs.host.notify_send", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--attempts", type=int, default=int(DEFAULTS["attempts"]))
    parser.add_argument("--timeout", type=float, default=DEFAULTS["timeout_s"])
    parser.add_argument("--backoff", type=float, default=DEFAULTS["backoff_s"])
    args = parser.parse_args(argv)
    quiet_apprise()
    try:
        urls = parse_urls(os.environ.get(ENV, ""))
    except ValueError:
        print(f"radeonlab notify: {ENV} is not a JSON list of URLs", file=sys.stderr, flush=True)
        return 2
    all_ok = True
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
        except ValueError:
            print("radeonlab notify: skipped a message that is not JSON", file=sys.stderr, flush=True)
            continue
        for outcome in deliver(
            urls, message, attempts=max(1, args.attempts), timeout=args.timeout, backoff=args.backoff
        ):
            all_ok = all_ok and outcome["ok"]
            print(json.dumps(outcome), flush=True)
            print(log_line(outcome), file=sys.stderr, flush=True)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())

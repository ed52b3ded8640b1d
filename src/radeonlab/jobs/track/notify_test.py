"""`radeonlab notify-test`: one message sent FROM a workstation, the way its jobs send theirs.

The host runs jobs/host/notify_send.py with its training venv's python (Apprise is installed there); the URLs
travel as the job secrets do: in the environment sent on the command's stdin (jobs/ssh/connection.py
`env_prologue`), never in argv. What comes back names each URL by its position and scheme only.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from datetime import UTC, datetime

from radeonlab.errors import InputError, RemoteCommandError
from radeonlab.jobs.apply import secrets
from radeonlab.jobs.fleet.inventory import HostTarget
from radeonlab.jobs.fleet.probe import read_host, require_record
from radeonlab.jobs.host.notify_messenger import ENV, message
from radeonlab.jobs.ssh.connection import connect

TIMEOUT_S = 120.0  # the tool's own retries (jobs/host/notify_send.py DEFAULTS) end well before this


@dataclass(frozen=True)
class Outcome:
    url: int  # position in the list (1-based): the URL itself is a secret
    scheme: str
    ok: bool
    tries: int


def trial_message(host: str) -> dict:
    sent_at = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    note = f"Sent by `radeonlab notify-test` from {socket.gethostname()} through {host} at {sent_at}."
    return {**message("test", "notify-test", host, {}), "body": note}


def send_test(target: HostTarget, inventory: str, urls: list[str]) -> list[Outcome]:
    """Send one test message from `target` to `urls` (empty: the host's radeonlab_notify)."""
    urls = urls or secrets.notify_urls(None, target.data)
    if not urls:
        raise InputError(
            f"{target.name}: no URL given and no {secrets.NOTIFY_HOST_KEY} in its inventory data "
            "(radeonlab notify-test URL --host H)"
        )
    with connect(target) as remote:
        record = require_record(read_host(remote, jobs="none"), inventory)
        result = remote.tool(
            "notify_send",
            python=f"{record.venv}/bin/python",
            env={ENV: json.dumps(urls)},
            stdin_text=json.dumps(trial_message(target.name)) + "\n",
            check=False,
            timeout=TIMEOUT_S,
        )
    outcomes = []
    for line in result.stdout.splitlines():
        try:
            data = json.loads(line)
        except ValueError:
            continue
        outcomes.append(Outcome(int(data["url"]), str(data["scheme"]), bool(data["ok"]), int(data["tries"])))
    if result.exit_code not in (0, 1) or len(outcomes) != len(urls):
        raise RemoteCommandError(
            f"{target.name}: the notification tool failed: {result.stderr_tail()} (is the host provisioned "
            "with this radeonlab's python_stack, which installs apprise?)",
            result,
        )
    return outcomes

"""Which environment variables are secrets, and which of them a job gets.

Secrets (tokens, keys, passwords) never go on a command line, into a log, job.json, state.json, config.yaml
or the laptop's SQLite: submit sends them on stdin into the job folder's `env.secret` (mode 0600), which the
host-side launcher reads and deletes before anything runs (jobs/host/launcher.py says how every attempt
still gets them). job.json records only their NAMES (`secret_names`), so `radeonlab resume` knows which to
send again.

A job's secrets:
- the spec's `radeonlab.env` entries whose names look secret (SECRET_NAME_PATTERNS) or whose values do (a URL
  with a password, a webhook URL, a known token shape: jobs/spec/tokens.py);
- from the laptop's environment, when set: FORWARDED_BY_DEFAULT (HF_TOKEN) and every name in the spec's
  `radeonlab.forward_env` list (forwarded the same way whatever the name looks like).
A value written in the spec wins over the laptop's environment (the spec is the more specific wish).

Notification URLs (Apprise URLs carry tokens) are a secret too: RADEONLAB_NOTIFY_URLS, a JSON list, from the
spec's `radeonlab.notify` or else the host's inventory data `radeonlab_notify` (`notify_secret`).
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from radeonlab.jobs.host.notify_messenger import ENV as NOTIFY_ENV
from radeonlab.jobs.spec.tokens import secret_shape

# Upper-cased names matching any of these are secrets (fnmatch patterns; data, not code).
SECRET_NAME_PATTERNS: tuple[str, ...] = (
    "*TOKEN*",
    "*KEY*",
    "*SECRET*",
    "*PASSWORD*",
    "*PASSWD*",
    "*CREDENTIAL*",
    "*WEBHOOK*",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "WANDB_API_KEY",
)
NOTIFY_HOST_KEY = "radeonlab_notify"  # inventory host data: the default notification URLs of jobs there
# Forwarded from the laptop's environment to every job when set (the hub's gated models need it).
FORWARDED_BY_DEFAULT: tuple[str, ...] = ("HF_TOKEN",)


def is_secret(name: str) -> bool:
    """A variable name that looks like it holds a secret."""
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, pattern) for pattern in SECRET_NAME_PATTERNS)


def split_env(env: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(plain, secret): plain entries may be recorded in job.json, secret ones go to env.secret only."""
    secret = {k: v for k, v in env.items() if is_secret(k) or secret_shape(v)}
    return {k: v for k, v in env.items() if k not in secret}, secret


def from_environment(names: Iterable[str], environ: Mapping[str, str]) -> dict[str, str]:
    """The named variables that are set (non-empty) in `environ`."""
    return {n: environ[n] for n in names if environ.get(n)}


def job_env(
    spec_env: Mapping[str, str], forward: Iterable[str], environ: Mapping[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """(plain env for job.json, secrets for env.secret) of one job.

    forward: the spec's radeonlab.forward_env names (added to FORWARDED_BY_DEFAULT). Forwarded variables are
    secrets wherever they come from; a forwarded name the spec also sets in its env keeps the spec's value.
    """
    plain, secret = split_env(spec_env)
    names = list(dict.fromkeys([*FORWARDED_BY_DEFAULT, *forward]))
    forwarded = from_environment([n for n in names if n not in spec_env], environ)
    for name in names:  # a forwarded name written in the spec's env is a secret too, never in job.json
        if name in plain:
            secret[name] = plain.pop(name)
    return plain, {**forwarded, **secret}


def notify_urls(spec_urls: Sequence[str] | None, host_data: Mapping[str, Any]) -> list[str]:
    """The URLs a job notifies: the spec's `radeonlab.notify` when it has one (an empty list: none), else
    the rank-0 host's `radeonlab_notify` (a list, or one URL)."""
    if spec_urls is not None:
        return [str(u) for u in spec_urls]
    default = host_data.get(NOTIFY_HOST_KEY) or []
    return [default] if isinstance(default, str) else [str(u) for u in default]


def notify_secret(spec_urls: Sequence[str] | None, host_data: Mapping[str, Any]) -> dict[str, str]:
    """{RADEONLAB_NOTIFY_URLS: JSON list} for env.secret, or {} when the job notifies nobody."""
    urls = notify_urls(spec_urls, host_data)
    return {NOTIFY_ENV: json.dumps(urls)} if urls else {}


class Secrets:
    """A job's secret values (for env.secret), kept apart from the plan's fields: `dataclasses.asdict` and
    `submit --dry-run --json` never meet them. repr names them only; a copy is the same object; pickling
    refuses. The values leave only through `values()`, into the stage request's stdin."""

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, str] | None = None) -> None:
        self._values = dict(values or {})

    def names(self) -> list[str]:
        return sorted(self._values)

    def values(self) -> dict[str, str]:
        return dict(self._values)

    def __contains__(self, name: object) -> bool:
        return name in self._values

    def __bool__(self) -> bool:
        return bool(self._values)

    def __repr__(self) -> str:
        return f"Secrets({', '.join(self.names())})"

    def __copy__(self) -> Secrets:
        return self

    def __deepcopy__(self, _memo: object) -> Secrets:
        return self

    def __reduce_ex__(self, _protocol: object) -> Any:
        raise TypeError("a job's secrets are not serialised (they go to the host on the stage's stdin)")

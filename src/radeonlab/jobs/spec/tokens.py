"""Credentials in a spec: LLaMA-Factory keys that carry a token, and values that look like one.

A job's config.yaml, config.json and job.json are plain files on the workstation (and `overrides` are kept
in job.json and the laptop's SQLite), so a token never goes there: it travels as a secret
(jobs/apply/secrets.py: stdin into env.secret, read and deleted by the launcher). `check` refuses the keys
below with the variable that carries the same credential, and any spec or override value shaped like one.
"""

from __future__ import annotations

import re

from radeonlab.jobs.spec.load import Spec
from radeonlab.jobs.spec.problems import ERROR, Problem

# LLaMA-Factory 0.9.5 / transformers keys whose value is a credential (lf_args.json lists them; the keys'
# help texts say "Auth token ...") -> the environment variable the library reads instead, when there is one.
# HF_TOKEN: huggingface_hub takes it when no token is passed (its documented environment variables), which
# is what from_pretrained and push_to_hub use. SWANLAB_API_KEY: SwanLab's documented login variable.
TOKEN_KEYS: dict[str, str | None] = {
    "hf_hub_token": "HF_TOKEN",
    "hub_token": "HF_TOKEN",
    "push_to_hub_token": "HF_TOKEN",  # transformers' deprecated spelling of hub_token
    "ms_hub_token": None,  # ModelScope: its SDK's own login (no variable verified here)
    "om_hub_token": None,  # Modelers (openMind): likewise
    "swanlab_api_key": "SWANLAB_API_KEY",
    "swanlab_lark_secret": None,  # the Lark bot's signing secret
    "swanlab_lark_webhook_url": None,  # a webhook URL is its own credential
}

# Values that are credentials whatever the key or variable is called: (what it is, pattern).
SECRET_VALUE_SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a URL with a user and password", re.compile(r"^[a-z][a-z0-9+.-]*://[^/@\s:]+:[^/@\s]+@", re.I)),
    ("a webhook URL", re.compile(r"^https?://[^\s]*(/api/webhooks/|hooks\.slack\.com/|/webhook)", re.I)),
    ("a Hugging Face token", re.compile(r"^hf_[A-Za-z0-9]{30,}$")),
    ("a GitHub token", re.compile(r"^(gh[pousr]_[A-Za-z0-9]{30,}|github_pat_\w{30,})$")),
    ("a Slack token", re.compile(r"^xox[abposr]-[A-Za-z0-9-]{10,}$")),
    ("an API key (sk-...)", re.compile(r"^sk-[A-Za-z0-9_-]{20,}$")),
    ("an AWS access key id", re.compile(r"^(AKIA|ASIA)[A-Z0-9]{16}$")),
)


def secret_shape(value: object) -> str | None:
    """What credential `value` looks like (None: nothing known)."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    return next((what for what, shape in SECRET_VALUE_SHAPES if shape.search(text)), None)


def token_key_fix(key: str) -> str:
    """How to pass the credential of a token key instead."""
    variable = TOKEN_KEYS[key]
    if variable:
        return (
            f"remove `{key}` and set {variable} in your environment: submit sends it as a secret "
            f"(add `forward_env: [{variable}]` to the radeonlab block if it is not HF_TOKEN)"
        )
    return (
        f"remove `{key}`: a credential must not be written into the job's config; pass it as a secret "
        "variable the library reads (radeonlab.forward_env)"
    )


def credential_problems(spec: Spec) -> list[Problem]:
    """Token keys, and values shaped like a credential: config.yaml, job.json and the overrides are plain
    files on the host (jobs/spec/py)."""
    file, out = str(spec.path), []
    for key, value in spec.train.items():
        line = spec.line_of(str(key))
        if key in TOKEN_KEYS:
            message = f"`{key}` carries a credential: it would be written in plain text into the job's config"
            out.append(Problem(file, line, message, ERROR, token_key_fix(str(key))))
        elif key not in spec.overrides and (what := secret_shape(value)):
            message = f"`{key}` holds {what}: it would be written in plain text into the job's config"
            fix = "pass credentials as secrets (radeonlab.forward_env), never as values"
            out.append(Problem(file, line, message, ERROR, fix))
    for key, value in spec.overrides.items():
        if key not in TOKEN_KEYS and (what := secret_shape(value)):
            message = f"override `{key}=...` holds {what}: overrides are kept in job.json"
            out.append(Problem(file, spec.line_of(str(key)), message, ERROR, "pass it as a secret"))
    return out

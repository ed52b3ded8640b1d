"""Running a job's training venv on its host, after training: the interpreter and environment that `export`,
`chat` and `chat --prompt` share with the training run (and with `fetch --try`, jobs/track/results.py).

The tools run in a login shell (profile.d sets the ROCm paths and the card's overrides, as for training),
with the job's own caches (HF_HOME, MPLCONFIGDIR under <job>/cache) and HF_HUB_OFFLINE=1: the base model is
the job's (its model/ folder, or the Hub model in the host's shared cache at the commit it trained on), so
nothing is downloaded after the fact.
"""

from __future__ import annotations

import json
from typing import Any

from radeonlab.errors import JobStateError
from radeonlab.jobs.ssh.connection import RunResult
from radeonlab.jobs.track.handle import JobHandle


def venv_python(handle: JobHandle) -> str:
    return f"{handle.record.venv.rstrip('/')}/bin/python"


def venv_env(handle: JobHandle) -> dict[str, str]:
    """The environment of a venv tool for this job (never secrets: they went to the training run only)."""
    return {
        "HF_HOME": handle.dir.path("cache", "hf"),
        "MPLCONFIGDIR": handle.dir.path("cache", "mpl"),
        "HF_HUB_OFFLINE": "1",
        **({"HF_HUB_CACHE": handle.record.model_cache} if handle.record.model_cache else {}),
    }


def require_ended(handle: JobHandle, verb: str) -> None:
    """Refuse while the job's processes live (its adapter is not final, its job.json still changes)."""
    if handle.alive or not handle.state.state.is_finished():
        raise JobStateError(
            f"{handle.id} is {handle.state.state.value} on {handle.target.name}: {verb} works on an ended "
            f"job (`radeonlab watch {handle.id}` follows it to the end)"
        )


def model_gone(handle: JobHandle, model: str, revision: str | None) -> str:
    """The one line for a base model that left the host's cache, with the command that brings it back."""
    at = f"@{revision}" if revision else ""
    again = f"radeonlab models pull {model}" + (f" --revision {revision}" if revision else "")
    return (
        f"{handle.id}: its base model {model}{at} is gone from {handle.target.name}'s model cache; "
        f"pull it again: {again} --limit {handle.target.name}"
    )


def run_venv_tool(handle: JobHandle, tool: str, request: dict[str, Any], timeout: float) -> RunResult:
    """Host tool `tool` (jobs/host/<tool>.py) run by the job's venv in a login shell; never raises on exit."""
    return handle.remote.tool(
        tool,
        stdin_text=json.dumps(request),
        check=False,
        timeout=timeout,
        python=venv_python(handle),
        env=venv_env(handle),
        login=True,
    )

"""Commands that start, cancel and probe a job on its host, as argv lists for the transport to run.

No SSH here: the transport runs what these functions build (`Remote.run(argv, stdin_text=...)`). The work
on the host is done by jobs/host/launcher.py, a stdlib-only script uploaded into the job folder.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import asdict
from importlib import resources

from radeonlab.contract.records import JobPaths, StateRecord
from radeonlab.contract.state import JobState

LAUNCH_DEFAULTS: dict[str, object] = {
    "host_python": "python3",  # the host's system python; the launcher must not depend on the venv
    "cancel_grace_s": 10.0,  # SIGTERM, then SIGKILL after this long (lets the trainer exit cleanly)
}
GONE_REASON = "process gone (host rebooted or killed)"


def launcher_source() -> str:
    """The launcher script's text, to upload as <job>/launcher.py."""
    return resources.files("radeonlab.jobs.host").joinpath("launcher.py").read_text()


def launcher_argv(
    paths: JobPaths,
    venv: str,
    allow_shared: bool = False,
    *,
    resume: bool = False,
    queue: bool = True,
    resume_max_step: int | None = None,
) -> list[str]:
    """The launcher's own command line (what runs inside the detached login shell).

    resume: a new attempt from the newest complete checkpoint (`radeonlab resume`), no later than
    resume_max_step when given (multi-node: the newest checkpoint every node holds).
    queue=False: a busy GPU fails the start at once instead of waiting in line (multi-node ranks: one rank
    queued while its peer waits in torchrun's rendezvous would time out).
    """
    argv = [str(LAUNCH_DEFAULTS["host_python"]), str(paths.launcher), "run", str(paths.root), "--venv", venv]
    argv += ["--allow-shared"] if allow_shared else []
    argv += [] if queue else ["--no-queue"]
    if not resume:
        return argv
    bound = [] if resume_max_step is None else ["--resume-max-step", str(resume_max_step)]
    return [*argv, "--resume", *bound]


def start_shell(argv: list[str]) -> str:
    """`setsid nohup bash -lc '<argv>' >/dev/null 2>&1 </dev/null &`.

    setsid + nohup: the job outlives the SSH session; bash -l: the profile.d environment (ROCm, overrides).
    Every word is quoted with shlex, and the whole inner command once more for `bash -lc`.
    """
    return f"setsid nohup bash -lc {shlex.quote(shlex.join(argv))} >/dev/null 2>&1 </dev/null &"


def start_argv(launcher: list[str]) -> list[str]:
    """`launcher` (a launcher_argv) started detached: an argv for Remote.run (`sh -c` around start_shell)."""
    return ["sh", "-c", start_shell(launcher)]


def cancel_argv(paths: JobPaths, grace_s: float | None = None) -> list[str]:
    """Cancel: TERM the job's process group, KILL it after the grace period, record cancelled.

    Prints the final state.json on stdout (parse it with parse_state_output).
    """
    grace = LAUNCH_DEFAULTS["cancel_grace_s"] if grace_s is None else grace_s
    return [
        str(LAUNCH_DEFAULTS["host_python"]),
        str(paths.launcher),
        "cancel",
        str(paths.root),
        "--grace",
        str(grace),
    ]


def status_argv(paths: JobPaths) -> list[str]:
    """Probe: prints state.json plus "alive" (launcher or training still running)."""
    return [str(LAUNCH_DEFAULTS["host_python"]), str(paths.launcher), "status", str(paths.root)]


def write_secret_argv(paths: JobPaths) -> list[str]:
    """Write env.secret (mode 0600) from stdin: run with stdin_text=secret_text(...), never in argv."""
    target = shlex.quote(str(paths.env_secret))
    return ["sh", "-c", f"umask 077 && cat > {target}.part && mv -f {target}.part {target}"]


def secret_text(secrets: Mapping[str, str]) -> str:
    """The env.secret content the launcher reads (a JSON object) and deletes at once (launcher.py says how
    every attempt still gets it)."""
    return json.dumps({str(k): str(v) for k, v in secrets.items()})


def parse_state_output(stdout: str) -> tuple[StateRecord, bool | None]:
    """(state, alive) from the launcher's `status` / `cancel` output; alive is None when not reported."""
    data = json.loads(stdout.strip().splitlines()[-1])
    alive = data.get("alive")
    return StateRecord.from_dict(data), (bool(alive) if alive is not None else None)


def reconcile(state: StateRecord, pid_alive: bool, ended_at: str | None = None) -> StateRecord:
    """What a job really is: one that says running but has no live process died without recording it.

    That happens when the host rebooted or the launcher was killed (SIGKILL leaves no chance to write). A
    queued job that names its launcher (pid) is waiting in that process: gone, it waits for nothing.
    """
    waiting = state.state is JobState.QUEUED and state.pid is not None
    if (state.state is JobState.RUNNING or waiting) and not pid_alive:
        fields = {**asdict(state), "state": JobState.FAILED, "reason": GONE_REASON}
        fields["ended_at"] = state.ended_at or ended_at
        return StateRecord(**fields)
    return state

"""`radeonlab resume JOB`: a job whose process died (host rebooted, launcher killed) runs again as a new
attempt from its newest complete checkpoint.

The laptop only checks that nothing of the job is alive and starts the job's launcher detached with
`--resume`; the host-side supervisor (jobs/remote/supervisor.py) records the dead attempt, picks the
checkpoint, trims trainer_log.jsonl to the steps it holds and runs. The launcher and its shipped code are
uploaded again first, so a job submitted by an older radeonlab resumes with the current supervisor.

Secrets: the new launcher has none in memory (the old one read and deleted env.secret), so resume writes
env.secret again with the job's `secret_names` taken from the laptop's environment; a name that is not set
there is named in a warning (the job resumes without it).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from jobs import hostbundle, launch, secrets
from jobs.errors import RadeonlabError
from jobs.record import JobPaths, StateRecord
from jobs.runner import SUBMIT, JobSession, open_job, write_secrets
from jobs.state import JobState
from jobs.transport import Remote


class NotResumableError(RadeonlabError):
    """The job is alive, or it succeeded: there is nothing to resume."""


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)  # stderr: `resume --json` keeps stdout for the JSON


def resume(
    job_id: str,
    inventory: str | Path,
    host: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    say: Callable[[str], None] = warn,
) -> tuple[JobSession, object]:
    """Start the new attempt; returns (session, the state the launcher recorded).

    environ: where the job's secrets are read from again (default: the laptop's environment)."""
    with open_job(job_id, inventory, host) as session:
        state = session.job.state  # reconciled: "running" with nothing alive is failed, process gone
        if session.job.alive or not state.state.is_finished():
            raise NotResumableError(
                f"{job_id} is {state.state.value} and its processes are alive: nothing to resume"
            )
        if state.state is JobState.SUCCEEDED:
            raise NotResumableError(f"{job_id} succeeded: nothing to resume (submit it again to retrain)")
        paths = session.paths
        remote = session.remote
        remote.write_text_atomic(str(paths.launcher), launch.launcher_source())
        argv, stdin_text = hostbundle.install_request(paths)
        remote.run(argv, stdin_text=stdin_text)
        names = [str(n) for n in session.job.host_job.job.get("secret_names") or []]
        values = secrets.from_environment(names, os.environ if environ is None else environ)
        missing = [n for n in names if n not in values]
        if missing:
            say(f"{job_id}: {', '.join(missing)} not set in this environment: the job resumes without it")
        write_secrets(remote, paths, values)
        remote.run(launch.start_argv(paths, session.record["venv"], resume=True))
        started = wait_new_launcher(remote, paths, state.pid)
        session.refresh()
    return session, started


def wait_new_launcher(remote: Remote, paths: JobPaths, old_pid: int | None) -> StateRecord:
    """Poll state.json until the new launcher wrote it (queued in line, or running); the old record until."""
    deadline = time.monotonic() + SUBMIT["start_wait_s"]
    state = StateRecord(JobState.QUEUED)
    while time.monotonic() < deadline:
        result = remote.run(launch.status_argv(paths), check=False)
        if result.ok and result.stdout.strip():
            state, _alive = launch.parse_state_output(result.stdout)
            if state.pid is not None and state.pid != old_pid:
                return state
        time.sleep(SUBMIT["start_poll_s"])
    return state

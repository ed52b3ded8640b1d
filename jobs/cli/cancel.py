"""`radeonlab cancel JOB`: stop the job's whole process tree on its host and record it as cancelled."""

from __future__ import annotations

import contextlib

import click

from jobs.cli.options import echo_json, host_option, inventory_option, job_argument, json_option


@click.command("cancel")
@job_argument
@inventory_option
@host_option
@json_option
def command(job_id: str, inventory: str, host: str | None, as_json: bool) -> None:
    """Cancel JOB: SIGTERM its process group, SIGKILL after a grace period; state becomes cancelled."""
    from jobs import launch, store
    from jobs.runner import open_job

    with open_job(job_id, inventory, host) as session:
        result = session.remote.run(launch.cancel_argv(session.paths))
        state, _alive = launch.parse_state_output(result.stdout)
        job = session.refresh()
    with contextlib.closing(store.connect()) as conn:
        store.upsert_from_host(conn, job.host_job)
    if as_json:
        echo_json({"id": job_id, "host": session.target.name, **state.to_dict()})
    else:
        click.echo(f"{job_id} on {session.target.name}: {state.state.value} ({state.reason or 'no reason'})")

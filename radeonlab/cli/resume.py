"""`radeonlab resume JOB`: run a job whose process died again, from its newest complete checkpoint."""

from __future__ import annotations

import click

from radeonlab.cli.options import echo_json, host_option, inventory_option, job_argument, json_option


@click.command("resume")
@job_argument
@inventory_option
@host_option
@json_option
def command(job_id: str, inventory: str, host: str | None, as_json: bool) -> None:
    """Resume JOB (failed: process gone, killed, or cancelled) as a new attempt from its newest checkpoint."""
    from radeonlab.jobs.track.resume import resume

    session, state = resume(job_id, inventory, host)
    if as_json:
        echo_json({"id": job_id, "host": session.target.name, **state.to_dict()})
        return
    why = f" ({state.reason})" if state.reason else ""
    click.echo(f"resumed {job_id} on {session.target.name}: {state.state.value}{why}")
    click.echo(f"  follow it: radeonlab watch {job_id}")

"""`radeonlab resume JOB`: run a failed or cancelled job again, from its newest complete checkpoint."""

from __future__ import annotations

import click

from radeonlab.cli.options import JOB_HELP, echo_json, inventory_path, job_options, json_option, say


@click.command("resume", epilog=JOB_HELP)
@job_options
@json_option
def command(job_ref: str, inventory: str | None, host: str | None, as_json: bool) -> None:
    """Resume JOB (failed: process gone, killed; or cancelled) as a new attempt from its newest complete
    checkpoint (every rank of a multi-node job: from the newest one all ranks hold). Its secrets are sent
    again from this laptop's environment."""
    from radeonlab.jobs.track.handle import JobHandle
    from radeonlab.jobs.track.resume import resume

    with JobHandle.open(job_ref, inventory_path(inventory), host) as handle:
        state = resume(handle, say=say)
        if as_json:
            echo_json({"id": handle.id, "host": handle.target.name, **state.to_dict()})
            return
        click.echo(f"resumed {handle.id} on {handle.target.name}: {state.summary()}")
        click.echo(f"  follow it: radeonlab watch {handle.id}")

"""`radeonlab cancel JOB`: stop the job's whole process tree on its host(s) and record it as cancelled."""

from __future__ import annotations

import click

from radeonlab.cli.options import JOB_HELP, echo_json, inventory_path, job_options, json_option


@click.command("cancel", epilog=JOB_HELP)
@job_options
@json_option
def command(job_ref: str, inventory: str | None, host: str | None, as_json: bool) -> None:
    """Cancel JOB, queued or running: SIGTERM its process group, SIGKILL after a grace period; its state
    becomes cancelled. A multi-node job is cancelled on every rank at once (found on its rank 0). Exit 1 when
    a rank could not be reached (it then fails on its own once rank 0 is gone)."""
    from radeonlab.jobs.track.handle import JobHandle

    with JobHandle.open(job_ref, inventory_path(inventory), host) as handle:
        state, ranks = handle.cancel()
        if as_json:
            peers = [
                {
                    "rank": r.rank,
                    "host": r.host,
                    "state": r.state.state.value if r.state else None,
                    "error": r.error,
                }
                for r in ranks
            ]
            echo_json({"id": handle.id, "host": handle.target.name, **handle.state.to_dict(), "peers": peers})
        else:
            click.echo(f"{handle.id} on {handle.target.name}: {handle.state.summary()}")
            for r in ranks:
                said = r.state.state.value if r.state else f"not cancelled: {r.error}"
                click.echo(f"  rank {r.rank} on {r.host}: {said}")
    if any(r.error for r in ranks):
        raise SystemExit(1)

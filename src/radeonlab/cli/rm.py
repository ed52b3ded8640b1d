"""`radeonlab rm JOB`: delete a finished job's folder on its host(s) and forget it locally."""

from __future__ import annotations

import contextlib

import click

from radeonlab.cli.options import JOB_HELP, echo_json, inventory_path, job_options, json_option


@click.command("rm", epilog=JOB_HELP)
@job_options
@click.option("--dry-run", is_flag=True, help="say what would be removed, remove nothing")
@json_option
def command(job_ref: str, inventory: str | None, host: str | None, dry_run: bool, as_json: bool) -> None:
    """Remove JOB's folder (every rank's) and its row in the local cache. A job whose processes are alive is
    refused: cancel it first. Contents other jobs share stay in the host's store (`radeonlab prune` frees
    what no job uses any more)."""
    from radeonlab.errors import JobStateError
    from radeonlab.jobs.fleet import store
    from radeonlab.jobs.track.handle import JobHandle

    with JobHandle.open(job_ref, inventory_path(inventory), host) as handle:
        if handle.alive:
            raise JobStateError(
                f"{handle.id} is {handle.state.state.value}: cancel it first (radeonlab cancel {handle.id})"
            )

        def rm_on(remote, record):  # (Remote, HostRecord) -> None
            answer = remote.tool(
                "housekeeping",
                ["rm", record.job_dir(handle.id).root, *(["--dry-run"] if dry_run else [])],
                check=False,
            ).last_json()
            if "error" in answer:
                raise JobStateError(f"{remote.target.name}: {answer['error']}")
            return answer

        answers = [rm_on(handle.remote, handle.record)]
        peers = handle.on_peers(lambda r, rec: rm_on(r, rec) and None)
    if not dry_run:
        with contextlib.closing(store.connect()) as conn:
            store.delete(conn, handle.id)
    freed = sum(a.get("bytes", 0) for a in answers)
    if as_json:
        echo_json(
            {
                "id": handle.id,
                "dry_run": dry_run,
                "bytes": freed,
                "peers": [{"rank": p.rank, "host": p.host, "error": p.error} for p in peers],
            }
        )
    else:
        verb = "would remove" if dry_run else "removed"
        click.echo(f"{verb} {handle.id} on {handle.target.name} ({freed:,} bytes)")
        for p in peers:
            click.echo(f"  rank {p.rank} on {p.host}: {p.error or verb}")
    if any(p.error for p in peers):
        raise SystemExit(1)

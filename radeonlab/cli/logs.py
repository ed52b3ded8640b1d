"""`radeonlab logs JOB [-f]`: the job's train.log; -f follows it until the job ends (reconnecting)."""

from __future__ import annotations

import sys

import click

from radeonlab.cli.options import host_option, inventory_option, job_argument, say


@click.command("logs")
@job_argument
@inventory_option
@host_option
@click.option("-f", "--follow", is_flag=True, help="keep printing until the job ends")
def command(job_id: str, inventory: str, host: str | None, follow: bool) -> None:
    """Print JOB's train.log (stdout and stderr of llamafactory-cli)."""
    from radeonlab.jobs.apply.submit import open_job
    from radeonlab.jobs.track.follow import Link, stream_log

    out = click.get_binary_stream("stdout")

    def write(data: bytes) -> None:
        out.write(data)
        out.flush()

    with open_job(job_id, inventory, host) as session:
        link = Link(session.target, session.remote, say)
        try:
            state = stream_log(link, session.paths, write, follow=follow)
        except KeyboardInterrupt:
            say("stopped following; the job keeps running on the host")
            sys.exit(130)
        finally:
            link.close()
    if follow:
        say(f"{job_id}: {state.state.value}" + (f" ({state.reason})" if state.reason else ""))

"""`radeonlab logs JOB [-f] [--tail N]`: the job's train.log; -f follows it until the job ends."""

from __future__ import annotations

import sys

import click

from radeonlab.cli.options import JOB_HELP, inventory_path, job_options, say

TAIL_BYTES_PER_LINE = 400  # how far back --tail N reads (long lines: fewer of them shown than asked)


@click.command("logs", epilog=JOB_HELP)
@job_options
@click.option("-f", "--follow", is_flag=True, help="keep printing until the job ends")
@click.option("-n", "--tail", type=click.IntRange(min=1), default=None, help="only the last N lines")
def command(job_ref: str, inventory: str | None, host: str | None, follow: bool, tail: int | None) -> None:
    """Print JOB's train.log (stdout and stderr of llamafactory-cli, every attempt)."""
    from radeonlab.jobs.track.follow import TRAIN_LOG, last_lines
    from radeonlab.jobs.track.handle import JobHandle

    out = sys.stdout.buffer  # bytes as the host wrote them (no re-encoding of the log)
    start = -max(65536, tail * TAIL_BYTES_PER_LINE) if tail else 0
    trim = bool(tail)  # the first chunk (it holds every byte --tail asked for) is cut to its last N lines
    with JobHandle.open(job_ref, inventory_path(inventory), host) as handle:
        try:
            for event in handle.events(say, {TRAIN_LOG: start}, keep_going=follow):
                if event.kind != "data":
                    continue
                data = event.data
                if trim:
                    data, trim = last_lines(data, tail or 0), False
                out.write(data)
                out.flush()
        except KeyboardInterrupt:
            say("stopped following; the job keeps running on the host")
            raise SystemExit(130) from None
        if follow:
            say(f"{handle.id}: {handle.state.summary()}")

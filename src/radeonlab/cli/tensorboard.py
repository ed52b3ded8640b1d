"""`radeonlab tensorboard JOB [JOB...] [--serve]`: fetch the jobs' TensorBoard event files and print (or run)
the command that shows them."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import click

from radeonlab.cli.fetch import DEFAULT_RESULTS_DIR
from radeonlab.cli.options import (
    JOB_HELP,
    complete_job,
    echo_json,
    host_option,
    inventory_option,
    inventory_path,
    json_option,
    to_dir_option,
)


@click.command("tensorboard", epilog=JOB_HELP)
@click.argument("job_refs", nargs=-1, required=True, metavar="JOB...", shell_complete=complete_job)
@inventory_option
@host_option
@to_dir_option("default: ./runs (one folder per job)")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="TensorBoard's port (6006)")
@click.option("--serve", is_flag=True, help="run TensorBoard here after fetching (it must be installed)")
@json_option
def command(
    job_refs: tuple[str, ...],
    inventory: str | None,
    host: str | None,
    to_dir: Path | None,
    port: int | None,
    serve: bool,
    as_json: bool,
) -> None:
    """Fetch the TensorBoard event files of JOB (a `report_to: tensorboard` run; several JOBs: a sweep side
    by side) into ./runs/JOB, verified; print the `tensorboard` command that shows them, or run it with
    --serve. TensorBoard runs on this laptop (`pip install tensorboard`); the events come from the host."""
    from radeonlab.cli.views import rich_progress
    from radeonlab.errors import InputError
    from radeonlab.jobs.track.handle import JobHandle
    from radeonlab.jobs.track.tensorboard import TENSORBOARD, fetch_events, one_liner, view_command

    inv = inventory_path(inventory)
    base = (to_dir or Path(DEFAULT_RESULTS_DIR)).resolve()
    runs, fetched = [], []
    for ref in job_refs:
        with JobHandle.open(ref, inv, host) as handle:
            local = base / handle.id
            with contextlib.nullcontext(None) if as_json else rich_progress(f"{handle.id} events") as bar:
                report = fetch_events(handle, local, bar)
            runs.append((handle.id, local))
            fetched.append(
                {"id": handle.id, "local_dir": str(local), "files": [f.name for f in report.files]}
            )
    argv = view_command(runs, port)
    if as_json:
        echo_json({"jobs": fetched, "command": argv})
        return
    for item in fetched:
        click.echo(f"{item['id']}: {len(item['files'])} event file(s) in {item['local_dir']}")
    if not serve:
        click.echo(
            f"view them: {one_liner(argv)}   (then open http://localhost:{port or TENSORBOARD['port']})"
        )
        return
    exe = shutil.which("tensorboard")
    if exe is None:
        raise InputError(
            f"tensorboard is not installed here: pip install tensorboard, then: {one_liner(argv)}"
        )
    click.echo(f"running: {one_liner(argv)}  (Ctrl-C stops it)")
    os.execv(exe, argv)

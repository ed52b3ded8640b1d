"""`radeonlab submit SPEC`: check, upload and launch a job on a workstation (optionally --watch it)."""

from __future__ import annotations

from pathlib import Path

import click

from radeonlab.cli.options import echo_json, host_option, inventory_option, json_option, say


@click.command("submit")
@click.argument("spec", type=click.Path(dir_okay=False, path_type=Path))
@inventory_option
@host_option
@click.option("--watch", "follow", is_flag=True, help="follow the job until it ends (as `radeonlab watch`)")
@click.option("--allow-shared", is_flag=True, help="run even if another job holds the GPU")
@click.option(
    "--nodes",
    type=click.IntRange(min=1),
    default=None,
    help="train across this many hosts (default: the spec's radeonlab.nodes, else 1); "
    "with --host, name them all: --host ws1,ws2 (the first is rank 0)",
)
@click.option("--strict", is_flag=True, help="refuse when the VRAM estimate does not fit the card")
@json_option
def command(
    spec: Path,
    inventory: str,
    host: str | None,
    follow: bool,
    allow_shared: bool,
    nodes: int | None,
    strict: bool,
    as_json: bool,
) -> None:
    """Check SPEC, upload its data to a workstation and start the training there, detached."""
    from radeonlab.errors import ChecksFailedError
    from radeonlab.jobs.apply import submit as runner
    from radeonlab.jobs.apply import sync

    bars = runner.no_progress if as_json else sync.rich_progress
    try:
        result = runner.submit(
            spec,
            inventory,
            host,
            allow_shared=allow_shared,
            say=say,
            progress_bar=bars,
            nodes=nodes,
            strict=strict,
        )
    except ChecksFailedError as exc:
        for problem in exc.problems:
            click.echo(str(problem), err=True)
        raise
    if as_json:
        echo_json(result.to_dict())
    else:
        state = result.state
        why = f" ({state.reason})" if state.reason else ""
        click.echo(f"submitted {result.job_id} to {result.host}: {state.state.value}{why}")
        click.echo(f"  follow it: radeonlab watch {result.job_id}   results: radeonlab fetch {result.job_id}")
    if result.state.state.is_finished() and result.state.state.value != "succeeded":
        raise SystemExit(1)
    if follow:
        from radeonlab.cli.watch import watch_job

        raise SystemExit(watch_job(result.job_id, inventory, result.host))

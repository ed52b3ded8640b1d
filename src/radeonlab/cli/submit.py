"""`radeonlab submit SPEC [key=value ...]`: plan the job, then (unless --dry-run) upload and start it."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from radeonlab.cli.options import echo_json, host_option, inventory_option, inventory_path, json_option, say


@contextlib.contextmanager
def problems_shown() -> Iterator[None]:
    """Planning a job, a sweep or a Slurm job: a refused spec's findings, one stderr line each (as `radeonlab
    check` words them), before the one `radeonlab: error:` line the command line prints (cli/__init__.py)."""
    from radeonlab.errors import ChecksFailedError

    try:
        yield
    except ChecksFailedError as exc:
        for problem in exc.problems:
            click.echo(str(problem), err=True)
        raise


def print_plan(plan: Any) -> None:
    """The plan a human reads: where, why, what changes, what moves, whether it fits, the queue."""
    click.echo(f"plan for {plan.job_id} ({plan.spec.path}):")  # placement's lines went to stderr already
    for node in plan.nodes:
        rank = f"rank {node.rank} " if len(plan.nodes) > 1 else ""
        cards = "; ".join(g.label() for g in node.gpus) or "no GPU (CPU)"
        click.echo(f"  {rank}host {node.host} ({node.placed}): {cards}")
        click.echo(f"    precision {node.rendered.precision}: {node.rendered.why_precision}")
        for key, (old, new, why) in node.rendered.changes.items():
            was = "(unset)" if old is None else repr(old)
            now = "(removed)" if new is None else repr(new)
            click.echo(f"    ~ {key}: {was} -> {now}  ({why})")
        for key, value in plan.spec.overrides.items():
            click.echo(f"    = {key}={value}  (from the command line)")
        sent = node.bytes_to_send
        total = sum({u.local.sha256: u.local.size for u in node.uploads}.values())
        moved = "unknown" if sent is None else f"{sent:,} bytes"
        click.echo(f"    upload: {len(node.uploads)} file(s), {total:,} bytes; to send: {moved}")
        click.echo(f"    {node.preflight.message}")
        click.echo(f"    queue: {queue_words(node)}")
        click.echo(f"    job folder: {node.job.root}")
    if plan.secret_names:
        click.echo(f"  secrets (names only): {', '.join(plan.secret_names)}")


def queue_words(node: Any) -> str:  # (NodePlan) -> str
    """Whether the job starts at once or waits, and for what: the jobs on that GPU now, and the sweep's own
    earlier jobs placed there (they are started first and hold the GPU until they end)."""
    waits = [f"queues after {', '.join(node.after)} (this sweep's, on the same GPU)"] if node.after else []
    waits += [f"{node.queue} job(s) on that GPU now"] if node.queue else []
    return "; ".join(waits) or "the GPU is free"


@click.command("submit")
@click.argument("spec", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("overrides", nargs=-1, metavar="[KEY=VALUE]...")
@inventory_option
@host_option
@click.option(
    "--nodes",
    type=click.IntRange(min=1),
    default=None,
    help="train across this many hosts (default: the spec's radeonlab.nodes, else 1); with --host, name "
    "them all: --host ws1,ws2 (the first is rank 0)",
)
@click.option(
    "--sweep",
    "sweeps",
    multiple=True,
    metavar="KEY=V1,V2",
    help="one job per value (several --sweep: every combination), placed across the fleet",
)
@click.option("--dry-run", is_flag=True, help="print the plan and send nothing")
@click.option("--strict", is_flag=True, help="refuse when the VRAM estimate does not fit the card")
@click.option("--allow-shared", is_flag=True, help="run even if another job holds the GPU")
@click.option("--watch", "follow", is_flag=True, help="follow the job until it ends (as `radeonlab watch`)")
@click.option("--verbose", is_flag=True, help="say how long each phase took (plan, upload, stage)")
@json_option
def command(
    spec: Path,
    overrides: tuple[str, ...],
    inventory: str | None,
    host: str | None,
    nodes: int | None,
    sweeps: tuple[str, ...],
    dry_run: bool,
    strict: bool,
    allow_shared: bool,
    follow: bool,
    verbose: bool,
    as_json: bool,
) -> None:
    """Check SPEC, place it, upload its data and start the training, detached.

    KEY=VALUE pairs override the spec's LLaMA-Factory keys (LLaMA-Factory's own syntax, e.g.
    learning_rate=5e-5); they are checked like the spec and recorded in job.json. --sweep
    learning_rate=1e-4,5e-5 submits one job per value (each recorded with its overrides), spread over the
    hosts that fit (or all on --host, queued). --dry-run prints the plan
    (hosts and why, precision, every key radeonlab changes, bytes to send, the VRAM estimate, the queue) and
    sends nothing. Exit status: 0 started (or queued), 1 it failed to start, 2 the spec or an option is wrong.
    """
    from radeonlab.jobs.spec.load import load

    # A spec that cannot be read (a FIFO, a device, an alias or template bomb) is refused before the
    # job runner's imports (SSH, pyinfra) and the inventory, a program of the user's: those take seconds.
    load(spec)

    from radeonlab.cli.views import rich_progress
    from radeonlab.errors import InventoryError
    from radeonlab.jobs.apply.submit import no_progress
    from radeonlab.jobs.fleet.context import Fleet
    from radeonlab.jobs.fleet.inventory import load_inventory
    from radeonlab.jobs.scheduler.choose import scheduler_for

    inv = inventory_path(inventory)
    try:  # once for the whole command
        targets = load_inventory(inv)
    except InventoryError:
        targets = None  # planning checks the spec, then reports the inventory (docs/reference/bad-inputs.md)
    scheduler = scheduler_for(targets, host)  # the inventory's radeonlab_scheduler (docs/guide/slurm.md)
    scheduler.check_options(sweep=bool(sweeps), watch=follow)
    if sweeps:
        with Fleet.open(inv, targets) as fleet:
            code = submit_sweep(spec, fleet, sweeps, overrides, host, nodes, dry_run, strict, allow_shared,
                                follow, as_json)  # fmt: skip
        raise SystemExit(code)
    t0 = time.monotonic()
    with Fleet.open(inv, targets) as fleet:  # observe, plan, apply: every connection closes at its end
        with problems_shown():
            planned = scheduler.plan(
                spec,
                fleet,
                host=host,
                nodes=nodes,
                overrides=overrides,
                strict=strict,
                allow_shared=allow_shared,
                ask_blobs=dry_run,
                say=say,
            )
        if dry_run:
            extra, lines = scheduler.preview(planned)
            if as_json:
                echo_json({**planned.plan.to_dict(), **extra})
                return
            print_plan(planned.plan)
            for line in lines:
                click.echo(line)
            return
        result = scheduler.submit(
            planned, fleet, progress_bar=no_progress if as_json else rich_progress, say=say
        )
    if verbose:
        phases = ", ".join(f"{k} {v:.2f}s" for k, v in result.seconds.items())
        say(f"timing: {phases}; total {time.monotonic() - t0:.2f}s (the training's own start-up comes after)")
    if as_json:
        echo_json(result.to_dict())
    else:
        for line in scheduler.submitted_words(result):
            click.echo(line)
    if result.state.state.is_finished() and result.state.state.value != "succeeded":
        raise SystemExit(1)
    if follow:
        from radeonlab.cli.watch import watch_job

        raise SystemExit(watch_job(result.job_id, inv, result.host, as_json=as_json))


def submit_sweep(
    spec: Path,
    fleet: Any,  # Fleet (jobs/fleet/context.py, imported when a command runs)
    sweeps: tuple[str, ...],
    overrides: tuple[str, ...],
    host: str | None,
    nodes: int | None,
    dry_run: bool,
    strict: bool,
    allow_shared: bool,
    follow: bool,
    as_json: bool,
) -> int:
    """Plan every job of the sweep (nothing is sent if one is refused), then start them in order; 0 when
    every job started (or queued), 1 when one did not."""
    from radeonlab.cli.views import rich_progress
    from radeonlab.errors import InputError, RadeonlabError, one_line
    from radeonlab.jobs.apply.submit import apply_plan, no_progress
    from radeonlab.jobs.fleet.observe import observe_sweep
    from radeonlab.jobs.plan.sweep import plan_sweep

    if follow:
        raise InputError("--watch follows one job: watch a sweep's jobs with `radeonlab list` / `watch JOB`")
    with problems_shown():
        jobs, views = observe_sweep(fleet, spec, sweeps, os.environ, host=host, nodes=nodes,
                                    overrides=overrides, ask_blobs=dry_run)  # fmt: skip
        plans = plan_sweep(jobs, views, fleet.targets, inventory=fleet.inventory, host=host, nodes=nodes,
                           strict=strict, allow_shared=allow_shared, say=say)  # fmt: skip
    results, failed = [], 0
    if dry_run:
        if as_json:
            echo_json([plan.to_dict() for plan in plans])
        for plan in [] if as_json else plans:
            print_plan(plan)
        return 0
    for plan in plans:
        try:
            result = apply_plan(plan, fleet, progress_bar=no_progress if as_json else rich_progress, say=say)
        except RadeonlabError as exc:  # the others still go: each job is independent
            failed += 1
            say(f"radeonlab: error: {plan.job_id} ({plan.rank0.host}): {one_line(exc)}")
            continue
        results.append(result)
        ended = result.state.state.is_finished() and result.state.state.value != "succeeded"
        failed += ended
        swept = " ".join(f"{k}={v}" for k, v in plan.spec.overrides.items())
        if not as_json:
            click.echo(f"submitted {result.job_id} to {result.host} ({swept}): {result.state.summary()}")
    if as_json:
        echo_json([r.to_dict() for r in results])
    else:
        click.echo(f"  {len(results)} jobs; follow them: radeonlab list, radeonlab watch JOB")
    return 1 if failed else 0

"""`radeonlab status JOB`: the job's state as its host records it, its progress, attempts and base model."""

from __future__ import annotations

import click

from radeonlab.cli.options import JOB_HELP, echo_json, inventory_path, job_options, json_option
from radeonlab.contract.state import JobState


@click.command("status", epilog=JOB_HELP)
@job_options
@json_option
def command(job_ref: str, inventory: str | None, host: str | None, as_json: bool) -> None:
    """Show JOB's state (queued/running/succeeded/failed/cancelled), why, its last step and loss, a loss
    sparkline, its attempts, the exact base model and, on a container host, the image it ran in. Exit 0
    unless the job failed (1)."""
    from radeonlab.cli.views import sparkline
    from radeonlab.jobs.host import metrics
    from radeonlab.jobs.track.follow import TRAINER_LOG
    from radeonlab.jobs.track.handle import JobHandle

    with JobHandle.open(job_ref, inventory_path(inventory), host) as handle:
        reader = metrics.TrainerLogReader()
        for event in handle.events(lambda _m: None, {TRAINER_LOG: 0}, keep_going=False):
            if event.kind == "data":
                reader.feed(event.data)
        prog = metrics.progress(reader.points)
        state, job = handle.state, handle.job
        losses = [p.loss for p in reader.points if p.loss is not None]
        if as_json:
            recorded = job.to_dict()  # the nested parts as job.json holds them
            echo_json(
                {
                    "id": job.id,
                    "host": handle.target.name,
                    "remote_dir": handle.dir.root,
                    **state.to_dict(),
                    "step": prog.step if prog else None,
                    "total_steps": prog.total_steps if prog else None,
                    "loss": prog.loss if prog else None,
                    "tokens_per_s": prog.tokens_per_s if prog else None,
                    "attempts": [a.__dict__ for a in job.attempts],
                    "result": recorded["result"],
                    "model": recorded["model"],
                    "overrides": job.overrides,
                    "nodes": recorded["nodes"],
                    "exports": recorded["exports"],
                    # where it ran (the launcher's record): "venv", or "container" and the image's digest
                    "runtime": job.runtime or None,
                    "image": job.image or None,
                    "image_digest": job.image_digest or None,
                }
            )
        else:
            click.echo(f"{job.id} on {handle.target.name}: {state.state.value}")
            if state.exit_code is not None:
                click.echo(f"  exit code: {state.exit_code}")
            if state.reason:
                click.echo(f"  reason: {state.reason}")
            if prog:
                loss = f", loss {prog.loss:.4g}" if prog.loss is not None else ""
                click.echo(f"  step {prog.step}/{prog.total_steps or '?'}{loss}  {sparkline(losses, 40)}")
            if job.model and job.model.name:
                sha = f" @ {job.model.sha}" if job.model.sha else ""
                click.echo(f"  base model: {job.model.name}{sha}")
            if job.runtime == "container":
                click.echo(f"  ran in the container image {job.image} @ {job.image_digest}")
            for key, value in job.overrides.items():
                click.echo(f"  override: {key}={value}")
            for attempt in job.attempts if len(job.attempts) > 1 or job.result else []:
                click.echo(f"  {attempt.line()}")
            if job.result:
                said = ", ".join(f"{k}={v}" for k, v in job.result.settings.items()) or "as submitted"
                click.echo(f"  adapter from attempt {job.result.attempt}: {said}")
            if job.report:
                click.echo("  " + job.report.replace("\n", "\n  "))
            for export in job.exports:
                quantized = f", {export.quantize}-bit" if export.quantize else ""
                size = f", {export.bytes / 2**30:.2f} GiB" if export.bytes else ""
                click.echo(f"  export {export.name}: {export.dir}{quantized}{size}")
            click.echo(f"  folder: {handle.dir.root}")
    if state.state is JobState.FAILED:
        raise SystemExit(1)

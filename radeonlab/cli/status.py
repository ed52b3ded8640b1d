"""`radeonlab status JOB`: the job's state as its host records it, with its latest progress."""

from __future__ import annotations

import click

from radeonlab.cli.options import echo_json, host_option, inventory_option, job_argument, json_option


@click.command("status")
@job_argument
@inventory_option
@host_option
@json_option
def command(job_id: str, inventory: str, host: str | None, as_json: bool) -> None:
    """Show JOB's state (running/succeeded/failed/...), exit code, reason and last logged step."""
    from radeonlab.jobs.apply.submit import open_job
    from radeonlab.jobs.host import metrics
    from radeonlab.jobs.track.follow import TRAINER_LOG, poll

    with open_job(job_id, inventory, host) as session:
        offsets = {TRAINER_LOG: 0}
        result = poll(session.remote, session.paths, offsets)
        reader = metrics.TrainerLogReader()
        reader.feed(result.chunks[TRAINER_LOG])
        prog = metrics.progress(reader.points)
        state = session.job.state
        attempts = list(session.job.host_job.job.get("attempts") or [])
    if as_json:
        echo_json(
            {
                "id": job_id,
                "host": session.target.name,
                "remote_dir": str(session.paths.root),
                **state.to_dict(),
                "step": prog.step if prog else None,
                "total_steps": prog.total_steps if prog else None,
                "loss": prog.loss if prog else None,
                "attempts": attempts,
                "result": session.job.host_job.job.get("result") or {},
            }
        )
        return
    click.echo(f"{job_id} on {session.target.name}: {state.state.value}")
    if state.exit_code is not None:
        click.echo(f"  exit code: {state.exit_code}")
    if state.reason:
        click.echo(f"  reason: {state.reason}")
    if prog:
        loss = f", loss {prog.loss:.4g}" if prog.loss is not None else ""
        click.echo(f"  step {prog.step}/{prog.total_steps or '?'}{loss}")
    from radeonlab.contract.records import JobRecord, attempt_line

    record = JobRecord.from_dict(session.job.host_job.job)
    for attempt in record.attempts if len(record.attempts) > 1 or record.result else []:
        click.echo(f"  {attempt_line(attempt)}")
    if record.result:
        settings = record.result.get("settings") or {}
        said = ", ".join(f"{k}={v}" for k, v in settings.items()) or "as submitted"
        click.echo(f"  adapter from attempt {record.result.get('attempt')}: {said}")
    if record.report:
        click.echo("  " + record.report.replace("\n", "\n  "))
    click.echo(f"  folder: {session.paths.root}")

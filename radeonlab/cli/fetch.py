"""`radeonlab fetch JOB`: the adapter, logs and config into a local folder (checksummed, resumable);
`--try PROMPT` also asks the adapter one question on the host."""

from __future__ import annotations

import contextlib
from pathlib import Path

import click

from radeonlab.cli.options import echo_json, host_option, inventory_option, job_argument, json_option

DEFAULT_RESULTS_DIR = "runs"  # ./runs/<job id>


@click.command("fetch")
@job_argument
@inventory_option
@host_option
@click.option("--to", "to_dir", type=click.Path(file_okay=False, path_type=Path), help="default: ./runs/JOB")
@click.option("--try", "prompt", help="generate an answer to PROMPT with the adapter, on the host")
@json_option
def command(
    job_id: str, inventory: str, host: str | None, to_dir: Path | None, prompt: str | None, as_json: bool
) -> None:
    """Fetch JOB's adapter_model.safetensors, adapter_config.json, trainer_log.jsonl, config.yaml,
    training_loss.png and train.log, verified against the host's sha256."""
    from radeonlab.jobs.apply import sync
    from radeonlab.jobs.apply.submit import open_job
    from radeonlab.jobs.fleet import store
    from radeonlab.jobs.track.results import fetch_results, try_adapter

    local = (to_dir or Path(DEFAULT_RESULTS_DIR) / job_id).resolve()
    if prompt is not None:
        prompt = prompt.replace("\\n", "\n")  # a shell argument cannot easily hold a newline
    answer = None
    with open_job(job_id, inventory, host) as session:
        with contextlib.nullcontext(None) if as_json else sync.rich_progress("fetch") as bar:
            report = fetch_results(session.remote, session.paths, local, bar)
        if prompt is not None:
            answer = try_adapter(session.remote, session.paths, session.record["venv"], prompt)
    with contextlib.closing(store.connect()) as conn:
        store.set_local_dir(conn, job_id, str(local))
    if as_json:
        echo_json(
            {
                "id": job_id,
                "local_dir": str(local),
                "files": [f.__dict__ for f in report.files],
                "bytes_received": report.bytes_received,
                "answer": answer,
            }
        )
        return
    click.echo(f"fetched {report.summary()}")
    for f in report.files:
        click.echo(f"  {f.name}  sha256 {f.sha256[:16]}…  {'(already here)' if f.skipped else 'verified'}")
    click.echo(f"results in {local}")
    if answer is not None:
        click.echo(f"prompt: {prompt!r}")
        click.echo(f"adapter's answer: {answer}")

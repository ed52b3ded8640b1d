"""`radeonlab export JOB --merge [--quantize 4|8] [--to DIR]`: the base model with the adapter merged in,
made on the job's host and fetched (verified, resumable)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import click

from radeonlab.cli.fetch import DEFAULT_RESULTS_DIR
from radeonlab.cli.options import (
    JOB_HELP,
    echo_json,
    inventory_path,
    job_options,
    json_option,
    say,
    to_dir_option,
)


@click.command("export", epilog=JOB_HELP)
@job_options
@click.option("--merge", is_flag=True, help="merge the adapter into the base model (llamafactory-cli export)")
@click.option(
    "--quantize", type=click.Choice(["4", "8"]), help="GPTQ-quantize the merged model (needs gptqmodel)"
)
@click.option(
    "--calibration",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="with --quantize: a json/jsonl file whose rows have a `text` column",
)
@to_dir_option("into DIR/JOB, as fetch (default: ./runs/JOB)")
@click.option("--no-fetch", is_flag=True, help="leave the export on the host")
@json_option
def command(
    job_ref: str,
    inventory: str | None,
    host: str | None,
    merge: bool,
    quantize: str | None,
    calibration: Path | None,
    to_dir: Path | None,
    no_fetch: bool,
    as_json: bool,
) -> None:
    """Merge JOB's adapter into its base model on the job's host (`llamafactory-cli export`, the training
    venv, the job's own base model: its model/ folder or the host's model cache, offline), into the job
    folder's export/merged/, then fetch it to DIR/JOB/export/merged/ with progress and checksums
    (resumable: run it again after an interruption). An export already made is fetched, not made again;
    job.json records each in `exports`. Refused while the job runs, and when its base model is gone from
    the host's cache. The adapter alone (no merge) is `radeonlab fetch JOB`."""
    from radeonlab.cli.views import rich_progress
    from radeonlab.errors import InputError
    from radeonlab.jobs.ssh.transfer import human_bytes
    from radeonlab.jobs.track.export import fetch_export, run_export
    from radeonlab.jobs.track.handle import JobHandle

    if not merge and not quantize:
        raise InputError(
            "nothing to export: --merge (the base model with the adapter merged in) or --quantize 4|8; "
            "the adapter alone is `radeonlab fetch JOB`"
        )
    bits = int(quantize) if quantize else None
    report = None
    with JobHandle.open(job_ref, inventory_path(inventory), host) as handle:
        record = run_export(handle, quantize=bits, calibration=calibration, say=say)
        local = ((to_dir or Path(DEFAULT_RESULTS_DIR)) / handle.id).resolve()  # beside what fetch brings
        if not no_fetch:
            with contextlib.nullcontext(None) if as_json else rich_progress("fetch") as bar:
                report = fetch_export(handle, record["name"], local, bar)
    where = local / record["dir"]
    if as_json:
        echo_json(
            {
                "id": handle.id,
                "export": record,
                "local_dir": None if no_fetch else str(where),
                "files": [f.__dict__ for f in report.files] if report else [],
            }
        )
        return
    made = "already on the host" if record.get("already") else "made on the host"
    click.echo(f"{record['name']}: {made} ({record['files']} files, {human_bytes(record['bytes'])})")
    if report is None:
        click.echo(f"on {handle.target.name}: {handle.dir.path(record['dir'])}")
        return
    click.echo(f"fetched {report.summary()}")
    click.echo(f"merged model in {where} (load it with transformers: AutoModelForCausalLM.from_pretrained)")

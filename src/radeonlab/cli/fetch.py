"""`radeonlab fetch JOB`: the adapter, logs and config into a local folder (verified, resumable); `--try`
asks the adapter one question on the host; the loss curve is drawn in the terminal."""

from __future__ import annotations

import contextlib
from pathlib import Path

import click

from radeonlab.cli.options import JOB_HELP, echo_json, inventory_path, job_options, json_option, to_dir_option

DEFAULT_RESULTS_DIR = "runs"  # ./runs/<job id>; `--to DIR` is DIR/<job id> (two jobs never share a folder)


@click.command("fetch", epilog=JOB_HELP)
@job_options
@to_dir_option("into DIR/JOB (default: ./runs/JOB)")
@click.option("--checkpoint", type=click.IntRange(min=1), help="the adapter of output/checkpoint-N instead")
@click.option("--all", "everything", is_flag=True, help="the whole output folder (checkpoints included)")
@click.option("--try", "prompt", help="generate an answer to PROMPT with the adapter, on the host")
@json_option
def command(
    job_ref: str,
    inventory: str | None,
    host: str | None,
    to_dir: Path | None,
    checkpoint: int | None,
    everything: bool,
    prompt: str | None,
    as_json: bool,
) -> None:
    """Fetch JOB's adapter (adapter_model.safetensors, adapter_config.json), trainer_log.jsonl, config.yaml,
    training_loss.png and train.log into DIR/JOB, each verified against the sha256 the host computed while
    sending it; a fetch cut short resumes where it stopped. base_model.json beside them names the exact base
    model."""
    from radeonlab.cli.views import rich_progress, sparkline
    from radeonlab.jobs.fleet import store
    from radeonlab.jobs.host import metrics
    from radeonlab.jobs.track.handle import JobHandle
    from radeonlab.jobs.track.results import fetch_results, try_adapter

    if prompt is not None:
        prompt = prompt.replace("\\n", "\n")  # a shell argument cannot easily hold a newline
    answer = None
    with JobHandle.open(job_ref, inventory_path(inventory), host) as handle:
        local = ((to_dir or Path(DEFAULT_RESULTS_DIR)) / handle.id).resolve()
        with contextlib.nullcontext(None) if as_json else rich_progress("fetch") as bar:
            report = fetch_results(handle, local, bar, checkpoint=checkpoint, everything=everything)
        if prompt is not None:
            adapter = handle.dir.path("output", f"checkpoint-{checkpoint}") if checkpoint else None
            answer = try_adapter(handle, prompt, adapter=adapter)
    with contextlib.closing(store.connect()) as conn:
        store.set_local_dir(conn, handle.id, str(local))
    if as_json:
        echo_json(
            {
                "id": handle.id,
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
    log = local / "output" / "trainer_log.jsonl"
    if log.is_file():
        parsed = [metrics.parse_line(line) for line in log.read_text().splitlines()]
        points = [(p.step, p.loss) for p in parsed if p and p.loss is not None]
        if points:
            click.echo(
                f"loss {points[0][1]:.3f} -> {points[-1][1]:.3f} over {points[-1][0]} steps: "
                f"{sparkline([loss for _, loss in points], 60)}"
            )
    click.echo(f"results in {local}")
    if answer is not None:
        click.echo(f"prompt: {prompt!r}")
        click.echo(f"adapter's answer: {answer}")

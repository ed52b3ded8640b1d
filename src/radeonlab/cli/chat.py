"""`radeonlab chat JOB`: talk to the job's adapter on its host, interactively or one `--prompt` at a time."""

from __future__ import annotations

import click

from radeonlab.cli.options import JOB_HELP, echo_json, inventory_path, job_options, json_option


@click.command("chat", epilog=JOB_HELP)
@job_options
@click.option("--prompt", help="answer this one prompt and exit (greedy decoding; `\\n` is a newline)")
@click.option("--max-new-tokens", type=click.IntRange(min=1), help="longest answer (--prompt: 128)")
@click.option("--compare-base", is_flag=True, help="also answer with the base model alone, side by side")
@click.option("--checkpoint", type=click.IntRange(min=1), help="the adapter of output/checkpoint-N instead")
@click.option(
    "--temperature",
    type=click.FloatRange(min=0),
    help="interactive: sampling temperature (LLaMA-Factory's default: 0.95; 0: greedy, the same answers)",
)
@json_option
def command(
    job_ref: str,
    inventory: str | None,
    host: str | None,
    prompt: str | None,
    max_new_tokens: int | None,
    compare_base: bool,
    checkpoint: int | None,
    temperature: float | None,
    as_json: bool,
) -> None:
    """Chat with JOB's adapter on the job's host (LLaMA-Factory's chat model in the training venv, the
    job's base model, the card's environment). Interactive: history and line editing, `clear` forgets the
    conversation, Ctrl-C stops an answer, Ctrl-D or `exit` ends. --prompt answers once, for scripts
    (--json: {"answer", "base_answer"}); --compare-base adds the base model's answer to each."""
    from radeonlab.errors import InputError
    from radeonlab.jobs.track.chat import ask, interactive
    from radeonlab.jobs.track.handle import JobHandle

    if prompt is None and as_json:
        raise InputError("--json needs --prompt (an interactive chat prints no JSON)")
    if prompt is not None and temperature is not None:
        raise InputError("--temperature is for the interactive chat (--prompt always decodes greedily)")
    with JobHandle.open(job_ref, inventory_path(inventory), host) as handle:
        if prompt is None:
            raise SystemExit(
                interactive(
                    handle,
                    max_new_tokens=max_new_tokens,
                    compare_base=compare_base,
                    checkpoint=checkpoint,
                    temperature=temperature,
                )
            )
        text = prompt.replace("\\n", "\n")  # a shell argument cannot easily hold a newline
        answers = ask(
            handle, text, max_new_tokens=max_new_tokens, compare_base=compare_base, checkpoint=checkpoint
        )
    if as_json:
        echo_json({"id": handle.id, "prompt": text, **answers})
        return
    if not compare_base:
        click.echo(answers["answer"])
        return
    rows = [(f"with {handle.id}'s adapter", answers["answer"]), ("base model alone", answers["base_answer"])]
    width = max(len(label) for label, _ in rows)
    for label, answer in rows:
        click.echo(f"{label.ljust(width)} | " + answer.replace("\n", "\n" + " " * width + " | "))

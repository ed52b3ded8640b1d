"""`radeonlab completion bash|zsh|fish`: the shell completion script (verbs, options, job ids)."""

from __future__ import annotations

import click


@click.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def command(shell: str) -> None:
    """Print the completion script for SHELL. Job ids complete from this laptop's cache (no SSH).

    \b
    bash:  eval "$(radeonlab completion bash)"        (or save it under ~/.local/share/bash-completion/)
    zsh:   eval "$(radeonlab completion zsh)"
    fish:  radeonlab completion fish > ~/.config/fish/completions/radeonlab.fish
    """
    from click.shell_completion import get_completion_class

    from radeonlab.cli import cli

    cls = get_completion_class(shell)
    assert cls is not None
    click.echo(cls(cli, {}, "radeonlab", "_RADEONLAB_COMPLETE").source())

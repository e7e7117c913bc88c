"""The commands about the plugin itself: version and completion (see :mod:`.app`)."""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

import dispatch_kubeflow as dk
from dispatch_kubeflow.cli.app import SCRIPT, cli, out

COMPLETE_VAR = "_KUBECTL_DISPATCH_COMPLETE"
"""The variable a completion script sets when it asks for completions. Click's default is
made from the program's name, ``kubectl dispatch``, with its space: no shell can set it."""
SHELLS = ("bash", "zsh", "fish")


@cli.command("version")
def version() -> None:
    """Print the version (as --version)."""
    out(f"{SCRIPT} {dk.__version__}")


@cli.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the completion script of SHELL, for the command kubectl-dispatch.

    \b
    bash:  source <(kubectl dispatch completion bash)
    zsh:   source <(kubectl dispatch completion zsh)   (after compinit)
    fish:  kubectl dispatch completion fish | source
    """
    out(script(shell))


def script(shell: str) -> str:
    cls = get_completion_class(shell)
    assert cls is not None  # click ships every shell of SHELLS
    return cls(cli, {}, SCRIPT, COMPLETE_VAR).source()

"""``kubectl dispatch``: a kubectl plugin for the people who operate dispatch jobs.

Installed with the ``cli`` extra (``pip install 'dispatch-kubeflow[cli]'``) as the console
script ``kubectl-dispatch``, which kubectl's plugin discovery finds on ``PATH``. Every
command is built on the public API (:class:`dispatch_kubeflow.Backend`); see
``docs/kubectl.md`` for a walk-through and :mod:`dispatch_kubeflow.cli.app` for the exit
codes.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

import click
from click.shell_completion import shell_complete

import dispatch_kubeflow as dk
from dispatch_kubeflow.cli import about, act, look  # noqa: F401 - each registers its commands
from dispatch_kubeflow.cli.about import COMPLETE_VAR
from dispatch_kubeflow.cli.app import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    PROG,
    SCRIPT,
    cli,
)
from dispatch_kubeflow.core import errors


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def explain(exc: dk.DispatchError) -> str:
    """One line: what is wrong and how to fix it."""
    msg = one_line(str(exc))
    if isinstance(exc, errors.KubeUnreachable):
        return (f"cannot reach the cluster: {network_cause(exc)}; check cluster.kubeconfig "
                "in the settings (or --kubeconfig / --context) and that the API server is up")
    if isinstance(exc, errors.KubeForbidden):
        return (f"the cluster refused: {msg}; the kubeconfig's user needs the RBAC of "
                "docs/install-admission.md")
    if isinstance(exc, dk.ObserveOnlyError):
        return f"{msg}; 'kubectl dispatch preflight' shows every capability"
    return msg


def network_cause(exc: BaseException) -> str:
    """The innermost OS-level reason of a network failure ("Connect call failed ...")."""
    cause: BaseException | None = exc
    best = str(exc)
    while cause is not None:
        inner = getattr(cause, "os_error", None)  # aiohttp's connector errors carry it
        if isinstance(inner, OSError):
            cause = inner
        if isinstance(cause, OSError) and str(cause):
            best = one_line(str(cause))
        cause = cause.__cause__ or cause.__context__
    return best


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (see :mod:`dispatch_kubeflow.cli.app`)."""
    # The library logs its retries; a person at a terminal wants the one-line outcome.
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s: %(message)s")
    instruction = os.environ.get(COMPLETE_VAR)
    if instruction:  # a completion script asks (see cli.about)
        return shell_complete(cli, {}, SCRIPT, COMPLETE_VAR, instruction)
    try:
        rv = cli.main(args=list(argv) if argv is not None else sys.argv[1:], prog_name=PROG,
                      standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help() if exc.ctx else "")
        return 0
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx else PROG
        click.echo(f"error: {one_line(exc.format_message())} (see '{where} --help')", err=True)
        return EXIT_USAGE
    except click.Abort:
        return EXIT_INTERRUPTED
    except click.ClickException as exc:
        click.echo(f"error: {one_line(exc.format_message())}", err=True)
        return exc.exit_code
    except dk.DispatchError as exc:
        click.echo(f"error: {explain(exc)}", err=True)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return int(rv or 0)


def run() -> None:
    """The console script's entry point."""
    sys.exit(main())


__all__ = ["main", "run"]

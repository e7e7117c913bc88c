"""The library's console scripts, which first check their extra (core.extras)."""

from __future__ import annotations

from dispatch_kubeflow.core import extras


def kubectl_dispatch() -> None:
    """``kubectl-dispatch``: the kubectl plugin (the ``cli`` extra)."""
    extras.require("kubectl-dispatch", "cli", extras.CLI)
    from dispatch_kubeflow.cli import run  # after the check: it imports click

    run()

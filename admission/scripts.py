"""The controller's console script, which first checks its extra (core.extras)."""

from __future__ import annotations

from dispatch_kubeflow.core import extras


def dispatch_admission() -> int:
    """``dispatch-admission`` (the ``admission`` extra)."""
    extras.require("dispatch-admission", "admission", extras.ADMISSION)
    from admission.cli import main  # after the check: it imports kopf and the rest

    return main()

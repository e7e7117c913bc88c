"""The checks, one module per guarantee they check, imported here in the order they run.

Importing a module registers its checks (:func:`~dispatch_kubeflow.conformance.registry.
check`) in the order they are defined; :func:`all_checks` is the result.
"""

from __future__ import annotations

from dispatch_kubeflow.conformance.checks import capabilities, gate, hold, overlap, stop
from dispatch_kubeflow.conformance.registry import Check, registered

__all__ = ["all_checks", "capabilities", "gate", "hold", "overlap", "stop"]


def all_checks() -> tuple[Check, ...]:
    """Every check, in the order it runs."""
    return registered()

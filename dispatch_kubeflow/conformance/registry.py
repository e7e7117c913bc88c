"""The one list of checks: each is registered where it is defined, with :func:`check`.

Checks run in the order they are registered, which is the order they are defined in a
module and the order :mod:`dispatch_kubeflow.conformance.checks` imports the modules.
Each check needs the ones before it (the job it started, the identity it read).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from dispatch_kubeflow.conformance.failed import CheckFailed
from dispatch_kubeflow.conformance.suite import Suite

__all__ = ["Check", "CheckFailed", "CheckFn", "check", "registered"]

CheckFn = Callable[[Suite], Awaitable[str]]
"""A check: does what it checks on the suite's job, returns what it saw or raises
:class:`CheckFailed`."""


@dataclass(frozen=True, slots=True)
class Check:
    """A registered check: its name, the guarantee it checks, and the code that checks it."""

    name: str
    guarantee: str
    run: CheckFn


_REGISTRY: dict[str, Check] = {}


def check(name: str, guarantee: str) -> Callable[[CheckFn], CheckFn]:
    """Register the decorated coroutine function as the check ``name``, after those so far."""

    def register(fn: CheckFn) -> CheckFn:
        if name in _REGISTRY:
            raise ValueError(f"check {name!r} is registered twice "
                             f"({_REGISTRY[name].run.__qualname__} and {fn.__qualname__})")
        _REGISTRY[name] = Check(name, guarantee, fn)
        return fn

    return register


def registered() -> tuple[Check, ...]:
    """Every check registered so far, in the order it runs."""
    return tuple(_REGISTRY.values())

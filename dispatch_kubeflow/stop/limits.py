"""StopJob's limits: how long it waits, and when concurrent stops are a crowd."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Limits:
    """StopJob's waits and its crowd's size (see :mod:`dispatch_kubeflow.stop`). A Backend
    passes its own (today's defaults); a test passes shorter ones instead."""

    pass_wait: float = 1.0
    """How long a kind whose list or watch failed waits before it is listed again."""
    gc_grace: float = 1.0
    """How long the garbage collector gets to delete an object whose owners are gone before
    StopJob deletes it itself (at most a quarter of ``timeouts.stopJob``)."""
    crowd: int = 3
    """How many concurrent stops of one Backend start an informer for a kind (see
    :mod:`dispatch_kubeflow.stop.sharing`) and share their lists (:mod:`.rounds`)."""


LIMITS = Limits()
"""Today's limits: what a Backend's stops use."""

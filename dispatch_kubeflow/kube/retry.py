"""Which API failures are transient, and for how long a request rides them out.

An API server that restarts, rolls, or sheds load answers for a while with a refused
connection, ``503 Service Unavailable`` or ``429 Too Many Requests`` (priority and
fairness). A request retries those with a jittered backoff for the transport's window
(``timeouts.transient``), and no longer than the caller's deadline when it runs under
:func:`deadline` (every call of the library that takes one does, through
``waits.within``). When the time is up the last error surfaces as it is: a typed error,
before the deadline rather than a ``DeadlineExceeded`` at it.

What is safe to send again:

- a request that never reached the server (the connection was refused), and a 429 or a
  503, which the server answers before it runs the request: any verb;
- anything else a network or a server fails (500, 502, 504, a connection lost after the
  request went out): reads only (GET), because a write may have taken effect. The
  library's writes would survive it (each carries a precondition or is idempotent), but a
  caller should see the server's own answer to its write, not the 409 of its echo;
- nothing that will not mend by itself (a TLS failure).

A failure with no answer says both itself (:class:`~dispatch_kubeflow.core.errors.
KubeNoAnswer`'s ``transient`` and ``sent``, set by the transport from the network error's
type); an answered one is judged by its status.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Iterator
from contextvars import ContextVar

from dispatch_kubeflow.core import errors

_DEADLINE: ContextVar[float | None] = ContextVar("dispatch_kubeflow_deadline", default=None)
"""The caller's deadline on the running loop's clock, :func:`now` (None: none set)."""

FIRST, MAX = 0.2, 3.0
"""The backoff: 0.2 s, doubling, at most 3 s between tries (each jittered by ±20 %)."""
MARGIN = 0.5
"""A retry is not started less than this before the deadline: the error surfaces first."""


def now() -> float:
    """The clock of deadlines and back-offs: the running loop's, which its timers and
    sleeps keep too (monotonic; a test's loop may skip its waits)."""
    return asyncio.get_running_loop().time()


@contextlib.contextmanager
def deadline(at: float | None) -> Iterator[None]:
    """Requests inside the block retry transient failures until ``at`` (:func:`now`) at most;
    an enclosing, earlier deadline stays in force."""
    outer = _DEADLINE.get()
    token = _DEADLINE.set(at if outer is None or (at is not None and at < outer) else outer)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def transient(exc: errors.KubeError, method: str) -> bool:
    """Whether ``exc``, the answer to a ``method`` request, may be retried (module doc)."""
    if exc.status in (429, 503):
        return True
    if isinstance(exc, errors.KubeNoAnswer):
        # The error's type says whether asking again may help (a rejected certificate will
        # not) and whether the request may have gone out (a refused connection sent nothing).
        return exc.transient and (method == "GET" or not exc.sent)
    return method == "GET" and exc.status in (500, 502, 504)


class Backoff:
    """The tries of one request: when to try again, or that the time is up."""

    def __init__(self, window: float) -> None:
        caller = _DEADLINE.get()
        # The window bounds every request; a caller's deadline can only make it shorter.
        own = now() + window
        self.until = own if caller is None else min(own, caller)
        self.delay = FIRST
        self.tries = 1

    def next(self, exc: errors.KubeError) -> float | None:
        """Seconds to wait before the next try, or None when the error should surface."""
        wait = self.delay * random.uniform(0.8, 1.2)
        if exc.status == 429:
            wait = max(wait, float(exc.retry_after or 0))
        if now() + wait > self.until - MARGIN:
            return None
        self.delay = min(self.delay * 2, MAX)
        self.tries += 1
        return wait

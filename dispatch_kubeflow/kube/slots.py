"""The requests' connections, handed out oldest call first.

A :class:`~dispatch_kubeflow.kube.Kube` sends ordinary requests over a pool of a fixed size
(:mod:`.session`); a request waits here for one of its connections. When more requests want
one than there are, the one whose call began first gets the next: a call marks its requests
with when it began (:func:`oldest_first`; a request outside any such call counts from its
own arrival, which is plain first come, first served). Why: a crowd of calls on one Backend
(StopJob of 1,000 at once, issue 28) each sends a chain of requests, one after another, and
a chain whose every link queues behind all the others' takes the whole crowd's time, every
call ending with the last. Served oldest call first, the first calls' chains run through
while later ones wait, so a call's latency is more what the calls begun before it cost than
the whole crowd's; the crowd's wall time stays what the API server's pace makes it (at
N = 1,000 stops each stop's median went from 88 s of the crowd's 89 to 69 s of 85: each
stop still waits for the kubelet to remove its pods, docs/scale-history.md). A request of
no call, arriving while a crowd waits, goes after the calls begun before it. A read that
every call may wait on (an informer's list, marked :data:`AHEAD`) goes before them all:
queued behind the crowd, it made every stop that follows the informer wait for the whole
crowd (issue 28: the JobSets' informer of 200 stops at once was listed 6 s in, and every
stop saw its JobSet go at that moment).

A slot is handed from the request leaving it straight to the waiter next in line, so a
request arriving meanwhile cannot take it out of turn.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import TracebackType

CALL_BEGAN: ContextVar[float | None] = ContextVar("dispatch_kubeflow_call_began", default=None)
"""When the call that sends the requests of this context began (the event loop's clock), or
None: each request counts from its own arrival. Tasks a call starts inherit it."""

AHEAD = float("-inf")
"""The mark of a read that calls wait on rather than one call's own (an informer's list): it
is served before every call's requests."""


@contextmanager
def oldest_first() -> Iterator[None]:
    """Requests sent inside the block (and by tasks started inside it) wait for a connection
    as of now; inside a call marked already, as of that call."""
    if CALL_BEGAN.get() is not None:
        yield
        return
    token = CALL_BEGAN.set(asyncio.get_running_loop().time())
    try:
        yield
    finally:
        CALL_BEGAN.reset(token)


class Slots:
    """``limit`` connections, each held by one request at a time, handed out oldest call
    first (see the module docstring). ``async with slots:`` holds one."""

    def __init__(self, limit: int) -> None:
        self.free = limit
        self._waiting: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        """Among requests of calls begun at the same time (one call's), arrival order."""

    async def __aenter__(self) -> None:
        if self.free > 0 and not self._waiting:
            self.free -= 1
            return
        loop = asyncio.get_running_loop()
        began = CALL_BEGAN.get()
        turn: asyncio.Future[None] = loop.create_future()
        heapq.heappush(self._waiting, (loop.time() if began is None else began,
                                       next(self._order), turn))
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._hand_on()  # handed the slot, then cancelled: the next one gets it
            raise

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        self._hand_on()

    def _hand_on(self) -> None:
        """The slot given up goes to the oldest waiter still waiting, or back to the free."""
        while self._waiting:
            _, _, turn = heapq.heappop(self._waiting)
            if not turn.done():  # a cancelled waiter's turn is done, and skipped
                turn.set_result(None)
                return
        self.free += 1

    @property
    def waiting(self) -> int:
        """How many requests wait for a connection (cancelled ones not yet skipped too)."""
        return len(self._waiting)

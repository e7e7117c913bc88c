"""An event loop whose clock jumps over waits: a wait takes no time, work takes its time.

For unit tests of orchestration against the in-memory fake (tests/unit/fake_kube.py),
whose timing is the library's own (deadlines, graces, back-offs, a watch's timeout) and
whose every await is in the loop. Whenever the loop would sleep until its next timer, the
clock jumps to that timer instead; a test that waits out a 0.5 s deadline then costs its
CPU only. The clock is the real monotonic clock plus every wait skipped, so time spent
working still counts: code that spins (a pass that wakes itself at once, again and again)
runs out its deadline as it would for real, instead of hanging at a clock that never moves.
The library keeps every clock it waits on on ``loop.time()`` for that reason.

Not for tests with real I/O (sockets, subprocesses, threads): the clock does not wait for
them, so their timeouts would fire at once. Such a test keeps the ordinary loop. A test
opts in with the ``virtual_time`` marker (tests/unit/conftest.py gives it this loop).
"""

from __future__ import annotations

import asyncio
import selectors
import time


class _JumpingSelector(selectors.DefaultSelector):
    """The loop's selector: it polls, and when nothing is ready and the loop would wait
    ``timeout`` seconds for its next timer, it moves the clock instead of waiting."""

    def __init__(self) -> None:
        super().__init__()
        self.skipped = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready or (timeout is not None and timeout <= 0):
            return ready
        if timeout is None:  # no timer at all: only I/O can wake the loop
            return super().select(None)
        self.skipped += timeout
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self._virtual = _JumpingSelector()
        super().__init__(self._virtual)

    def time(self) -> float:
        return time.monotonic() + self._virtual.skipped

"""The pod's own fence (``dispatch-fence``): a pod's processes run only on a share of its
worker's permit, and stop when the share runs out, whether or not anyone can be reached.

In a worker cluster (MultiKueue, docs/multikueue-fence.md) every dispatch pod carries this
as a native sidecar. Before the workload starts it asks the worker's agent "how long" until
the answer is positive (the workload's container waits for the sidecar's startup probe);
then it asks every length / 3. Each answer is measured from *before* the question was sent,
on the pod's own clock (core.permit.Share), never from the answer's arrival, which may be
late. A watchdog, apart from the questions, stops the pod's processes the moment the share
runs out: an agent that hangs, a worker cut off from the manager and a dead agent all end in
the same place, at most one permit length after the last renewal the manager accepted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from dispatch_kubeflow.core.permit import Share

log = logging.getLogger(__name__)

Ask = Callable[[], Awaitable[float]]
"""One question to the agent: the seconds it grants (0: none). May hang; raises OSError or
TimeoutError when the agent cannot be reached (anything else is a bug, and stops the pod)."""


class Fence:
    """One pod's fence: ``ask`` the agent, ``stop`` the pod's processes (every process of
    the pod but the fence, in its shared process namespace)."""

    def __init__(self, ask: Ask, stop: Callable[[], None], *, length: float,
                 clock: Callable[[], float] = time.monotonic,
                 retry: float = 1.0) -> None:
        self._ask, self._stop = ask, stop
        self.period = length / 3
        self._clock = clock
        self._retry = retry
        self.share = Share()
        self.started = asyncio.Event()
        """Set once the first positive answer came: the startup probe's answer."""
        self._extended = asyncio.Event()
        self.stopped = False

    async def question(self) -> bool:
        """One question; whether it extended the share. A failed or refused question
        extends nothing: the share runs out by itself."""
        asked = self._clock()  # before the question is sent: the share runs from here
        try:
            seconds = await self._ask()
        except (OSError, TimeoutError) as exc:
            log.warning("cannot ask the agent how long: %s; %.0f s of the share left",
                        exc, max(0.0, self.share.until - self._clock()))
            return False
        if seconds <= 0:
            return False
        before = self.share.until
        self.share.granted(asked, seconds)
        if self.share.until > before:
            self._extended.set()
        return self.share.until > before

    async def run(self) -> None:
        """Ask until the first share, then keep asking while the watchdog waits for the
        share to run out; returns once the pod's processes were stopped. However it ends
        (a bug in a question, cancelled with the pod), the processes are stopped: none may
        outlive the fence that measures their share."""
        try:
            # Polls the agent, which has nothing to notify with: a pod may not start
            # until an answer says so.
            while True:
                if await self.question():
                    break
                await asyncio.sleep(self._retry)
            self.started.set()
            async with asyncio.TaskGroup() as tasks:
                asker = tasks.create_task(self._keep_asking())
                await self._watch()
                asker.cancel()
        finally:
            if not self.stopped:
                self._halt()

    def _halt(self) -> None:
        self.stopped = True
        self._stop()

    async def _keep_asking(self) -> None:
        while True:
            await asyncio.sleep(self.period)
            # A question that hangs must not hold the next one back past the share's end.
            try:
                await asyncio.wait_for(self.question(), self.period)
            except TimeoutError:
                log.warning("the agent did not answer within %.0f s", self.period)

    async def _watch(self) -> None:
        while not self.share.expired(self._clock()):
            self._extended.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._extended.wait(),
                                       max(0.0, self.share.until - self._clock()))
        log.warning("the share of the worker's permit ran out: stopping the pod's processes")
        self._halt()

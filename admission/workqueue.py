"""A keyed work queue with client-go's guarantees, for level-triggered reconciling.

A key is queued at most once; a key being processed is never handed to a second worker at
the same time (if it is added meanwhile it is processed again afterwards); failed keys come
back after an exponential backoff.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from dispatch_kubeflow.core import errors

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    def __init__(self, *, base_delay: float = 0.1, max_delay: float = 30.0) -> None:
        self._queue: asyncio.Queue[K] = asyncio.Queue()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._failures: dict[K, int] = {}
        self._timers: dict[K, asyncio.TimerHandle] = {}
        self.base_delay = base_delay
        self.max_delay = max_delay

    def add(self, key: K) -> None:
        if key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.put_nowait(key)

    def add_after(self, key: K, delay: float) -> None:
        """Add ``key`` after ``delay`` seconds (an earlier pending timer is replaced)."""
        old = self._timers.pop(key, None)
        if old is not None:
            old.cancel()
        loop = asyncio.get_running_loop()
        self._timers[key] = loop.call_later(delay, self._fire, key)

    def cancel_after(self, key: K) -> None:
        """Drop ``key``'s pending timer, if any (a key queued already stays queued)."""
        old = self._timers.pop(key, None)
        if old is not None:
            old.cancel()

    def _fire(self, key: K) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def retry(self, key: K) -> float:
        """Re-add after this key's next backoff delay; returns the delay."""
        n = self._failures.get(key, 0)
        self._failures[key] = n + 1
        delay = min(self.base_delay * float(2**n), self.max_delay)
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        self._failures.pop(key, None)

    async def get(self) -> K:
        key = await self._queue.get()
        self._dirty.discard(key)
        self._processing.add(key)
        return key

    def done(self, key: K) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._queue.put_nowait(key)

    def __len__(self) -> int:
        return self._queue.qsize()

    def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()


async def serve(queue: WorkQueue[K], reconcile: Callable[[K], Awaitable[bool]], *, what: str,
                failed: Callable[[], None] = lambda: None) -> None:
    """One worker: take a key, reconcile it, forever. ``reconcile`` answers True when the
    key is done (its backoff forgotten) and False when it must come back after its backoff.
    A failure (an API error, or a bug: logged with its traceback) brings the key back after
    its backoff too and calls ``failed`` (a metric); one key's failure never stops the
    worker, nor the others' keys."""
    while True:
        key = await queue.get()
        try:
            if await reconcile(key):
                queue.forget(key)
            else:
                queue.retry(key)
        except asyncio.CancelledError:
            raise
        except errors.KubeError as exc:
            delay = queue.retry(key)
            failed()
            log.warning("%s %s: %s; retrying in %.1fs", what, _name(key), exc, delay)
        except Exception:
            delay = queue.retry(key)
            failed()
            log.exception("%s %s: unexpected failure; retrying in %.1fs", what, _name(key),
                          delay)
        finally:
            queue.done(key)


def _name(key: object) -> str:
    return "/".join(map(str, key)) if isinstance(key, tuple) else str(key)

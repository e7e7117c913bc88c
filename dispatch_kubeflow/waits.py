"""Waiting without polling: deadlines, and watches that end when a condition holds.

Every wait of the library is a watch (:func:`wait_for`, :func:`wait_for_all`): it lists
once, then reacts to the server's events; nothing re-reads on a timer. (The only sleeps
are the preflight probe's observation window and the back-off after a failed request.)
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from dispatch_kubeflow.errors import DeadlineExceeded, SpecError
from dispatch_kubeflow.kube import KubeAPI, Resource, WatchEvent, retry
from dispatch_kubeflow.model import ObjectState

T = TypeVar("T")
Obj = dict[str, Any]


def deadline_after(timeout: timedelta | float) -> datetime:
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
    return datetime.now(UTC) + timedelta(seconds=seconds)


def wait_window(states: Sequence[str], deadline: datetime | None,
                timeout: timedelta | float | None) -> tuple[frozenset[ObjectState],
                                                             datetime | None]:
    """A wait's states and its deadline (``timeout`` seconds from now when given), checked:
    the one rule Backend.wait and the testing FakeBackend's apply alike."""
    if timeout is not None:
        if deadline is not None:
            raise SpecError("timeout: give deadline or timeout, not both", field="timeout")
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
            raise SpecError(f"timeout: seconds from now, 0 or more; got {timeout!r}",
                            field="timeout")
        deadline = deadline_after(seconds)
    want = frozenset(ObjectState(s) for s in states)
    if not want:
        raise SpecError("states: name at least one state to wait for", field="states")
    return want, deadline


def remaining(deadline: datetime | None) -> float | None:
    """Seconds left until ``deadline`` (None: no deadline). Naive datetimes are UTC."""
    if deadline is None:
        return None
    if deadline.tzinfo is None:
        deadline = deadline.replace(tzinfo=UTC)
    return (deadline - datetime.now(UTC)).total_seconds()


@asynccontextmanager
async def within(deadline: datetime | None, what: str, *,
                 field: str = "deadline") -> AsyncIterator[None]:
    """Run the block until ``deadline``; past it, raise DeadlineExceeded naming ``what``.
    A naive ``deadline`` (no time zone) is a SpecError naming ``field``: which zone it
    meant is a guess this library does not make.

    Only this deadline's own expiry becomes DeadlineExceeded. A TimeoutError raised inside
    the block for any other reason (a request's or a stream's own timeout) is not the
    caller's deadline and passes through as it is; a DeadlineExceeded of a nested, earlier
    deadline passes through too.
    """
    if deadline is not None and deadline.tzinfo is None:
        raise SpecError(f"{field}: {deadline.isoformat()} has no time zone; give an aware "
                        "time, such as datetime.now(UTC) + timedelta(minutes=5)", field=field)
    left = remaining(deadline)
    if left is not None and left <= 0:
        raise DeadlineExceeded(f"{what}: the deadline had passed before the call started")
    timer = asyncio.timeout(left)
    at = None if left is None else retry.now() + left
    try:
        async with timer:
            with retry.deadline(at):  # requests retry transient failures until then at most
                yield
    except TimeoutError as exc:
        if isinstance(exc, DeadlineExceeded) or not timer.expired():
            raise
        raise DeadlineExceeded(f"{what}: the deadline passed") from None


async def wait_for(
    kube: KubeAPI,
    res: Resource,
    namespace: str | None,
    done: Callable[[Mapping[str, Obj]], T | None],
    *,
    label_selector: str | None = None,
    field_selector: str | None = None,
) -> T:
    """Watch ``res`` and return ``done(objects by name)`` once it is not None.

    The caller bounds the wait (for example with :func:`within`). ``done`` sees the
    current set of matching objects after the first list and after every event.
    """
    current: dict[str, Obj] = {}
    stream = kube.observe(res, namespace, label_selector=label_selector,
                          field_selector=field_selector, timeout_seconds=60)
    try:
        async for ev in stream:
            if ev.type == "SYNC":
                current = {o["metadata"]["name"]: o for o in ev.items}
            elif ev.type == "DELETED":
                current.pop(ev.object["metadata"]["name"], None)
            else:
                current[ev.object["metadata"]["name"]] = ev.object
            result = done(current)
            if result is not None:
                return result
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
    raise AssertionError("observe() never ends by itself")


@dataclass(frozen=True, slots=True)
class Watched:
    """One list to keep current while waiting: a kind, where, and which objects."""

    res: Resource
    namespace: str | None
    label_selector: str | None = None
    field_selector: str | None = None


async def cancel_all(tasks: Sequence[asyncio.Task[Any]]) -> None:
    """Cancel background tasks and wait until they have ended, whatever they raised."""
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def raise_errors(found: Sequence[BaseException | None]) -> None:
    """Raise the errors in ``found`` (Nones are none): one as itself, so a caller's
    ``except`` of the library's types still works; several as a group, none dropped."""
    errors = [e for e in found if e is not None]
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise BaseExceptionGroup("errors of tasks", errors)


@asynccontextmanager
async def task_group() -> AsyncIterator[asyncio.TaskGroup]:
    """An :class:`asyncio.TaskGroup` whose lone error (a task's, or the block's own) is
    raised as itself, not in a group: the block's callers catch the library's errors by
    type, as before its tasks had an owner. Several errors are raised as the group."""
    lone: BaseException | None = None
    try:
        async with asyncio.TaskGroup() as group:
            yield group
    except BaseExceptionGroup as raised:
        if len(raised.exceptions) != 1:
            raise
        lone = raised.exceptions[0]
    if lone is not None:
        raise lone  # outside the except: its context stays what it was


class Owned:
    """The tasks an object owns until it closes (a Backend's informers, its crowd's shared
    lists): for an owner whose life is not one block, so no TaskGroup can be (and an error
    of one of its tasks must not cancel the others, as a TaskGroup's would). :meth:`close`
    cancels what still runs, waits for every task, and raises what any ended with (other
    than its cancellation): no task outlives its owner, and no error is lost."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._ended: list[BaseException] = []

    def start(self, coro: Coroutine[Any, Any, T], *,
              context: contextvars.Context | None = None) -> asyncio.Task[T]:
        task = asyncio.create_task(coro, context=context)
        self._tasks.add(task)
        task.add_done_callback(self._end)
        return task

    def _end(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._ended.append(task.exception())  # type: ignore[arg-type]

    async def close(self) -> None:
        running = list(self._tasks)
        for t in running:
            t.cancel()
        if running:
            await asyncio.wait(running)
        ended, self._ended = self._ended, []
        raise_errors(ended)


async def wait_for_all(
    kube: KubeAPI,
    watched: Sequence[Watched],
    done: Callable[[Sequence[Mapping[str, Obj]]], T | None],
) -> T:
    """Watch several lists at once; return ``done(objects by name, per list)`` once not None.

    ``done`` is first called when every list has been read, then after every event of any
    of them. Each list is one watch (:meth:`KubeAPI.observe`), so nothing is polled. The caller
    bounds the wait (for example with :func:`within`).
    """
    queue: asyncio.Queue[tuple[int, WatchEvent | BaseException]] = asyncio.Queue()

    async def pump(i: int, w: Watched) -> None:
        stream = kube.observe(w.res, w.namespace, label_selector=w.label_selector,
                              field_selector=w.field_selector, timeout_seconds=60)
        try:
            async for ev in stream:
                queue.put_nowait((i, ev))
        except Exception as exc:  # handed to the waiter, which raises it
            queue.put_nowait((i, exc))
        finally:
            await stream.aclose()  # type: ignore[attr-defined]

    current: list[dict[str, Obj]] = [{} for _ in watched]
    synced = [False] * len(watched)
    # The wait owns its watches: a watch's failure is handed on through the queue, in its
    # place among the events; anything else a watch ends with is raised by the group.
    async with task_group() as group:
        tasks = [group.create_task(pump(i, w)) for i, w in enumerate(watched)]
        try:
            while True:
                i, item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                if item.type == "SYNC":
                    current[i] = {o["metadata"]["name"]: o for o in item.items}
                    synced[i] = True
                elif item.type == "DELETED":
                    current[i].pop(item.object["metadata"]["name"], None)
                else:
                    current[i][item.object["metadata"]["name"]] = item.object
                if all(synced) and queue.empty():
                    result = done(current)
                    if result is not None:
                        return result
        finally:
            for t in tasks:
                t.cancel()  # watches never end by themselves: the group would wait forever
    raise AssertionError("unreachable: the loop returns or raises")

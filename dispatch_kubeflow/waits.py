"""Waiting without polling: deadlines, and watches that end when a condition holds."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from dispatch_kubeflow.errors import DeadlineExceeded
from dispatch_kubeflow.kube import Kube, Resource

T = TypeVar("T")
Obj = dict[str, Any]


def deadline_after(timeout: timedelta | float) -> datetime:
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
    return datetime.now(UTC) + timedelta(seconds=seconds)


def remaining(deadline: datetime | None) -> float | None:
    """Seconds left until ``deadline`` (None: no deadline). Naive datetimes are UTC."""
    if deadline is None:
        return None
    if deadline.tzinfo is None:
        deadline = deadline.replace(tzinfo=UTC)
    return (deadline - datetime.now(UTC)).total_seconds()


@asynccontextmanager
async def within(deadline: datetime | None, what: str) -> AsyncIterator[None]:
    """Run the block until ``deadline``; past it, raise DeadlineExceeded naming ``what``."""
    left = remaining(deadline)
    if left is not None and left <= 0:
        raise DeadlineExceeded(f"{what}: the deadline had passed before the call started")
    try:
        async with asyncio.timeout(left):
            yield
    except TimeoutError as exc:
        if isinstance(exc, DeadlineExceeded):
            raise
        raise DeadlineExceeded(f"{what}: the deadline passed") from None


async def wait_for(
    kube: Kube,
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

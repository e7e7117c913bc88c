"""The recorder: every call of a run, timed, typed, bounded, as the history's
:class:`~chaos.history.Operation` records."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from chaos.history import (
    OP_DELETE_JOBSET,
    OP_DELETE_WORKLOAD,
    OP_FIND,
    OP_HOLD,
    OP_INSPECT,
    OP_OPEN,
    OP_RELEASE,
    OP_START,
    OP_STOP,
    Operation,
    append_operation,
)
from dispatch_kubeflow import StopReport

# Seconds each call may take before it counts as hung (its absolute deadline).
DEADLINES = {OP_START: 150.0, OP_OPEN: 150.0, OP_HOLD: 60.0, OP_RELEASE: 60.0,
             OP_STOP: 150.0, OP_INSPECT: 30.0, OP_FIND: 30.0, OP_DELETE_JOBSET: 30.0,
             OP_DELETE_WORKLOAD: 30.0}
# The library gets the deadline itself where it takes one; the runner waits this much
# longer before it calls the call hung (the checker allows 1 s past the deadline).
HUNG_GRACE = 3.0


def now_us() -> int:
    """The ledger's clock: CLOCK_REALTIME in µs."""
    return time.time_ns() // 1000


class Recorder:
    """Records every call as a :class:`~chaos.history.Operation` (and appends it to
    ``path`` when given). A call not done by its deadline plus :data:`HUNG_GRACE` is
    abandoned and recorded as never returned; an error is recorded by its class name."""

    def __init__(self, path: Path | None = None, *, hung_grace: float = HUNG_GRACE) -> None:
        self.path = path
        self.hung_grace = hung_grace
        self.ops: list[Operation] = []

    async def call(self, op: str, job: str, make: Callable[[], Awaitable[Any]], *,
                   seconds: float, args: dict[str, Any] | None = None,
                   summary: Callable[[Any], Any] = lambda x: x) -> tuple[Operation, Any]:
        call_us = now_us()
        deadline_us = call_us + int(seconds * 1_000_000)
        rec = Operation(id=len(self.ops) + 1, op=op, job=job, call_us=call_us,
                        args=dict(args or {}), deadline_us=deadline_us)
        value: Any = None
        abandon = asyncio.timeout(seconds + self.hung_grace)
        try:
            async with abandon:
                value = await make()
        except Exception as exc:
            # Only this timer's own expiry is a hang. The library's DeadlineExceeded is a
            # TimeoutError too, and the typed answer a call gives at its deadline.
            if not (isinstance(exc, TimeoutError) and abandon.expired()):
                rec = _replace(rec, return_us=now_us(), error=type(exc).__name__,
                               error_message=str(exc)[:500])
        else:
            rec = _replace(rec, return_us=now_us(), result=_jsonable(summary(value)))
        self.ops.append(rec)
        if self.path is not None:
            append_operation(self.path, rec)
        return rec, value

    def record(self, op: str, call_us: int, result: Any, *,
               args: dict[str, Any] | None = None) -> Operation:
        """A fault's record: it ran from ``call_us`` to now."""
        rec = Operation(id=len(self.ops) + 1, op=op, job="", call_us=call_us,
                        return_us=now_us(), args=dict(args or {}), result=_jsonable(result))
        self.ops.append(rec)
        if self.path is not None:
            append_operation(self.path, rec)
        return rec


def _replace(op: Operation, **kw: Any) -> Operation:
    return Operation(**{**asdict(op), **kw})


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)


def stop_summary(rep: StopReport) -> dict[str, Any]:
    return {"stopped": len(rep.stopped), "alive": len(rep.alive), "unproven": len(rep.unproven)}

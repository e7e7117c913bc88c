"""admission.fence (a pod's own fence): the share runs from before each question; the pod's
processes stop when the share runs out, whether the agent answers, refuses, fails or hangs;
the workload starts only after a positive answer."""

from __future__ import annotations

import asyncio
import time

import pytest

from admission.fence import Fence

pytestmark = pytest.mark.asyncio


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


async def test_a_share_runs_from_before_the_question_not_from_the_answer() -> None:
    clock = Clock()

    async def slow_agent() -> float:
        clock.now += 7  # the answer arrives 7 s after the question was sent
        return 30.0
    fence = Fence(slow_agent, lambda: None, length=30.0, clock=clock)
    assert await fence.question()
    assert fence.share.until == 50.0 + 30.0


async def test_refusals_and_failures_extend_nothing() -> None:
    clock = Clock()
    answers: list[float | Exception] = [10.0, 0.0, ConnectionRefusedError("agent down")]

    async def agent() -> float:
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a
    fence = Fence(agent, lambda: None, length=30.0, clock=clock)
    assert await fence.question()
    clock.now += 5
    assert not await fence.question()
    assert not await fence.question()
    assert fence.share.until == 60.0
    assert fence.share.expired(60.0)


async def run_until_stopped(fence: Fence, stopped: asyncio.Event, limit: float) -> None:
    task = asyncio.create_task(fence.run())
    try:
        await asyncio.wait_for(stopped.wait(), limit)
        await asyncio.wait_for(task, 1.0)
    finally:
        task.cancel()


async def test_a_hanging_agent_stops_the_pod_when_the_share_runs_out() -> None:
    stopped, stops = asyncio.Event(), []
    first = True

    async def agent() -> float:
        nonlocal first
        if first:
            first = False
            return 0.6
        await asyncio.Event().wait()  # never answers again
        return 0.0

    def stop() -> None:
        stops.append(time.monotonic())
        stopped.set()
    fence = Fence(agent, stop, length=0.6)
    await run_until_stopped(fence, stopped, 5.0)
    assert fence.started.is_set()
    assert len(stops) == 1
    # Never before the share's end; soon after it.
    assert stops[0] >= fence.share.until
    assert stops[0] - fence.share.until < 0.5


async def test_an_answering_agent_keeps_the_pod_running_until_it_refuses() -> None:
    stopped, stops = asyncio.Event(), []
    grant = 0.6
    asked = 0

    async def agent() -> float:
        nonlocal asked
        asked += 1
        return grant

    def stop() -> None:
        stops.append(time.monotonic())
        stopped.set()
    fence = Fence(agent, stop, length=0.6)
    task = asyncio.create_task(fence.run())
    await asyncio.sleep(2.0)  # more than three shares: renewed all along
    assert stops == []
    assert asked >= 6
    grant = 0.0  # the permit is gone: every answer now refuses
    try:
        await asyncio.wait_for(stopped.wait(), 2.0)
    finally:
        task.cancel()
    assert stops[0] >= fence.share.until


async def test_the_workload_waits_for_a_positive_first_answer() -> None:
    answers = [0.0, 0.0, 5.0]
    stops: list[float] = []

    async def agent() -> float:
        return answers.pop(0) if answers else 5.0
    fence = Fence(agent, lambda: stops.append(1.0), length=5.0, retry=0.05)
    task = asyncio.create_task(fence.run())
    try:
        await asyncio.wait_for(fence.started.wait(), 2.0)
        assert answers == []  # started only with the third, positive, answer
        assert stops == []
    finally:
        task.cancel()


async def test_a_fence_that_fails_stops_the_processes_it_measured() -> None:
    stops: list[float] = []
    calls = 0

    async def agent() -> float:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise ValueError("a bug in the question")
        return 30.0
    fence = Fence(agent, lambda: stops.append(1.0), length=0.3)
    with pytest.raises(ExceptionGroup):
        await asyncio.wait_for(fence.run(), 2.0)
    assert stops == [1.0]  # long before the 30 s share ran out

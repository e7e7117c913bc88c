"""The library's waits (dispatch_kubeflow.waits) against the in-memory fake port: they end
on the watch event that makes them true, list again after a 410, and stop at a deadline
with their watches closed. Seeded, so every seed interleaves the calls differently."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from dispatch_kubeflow.errors import DeadlineExceeded
from dispatch_kubeflow.kube.resources import POD, TRAINJOB
from dispatch_kubeflow.kube.transport import WatchBackoff
from dispatch_kubeflow.waits import Watched, deadline_after, wait_for, wait_for_all, within
from tests.unit.fake_kube import FakeKube

pytestmark = [pytest.mark.asyncio, pytest.mark.virtual_time]
SEEDS = range(5)
Obj = dict[str, Any]


def pod(name: str, phase: str = "Pending", **labels: str) -> Obj:
    return {"metadata": {"name": name, "labels": {"job": "j", **labels}},
            "status": {"phase": phase}}


def running(objs: Mapping[str, Obj]) -> Obj | None:
    p = objs.get("p")
    return p if p is not None and p["status"]["phase"] == "Running" else None


async def started(k: FakeKube, verb: str, n: int = 1) -> None:
    """Until the waiter has made ``n`` calls of ``verb``: what the test does next happens
    while it waits, not before."""
    reached = asyncio.Event()

    def count(*_: object) -> None:
        if k.calls[verb] >= n:
            reached.set()

    k.before = count
    count()
    await asyncio.wait_for(reached.wait(), 5)
    k.before = None


@pytest.mark.parametrize("seed", SEEDS)
async def test_wait_for_ends_on_the_watch_event_that_makes_it_true(seed: int) -> None:
    k = FakeKube(seed)
    await k.create(POD, pod("p"), "ns")
    await k.create(POD, pod("other", job="k"), "ns")
    waiter = asyncio.create_task(wait_for(k, POD, "ns", running, label_selector="job=j"))
    await started(k, "watch")
    assert not waiter.done()
    await k.patch(POD, "other", {"status": {"phase": "Running"}}, "ns")  # not selected
    await k.patch(POD, "p", {"status": {"phase": "Succeeded"}}, "ns")
    assert not waiter.done()
    changed = await k.patch(POD, "p", {"status": {"phase": "Running"}}, "ns")
    got = await asyncio.wait_for(waiter, 5)
    assert got["metadata"]["resourceVersion"] == changed["metadata"]["resourceVersion"]
    assert k.calls["list"] == 1  # one list, then the watch: nothing polled
    assert k.open_watches == 0  # returning closed the watch


@pytest.mark.parametrize("seed", SEEDS)
async def test_wait_for_sees_a_deletion(seed: int) -> None:
    k = FakeKube(seed)
    await k.create(POD, pod("p"), "ns")
    waiter = asyncio.create_task(wait_for(
        k, POD, "ns", lambda objs: True if not objs else None, label_selector="job=j"))
    await started(k, "watch")
    await k.patch(POD, "p", {"metadata": {"labels": {"x": "y"}}}, "ns")  # still there
    assert not waiter.done()
    await k.delete(POD, "p", "ns")
    assert await asyncio.wait_for(waiter, 5) is True


async def test_a_410_forces_a_relist_that_finds_what_the_watch_missed() -> None:
    # No yields inside the fake's calls: nothing else runs between end_watches and compact;
    # the back-off after the watch's quick end is not the point.
    k = FakeKube(max_yields=0, watch_backoff=WatchBackoff(first=0.001))
    await k.create(POD, pod("p"), "ns")
    waiter = asyncio.create_task(wait_for(k, POD, "ns", running))
    await started(k, "watch")
    # The watch breaks off; before it is opened again the pod changes and the history is
    # compacted, so watching on from the last version is 410: only a list can tell.
    k.end_watches()
    changed = await k.patch(POD, "p", {"status": {"phase": "Running"}}, "ns")
    k.compact()
    got = await asyncio.wait_for(waiter, 5)
    assert got["metadata"]["resourceVersion"] == changed["metadata"]["resourceVersion"]
    assert k.calls["list"] == 2


async def test_wait_for_stops_at_its_deadline_and_closes_its_watch() -> None:
    k = FakeKube()
    await k.create(POD, pod("p"), "ns")
    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(DeadlineExceeded, match="pod p running: the deadline passed"):
        async with within(deadline_after(0.05), "pod p running"):
            await wait_for(k, POD, "ns", running)
    assert 0.04 <= loop.time() - began < 2
    assert k.calls["watch"] >= 1  # it was watching, not polling, when the deadline came
    assert k.open_watches == 0


async def test_a_deadline_already_passed_sends_nothing() -> None:
    k = FakeKube()
    with pytest.raises(DeadlineExceeded, match="before the call started"):
        async with within(deadline_after(-1), "x"):
            await wait_for(k, POD, "ns", running)
    assert k.requests == 0


@pytest.mark.parametrize("seed", SEEDS)
async def test_wait_for_all_needs_every_list_read_and_then_the_event(seed: int) -> None:
    k = FakeKube(seed)
    await k.create(POD, pod("p"), "ns")
    calls: list[tuple[int, int]] = []
    judged = asyncio.Event()

    def done(lists: Any) -> str | None:
        pods, trainjobs = lists
        calls.append((len(pods), len(trainjobs)))
        judged.set()
        return "both" if pods and "t" in trainjobs else None

    waiter = asyncio.create_task(wait_for_all(
        k, [Watched(POD, "ns", "job=j"), Watched(TRAINJOB, "ns")], done))
    await asyncio.wait_for(judged.wait(), 5)
    assert not waiter.done()
    assert calls == [(1, 0)]  # first judged once both lists were read
    await k.create(TRAINJOB, {"metadata": {"name": "t"}}, "ns")
    assert await asyncio.wait_for(waiter, 5) == "both"
    assert calls[-1] == (1, 1)
    assert k.open_watches == 0

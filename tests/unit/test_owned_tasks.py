"""Every task of the library has an owner (issue 27, item 5): a task group for a block, the
object for a long-lived one (an informer's watch, a crowd's sender), so that no task
outlives its owner and no task's error is lost. Each test here failed before: the error
was dropped by a cancel-and-gather, or the task ran on past its owner."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from datetime import timedelta
from typing import Any

import pytest

from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names
from dispatch_kubeflow.find import KINDS
from dispatch_kubeflow.informer import Feed, Informers
from dispatch_kubeflow.jobs import watch_jobs
from dispatch_kubeflow.kube import Resource, WatchEvent
from dispatch_kubeflow.kube.resources import EVENT, POD, TRAINJOB
from dispatch_kubeflow.stop import Crowd, stop_job
from dispatch_kubeflow.stop.rounds import Rounds
from dispatch_kubeflow.waits import Owned, Watched, task_group, wait_for_all
from tests.unit.fake_kube import FakeKube
from tests.unit.stop_helpers import JOB_ID, NS, QUICK, TJ, labelled

pytestmark = pytest.mark.asyncio

Obj = dict[str, Any]


class Bug(Exception):
    """Not an error of the API: a bug, which must surface."""


class ClosesBadly:
    """A watch stream that lists nothing, then waits, and whose close raises a bug."""

    def __init__(self) -> None:
        self.synced = False

    def __aiter__(self) -> ClosesBadly:
        return self

    async def __anext__(self) -> WatchEvent:
        if not self.synced:
            self.synced = True
            return WatchEvent("SYNC", {"metadata": {"resourceVersion": "1"}}, ())
        await asyncio.Event().wait()
        raise AssertionError("never")

    async def aclose(self) -> None:
        raise Bug("closing the stream failed")


class BadStreams:
    """The port's observe alone, each stream closing badly."""

    def observe(self, res: Resource, namespace: str | None, **kw: Any) -> ClosesBadly:
        return ClosesBadly()


# --- the helpers ---------------------------------------------------------------------------
async def test_a_task_groups_lone_error_is_raised_as_itself() -> None:
    async def fails() -> None:
        raise errors.KubeForbidden("no", status=403, reason="Forbidden")

    async def a_tasks() -> None:
        async with task_group() as group:
            group.create_task(fails())
            await asyncio.Event().wait()  # cancelled by the task's failure

    async def the_blocks() -> None:
        async with task_group():
            await fails()

    with pytest.raises(errors.KubeForbidden):
        await a_tasks()
    with pytest.raises(errors.KubeForbidden):
        await the_blocks()


async def test_an_owner_raises_what_its_tasks_ended_with_when_it_closes() -> None:
    owner = Owned()
    forever = owner.start(asyncio.Event().wait())

    async def fails() -> None:
        raise Bug("in a task")

    owner.start(fails())
    await asyncio.sleep(0)
    assert not forever.done()  # one task's failure does not cancel the others
    with pytest.raises(Bug):
        await owner.close()
    assert forever.cancelled()


# --- the sites -----------------------------------------------------------------------------
async def test_an_informer_watch_that_fails_closing_is_raised_by_close() -> None:
    # Before: Informers.close cancelled and gathered its tasks with return_exceptions.
    informers = Informers(BadStreams())  # type: ignore[arg-type]
    feed = Feed(POD, NS, label_selector=names.JOB_ID_LABEL)
    async with informers.watching([(feed, "k")]) as view:
        await view.whole(feed)
    with pytest.raises(Bug):
        await informers.close()


async def test_a_wait_whose_watch_fails_closing_raises_it() -> None:
    # Before: wait_for_all cancelled and gathered its watches with return_exceptions.
    def done(current: Sequence[Mapping[str, Obj]]) -> bool:
        return True

    with pytest.raises(Bug):
        await wait_for_all(BadStreams(), [Watched(POD, NS)], done)  # type: ignore[arg-type]


class WatchBreaksLate(FakeKube):
    """The fake, whose TrainJob watch fails by a bug just after it saw the TrainJob go, and
    whose reason Event is slow: the stop has ended its passes by then."""

    async def create(self, res: Resource, body: Obj, namespace: str | None = None,
                     **kw: Any) -> Obj:
        if res is EVENT:
            await asyncio.sleep(0.2)
        return await super().create(res, body, namespace, **kw)

    async def watch(self, res: Resource, namespace: str | None = None,
                    **kw: Any) -> AsyncIterator[WatchEvent]:
        async for ev in super().watch(res, namespace, **kw):
            yield ev
            if res is TRAINJOB and ev.type == "DELETED":
                await asyncio.sleep(0.05)
                raise Bug("the watch broke")


async def test_a_stops_watch_that_fails_after_its_last_pass_is_raised() -> None:
    # Before: a watch's bug was raised only at the start of a pass; after the last one, the
    # stop's final cancel-and-gather dropped it, and the stop reported success.
    k = WatchBreaksLate()
    await k.create(TRAINJOB, labelled(TJ), NS)
    with pytest.raises(Bug):
        await stop_job(k, NS, JOB_ID, "r", kinds=KINDS, limit=timedelta(seconds=5),
                       limits=QUICK)


class HeldList(FakeKube):
    """The fake, whose lists are answered only once released (never, here)."""

    async def list(self, res: Resource, namespace: str | None = None,
                   **kw: Any) -> tuple[list[Obj], str]:
        await asyncio.Event().wait()
        raise AssertionError("never")


async def test_closing_a_crowd_ends_its_senders_and_fails_their_stops() -> None:
    # Before: a crowd had no close; its sender ran on past the Backend, and a stop waiting
    # for a round waited on it.
    k = HeldList()
    crowd = Crowd(Informers(k))
    rounds = crowd.rounds(k, POD, NS, names.JOB_ID_LABEL)
    assert isinstance(rounds, Rounds)
    waiting = asyncio.create_task(rounds.fresh())
    await asyncio.sleep(0.01)
    sender = rounds.sending
    assert sender is not None
    assert not sender.done()
    await crowd.close()
    assert sender.done()
    with pytest.raises(errors.DispatchError, match="closed"):
        await waiting


async def test_a_job_listing_whose_watch_fails_closing_raises_it() -> None:
    # Before: watch_jobs cancelled and gathered its watches under suppress(Exception).
    listings = watch_jobs(BadStreams(), NS, ())  # type: ignore[arg-type]
    assert isinstance(listings, AsyncGenerator)
    assert await anext(listings) == []
    with pytest.raises(BaseExceptionGroup) as raised:
        await listings.aclose()
    # One watch per kind (TrainJobs, pods), each closing badly: both errors, none dropped.
    assert [type(e) for e in raised.value.exceptions] == [Bug, Bug]

"""A crowd of stops (dispatch_kubeflow.stop.rounds): concurrent stops share their reads,
and a shared list serves exactly the stops that asked before it was sent."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names
from dispatch_kubeflow.find import KINDS
from dispatch_kubeflow.informer import Informers
from dispatch_kubeflow.kube import Resource
from dispatch_kubeflow.kube.resources import (
    POD,
)
from dispatch_kubeflow.model import JobID
from dispatch_kubeflow.stop import Crowd, Limits, stop_job
from dispatch_kubeflow.stop.rounds import Rounds
from tests.unit.fake_kube import FakeKube, status_error
from tests.unit.stop_helpers import (
    ALL,
    NS,
    QUICK,
    WORKLOAD_FEED,
    Metered,
    Obj,
    a_prompt_job,
    labelled,
    left,
    timed,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.virtual_time]


async def stop_many(n: int, limits: Limits) -> tuple[float, float, int, dict[str, int]]:
    """Requests and objects read per stop, the most watches open at once and the lists by
    kind, for ``n`` concurrent stops in one namespace."""
    k = Metered()
    jobs = [JobID.new(datetime(2026, 5, 1, tzinfo=UTC), i.to_bytes(10, "big"))
            for i in range(n)]
    for job in jobs:
        await a_prompt_job(k, job)
    informers = Informers(k)
    crowd = Crowd(informers)  # one Backend's
    read_before = k.read
    asked, _, reports = await timed(k, asyncio.gather(*(
        stop_job(k, NS, job, "r", kinds=KINDS, limit=timedelta(seconds=30), crowd=crowd,
                 feeds=[WORKLOAD_FEED], limits=limits) for job in jobs)))
    await informers.close()
    assert all(r.complete for r in reports)
    assert left(k, *ALL) == set()
    return asked / n, (k.read - read_before) / n, k.peak_watches, dict(k.lists)


async def test_concurrent_stops_share_their_reads() -> None:
    # The real grace, for the last stops left when fewer than Limits.crowd still run (a crowd
    # gives the collector none): with 50 jobs at once the collector needs more than a
    # twentieth of it, and StopJob deleting what the collector would have is not what this
    # test counts.
    limits = replace(QUICK, gc_grace=1.0)
    few_requests, few_read, few_watches, few_lists = await stop_many(5, limits)
    many_requests, many_read, many_watches, many_lists = await stop_many(50, limits)
    print(f"per stop, 5 against 50 at once: requests {few_requests:.1f} / {many_requests:.1f},"
          f" objects read {few_read:.1f} / {many_read:.1f}; watches open at most "
          f"{few_watches} / {many_watches}; lists by kind {few_lists} / {many_lists}")
    # One watch per kind however many stop at once (the Backend's informers): 50 stops
    # watching alone would hold up to 50 x 5.
    assert many_watches <= len(KINDS)
    assert few_watches <= len(KINDS)
    # A kind is listed once a round, whatever the number of stops in it: a list per stop
    # would be 50 of each kind. How many rounds depends on how the stops' passes spread
    # in time, not on N (runs here: a kind listed 2 to 11 times, at N = 5 and at N = 50).
    assert max(many_lists.values()) <= 16
    # Requests per stop do not grow with N; they fall, the rounds spread over more stops.
    # (Each stop's own count varies by one or two with whether the collector emptied a kind
    # before it was listed, which saves that kind's watch: hence the margin of one.)
    assert many_requests <= few_requests + 1
    # A round reads every job's objects of its kind, and serves every stop that asked: so a
    # stop's share of the objects read is about the rounds times its own objects, whatever
    # N. It varies with how the rounds fall (1.0x to 1.5x in runs here); a list of the
    # others' objects per stop would read about ten times as many at N = 50 as at N = 5.
    assert many_read <= 2.5 * few_read
    for requests in (few_requests, many_requests):
        assert requests <= 1 + 2 * len(KINDS) + 1 + 1  # minimum + Event + informer share


class HeldLists(FakeKube):
    """The fake, whose lists of pods are answered only when let go (each a round's)."""

    def __init__(self) -> None:
        super().__init__(0)
        self.sent: list[asyncio.Event] = []
        self.error: errors.KubeError | None = None

    async def list(self, res: Resource, namespace: str | None = None, *,
                   label_selector: str | None = None,
                   field_selector: str | None = None,
                   trim: Callable[[Obj], Obj] | None = None,
                   metadata: bool = False) -> tuple[list[Obj], str]:
        # Read when sent; answered when let go.
        got = await super().list(res, namespace, label_selector=label_selector,
                                 field_selector=field_selector, trim=trim,
                                 metadata=metadata)
        if res is POD:
            go = asyncio.Event()
            self.sent.append(go)
            await go.wait()
            if self.error is not None:
                raise self.error
        return got


async def test_a_shared_list_serves_only_the_stops_that_asked_before_it_was_sent() -> None:
    # The proof needs, for each stop, a list sent after its makers were proven gone: a stop
    # that asks while a round is in flight must get the next round, never the one in flight.
    k = HeldLists()
    await k.create(POD, labelled("p0"), NS)
    rounds = Rounds(k, POD, NS, names.JOB_ID_LABEL)
    first = asyncio.create_task(rounds.fresh())
    await asyncio.sleep(0.01)
    assert len(k.sent) == 1  # round 1 in flight
    await k.create(POD, labelled("p1"), NS)  # made after round 1 was sent
    late = [asyncio.create_task(rounds.fresh()) for _ in range(3)]
    await asyncio.sleep(0.01)
    assert len(k.sent) == 1  # the late ones wait for round 1 to end, then share round 2
    k.sent[0].set()
    items, _ = await first
    assert {o["metadata"]["name"] for o in items} == {"p0"}
    await asyncio.sleep(0.01)
    assert len(k.sent) == 2
    assert not any(t.done() for t in late)
    k.sent[1].set()
    for t in late:
        items, _ = await t
        assert {o["metadata"]["name"] for o in items} == {"p0", "p1"}
        # Metadata alone: all a stop reads of what it lists.
        assert all(set(o) == {"metadata"} for o in items)
    assert len(k.sent) == 2


async def test_a_shared_list_that_fails_fails_every_stop_of_its_round() -> None:
    k = HeldLists()
    rounds = Rounds(k, POD, NS, names.JOB_ID_LABEL)
    waiting = [asyncio.create_task(rounds.fresh()) for _ in range(3)]
    await asyncio.sleep(0.01)
    waiting[0].cancel()  # one stop gone: the round goes on for the others
    await asyncio.sleep(0.01)
    k.error = status_error(503, "ServiceUnavailable", "busy")
    k.sent[0].set()
    for t in waiting[1:]:
        # Each stop judges the failure as it would its own list's (list_kind: again later).
        with pytest.raises(errors.KubeError) as raised:
            await t
        assert raised.value.status == 503
    assert waiting[0].cancelled()
    assert len(k.sent) == 1

"""The requests' connections go to the oldest call first (dispatch_kubeflow.kube.slots).

Of a crowd of calls each sending a chain of requests, one after another, the first begun
runs through while later ones wait (issue 28: StopJob of 1,000 at once, every stop ended
with the last). First the queue itself, then through the transport against a real HTTP
server with one connection, then that a Backend's StopJob marks its requests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from aiohttp import web

from dispatch_kubeflow.kube import oldest_first
from dispatch_kubeflow.kube import resources as r
from dispatch_kubeflow.kube.slots import CALL_BEGAN, Slots
from tests.unit.http_kube import kube_at, serving

pytestmark = pytest.mark.asyncio


async def _take(slots: Slots, name: str, began: float | None, served: list[str],
                release: asyncio.Event) -> None:
    token = CALL_BEGAN.set(began)
    try:
        async with slots:
            served.append(name)
            await release.wait()
    finally:
        CALL_BEGAN.reset(token)


def one_slot() -> tuple[Slots, list[str], asyncio.Event]:
    """One connection, the names served in order, and the event that ends each hold."""
    return Slots(1), [], asyncio.Event()


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_the_oldest_call_is_served_first_whatever_the_arrival() -> None:
    slots, served, go = one_slot()
    holder = asyncio.create_task(_take(slots, "holder", None, served, go))
    await _settle()
    # Arriving in the order late, early, middle: served early, middle, late.
    tasks = [asyncio.create_task(_take(slots, name, began, served, go))
             for name, began in (("late", 30.0), ("early", 10.0), ("middle", 20.0))]
    await _settle()
    assert served == ["holder"]
    go.set()
    await asyncio.gather(holder, *tasks)
    assert served == ["holder", "early", "middle", "late"]


async def test_requests_of_no_call_are_first_come_first_served() -> None:
    slots, served, go = one_slot()
    tasks = []
    for name in ("a", "b", "c", "d"):
        tasks.append(asyncio.create_task(_take(slots, name, None, served, go)))
        await _settle()
    go.set()
    await asyncio.gather(*tasks)
    assert served == ["a", "b", "c", "d"]


async def test_one_calls_requests_keep_their_arrival_order() -> None:
    slots, served, go = one_slot()
    holder = asyncio.create_task(_take(slots, "holder", None, served, go))
    await _settle()
    tasks = []
    for name in ("first", "second", "third"):
        tasks.append(asyncio.create_task(_take(slots, name, 5.0, served, go)))
        await _settle()
    go.set()
    await asyncio.gather(holder, *tasks)
    assert served == ["holder", "first", "second", "third"]


async def test_a_cancelled_waiter_takes_no_slot_and_loses_none() -> None:
    slots, served, go = one_slot()
    holder = asyncio.create_task(_take(slots, "holder", None, served, go))
    await _settle()
    gone = asyncio.create_task(_take(slots, "cancelled", 1.0, served, go))
    after = asyncio.create_task(_take(slots, "after", 2.0, served, go))
    await _settle()
    gone.cancel()
    await _settle()
    go.set()
    await asyncio.gather(holder, after)
    assert gone.cancelled()
    assert served == ["holder", "after"]
    assert slots.free == 1
    assert slots.waiting == 0


async def test_a_waiter_cancelled_once_handed_the_slot_hands_it_on() -> None:
    slots, served, go = one_slot()
    async with slots:
        handed = asyncio.create_task(_take(slots, "handed", 1.0, served, go))
        nxt = asyncio.create_task(_take(slots, "next", 2.0, served, go))
        await _settle()
    # The slot is handed to ``handed`` (its turn done), which is cancelled before it runs.
    handed.cancel()
    go.set()
    await asyncio.gather(nxt)
    assert handed.cancelled()
    assert served == ["next"]
    assert slots.free == 1


async def test_a_free_slot_is_not_taken_out_of_turn() -> None:
    slots, served, go = one_slot()
    async with slots:
        waiter = asyncio.create_task(_take(slots, "waiter", 9.0, served, go))
        await _settle()
    # Released: the slot is the waiter's already, though it has not run yet. A newcomer
    # of an older call arriving now queues behind it instead of taking the slot.
    newcomer = asyncio.create_task(_take(slots, "newcomer", 0.0, served, go))
    go.set()
    await asyncio.gather(waiter, newcomer)
    assert served == ["waiter", "newcomer"]


async def test_oldest_first_marks_a_call_once() -> None:
    assert CALL_BEGAN.get() is None
    with oldest_first():
        outer = CALL_BEGAN.get()
        assert outer is not None
        await asyncio.sleep(0.01)
        with oldest_first():
            assert CALL_BEGAN.get() == outer  # a call inside a call keeps the outer's time

        async def child() -> float | None:
            return CALL_BEGAN.get()
        assert await asyncio.create_task(child()) == outer  # tasks it starts inherit it
    assert CALL_BEGAN.get() is None


# --- through the transport ----------------------------------------------------------------
ANSWER_S = 0.02


class Recorder:
    def __init__(self) -> None:
        self.order: list[str] = []

    async def handle(self, request: web.Request) -> web.Response:
        await asyncio.sleep(ANSWER_S)
        name = request.match_info["name"]
        self.order.append(name)
        return web.json_response({"metadata": {"name": name, "namespace": "ns"}})


@pytest_asyncio.fixture
async def recorder() -> AsyncIterator[tuple[Recorder, int]]:
    rec = Recorder()
    app = web.Application()
    app.router.add_get("/api/v1/namespaces/ns/pods/{name}", rec.handle)
    async with serving(app) as port:
        yield rec, port


async def test_the_first_call_of_a_crowd_runs_through(recorder: tuple[Recorder, int]) -> None:
    """Five calls, each three GETs one after another, on one connection. First come first
    served, they take turns and the first call's last GET is the 11th served; oldest call
    first, the first call's GETs take every other turn at most."""
    rec, port = recorder
    kube = kube_at(port, pool=1)

    async def call(i: int) -> None:
        with oldest_first():
            await asyncio.sleep(0)  # every call has begun before any request is sent
            for k in range(3):
                await kube.get(r.POD, f"c{i}-{k}", "ns")

    try:
        tasks = []
        for i in range(5):
            tasks.append(asyncio.create_task(call(i)))
            await asyncio.sleep(0.001)  # each call begins a little after the previous
        await asyncio.gather(*tasks)
    finally:
        await kube.close()
    assert len(rec.order) == 15
    assert rec.order.index("c0-2") < 6, rec.order
    # And the calls end in the order they began.
    ends = [rec.order.index(f"c{i}-2") for i in range(5)]
    assert ends == sorted(ends), rec.order


# --- StopJob marks its requests -------------------------------------------------------------
async def test_each_stop_of_a_backend_waits_for_connections_as_of_its_own_beginning() -> None:
    """Two stops, begun one after the other: every request either sends (its own lists and
    deletes, its watches and shared lists' too) counts from when that stop began."""
    from dispatch_kubeflow import Backend, JobID
    from dispatch_kubeflow.settings import Settings
    from tests.unit.fake_kube import FakeKube
    from tests.unit.stop_helpers import NS, a_job

    kube = FakeKube(seed=4)
    jobs = [JobID.new(), JobID.new()]
    for job in jobs:
        await a_job(kube, job)
    seen: list[float | None] = []
    kube.before = lambda verb, res, name: seen.append(CALL_BEGAN.get())
    settings = Settings.parse({"namespace": NS, "probeRuntime": {"name": "rt"}})
    backend = await Backend.connect(settings, kube=kube, preflight=False)
    try:
        first = asyncio.create_task(backend.stop_job(jobs[0], "r"))
        await asyncio.sleep(0.01)
        second = asyncio.create_task(backend.stop_job(jobs[1], "r"))
        reports = await asyncio.gather(first, second)
    finally:
        await backend.close()
    assert all(rep.complete for rep in reports)
    assert CALL_BEGAN.get() is None
    marks = sorted({m for m in seen if m is not None})
    assert len(marks) == 2, marks
    assert marks[1] - marks[0] >= 0.01, marks
    assert None not in seen  # no request of either stop went unmarked


async def test_a_shared_round_waits_as_its_oldest_stop_would() -> None:
    """A crowd's shared list (dispatch_kubeflow.stop.rounds) serves several stops: it waits
    for a connection as the oldest stop that joined it, whoever started the sender."""
    from dispatch_kubeflow.kube.resources import POD
    from dispatch_kubeflow.stop.rounds import Rounds

    marks: list[float | None] = []
    answer = asyncio.Event()

    class Lists:
        async def list(self, res: object, namespace: str | None = None,
                       **kw: object) -> tuple[list[dict[str, object]], str]:
            marks.append(CALL_BEGAN.get())
            await answer.wait()
            answer.clear()
            return [], "1"

    rounds = Rounds(Lists(), POD, "ns", "label")  # type: ignore[arg-type]

    async def stop(began: float) -> None:
        CALL_BEGAN.set(began)
        await rounds.fresh()

    late = asyncio.create_task(stop(30.0))  # sends the first round alone
    await _settle()
    others = [asyncio.create_task(stop(b)) for b in (20.0, 10.0)]  # join the next one
    await _settle()
    answer.set()
    await _settle()
    answer.set()
    await asyncio.gather(late, *others)
    assert marks == [30.0, 10.0]
    await rounds.close()


async def test_an_informers_list_goes_before_a_crowds_requests() -> None:
    """An informer's list is read by every stop that follows it: queued behind a crowd's
    requests, all begun before it started, it made every one of those stops wait for the
    whole crowd (issue 28: 200 stops at once, the JobSets' informer listed 6 s in, and every
    stop saw its JobSet go at that moment). Started by a stop of the crowd, it goes first."""
    from dispatch_kubeflow.informer import Feed, Informers
    from dispatch_kubeflow.kube import WatchEvent
    from dispatch_kubeflow.kube.resources import JOBSET

    slots, served, go = one_slot()

    class Listing:
        def observe(self, res: object, namespace: str | None = None,
                    **kw: object) -> AsyncIterator[WatchEvent]:
            async def stream() -> AsyncIterator[WatchEvent]:
                async with slots:  # the list's request
                    served.append("informer")
                yield WatchEvent("SYNC", {"metadata": {"resourceVersion": "1"}}, ())
                await asyncio.Event().wait()
            return stream()

    async def request(name: str, began: float) -> None:
        CALL_BEGAN.set(began)
        async with slots:
            served.append(name)

    informers = Informers(Listing())  # type: ignore[arg-type]
    holder = asyncio.create_task(_take(slots, "holder", None, served, go))
    await _settle()
    crowd = [asyncio.create_task(request(f"stop-{i}", 1.0 + i)) for i in range(3)]
    await _settle()

    async def later_stop() -> None:
        CALL_BEGAN.set(10.0)  # a stop of the crowd, begun after the three
        async with informers.watching([(Feed(JOBSET, "ns", key_label="job"), "j")]) as view:
            go.set()
            await view.changed()

    await asyncio.gather(later_stop(), holder, *crowd)
    await informers.close()
    assert served == ["holder", "informer", "stop-0", "stop-1", "stop-2"]

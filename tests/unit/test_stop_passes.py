"""StopJob's passes (dispatch_kubeflow.stop.passes) against the in-memory fake port: it
deletes everything of the job and nothing else, records the reason, goes on while
objects appear, and costs near the bare minimum (see tests/unit/stop_helpers.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from dispatch_kubeflow.core import errors, names
from dispatch_kubeflow.find import KINDS
from dispatch_kubeflow.informer import Informers
from dispatch_kubeflow.kube import Resource
from dispatch_kubeflow.kube.resources import (
    EVENT,
    POD,
    TRAINJOB,
    WORKLOAD,
)
from dispatch_kubeflow.model import JobID
from dispatch_kubeflow.stop import Crowd, stop_job
from tests.unit.fake_kube import FakeKube
from tests.unit.stop_helpers import (
    ALL,
    FOLLOW,
    JOB_ID,
    NS,
    OTHER,
    QUICK,
    SEEDS,
    TJ,
    WORKLOAD_FEED,
    Obj,
    a_job,
    a_prompt_job,
    labelled,
    left,
    stop,
    timed,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.virtual_time]


@FOLLOW
@pytest.mark.parametrize("seed", SEEDS)
async def test_stop_deletes_everything_of_the_job_and_nothing_else(seed: int,
                                                                   follow: bool) -> None:
    k = FakeKube(seed)
    await a_job(k, OTHER)
    others = left(k, *ALL)
    await a_job(k)
    mine = left(k, *ALL) - others
    report = await stop(k, follow, reason="asked to")
    assert left(k, *ALL) == others
    assert {(r.kind, r.name) for r in report.stopped} == mine
    assert report.alive == ()
    assert report.unproven == ()
    reasons = [e for e in k.all(EVENT) if e["regarding"]["name"] == TJ]
    assert [e["note"] for e in reasons] == ["asked to"]


class SlowEvents(FakeKube):
    """The fake, whose Events are answered only once a TrainJob's delete has come."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.deleted = asyncio.Event()

    async def create(self, res: Resource, body: Obj, namespace: str | None = None,
                     **kw: Any) -> Obj:
        if res is EVENT:
            await self.deleted.wait()
        return await super().create(res, body, namespace, **kw)

    async def delete(self, res: Resource, name: str, namespace: str | None = None,
                     **kw: Any) -> Obj | None:
        if res is TRAINJOB:
            self.deleted.set()
        return await super().delete(res, name, namespace, **kw)


@FOLLOW
@pytest.mark.parametrize("seed", SEEDS)
async def test_the_reason_is_recorded_alongside_the_delete(seed: int, follow: bool) -> None:
    """The reason's Event does not hold the TrainJob's delete back (one round trip less for
    a prompt stop), and the stop still ends with it recorded."""
    k = SlowEvents(seed)
    await a_job(k)
    async with asyncio.timeout(4):  # an Event before the delete would wait here forever
        report = await stop(k, follow, reason="asked to")
    assert report.complete
    assert report.alive == report.unproven == ()
    assert [e["note"] for e in k.all(EVENT) if e["regarding"]["name"] == TJ] == ["asked to"]


@FOLLOW
@pytest.mark.parametrize("seed", SEEDS)
async def test_what_appears_during_a_pass_is_deleted_by_the_next(seed: int,
                                                                 follow: bool) -> None:
    k = FakeKube(seed)
    await a_job(k)
    late: list[asyncio.Task[Obj]] = []

    def when(verb: str, res: Resource, name: str) -> None:
        if (verb, res) == ("delete", TRAINJOB) and not late:
            # A pod of the job arrives while the first deletions run (a late kubelet).
            late.append(asyncio.get_running_loop().create_task(
                k.create(POD, labelled(f"{TJ}-late"), NS)))

    k.before = when
    report = await stop(k, follow)
    await late[0]  # already done: stop_job's passes ran until nothing was left
    assert left(k, *ALL) == set()
    assert ("Pod", f"{TJ}-late") in {(r.kind, r.name) for r in report.stopped}


# --- what StopJob costs -------------------------------------------------------------------
async def bare_minimum(k: FakeKube, job: JobID, kinds: Sequence[Resource]) -> None:
    """What a bare script does: DELETE the TrainJob, then per kind one selector-scoped LIST
    and one WATCH until what it listed is gone. 1 + 2 x (number of kinds) requests (the
    TrainJob's LIST is its kind's), and unsound: it lists a kind before its makers are gone,
    so what they make meanwhile is never seen."""
    sel = f"{names.JOB_ID_LABEL}={job}"
    tjs, tj_rv = await k.list(TRAINJOB, NS, label_selector=sel)
    uid = tjs[0]["metadata"]["uid"]
    await k.delete(TRAINJOB, tjs[0]["metadata"]["name"], NS, uid=uid)

    async def until_gone(res: Resource) -> None:
        s = f"{names.KUEUE_JOB_UID_LABEL}={uid}" if res is WORKLOAD else sel
        items, rv = (tjs, tj_rv) if res is TRAINJOB else await k.list(res, NS,
                                                                         label_selector=s)
        left = {o["metadata"]["uid"] for o in items}
        if not left:
            return
        async for ev in k.watch(res, NS, resource_version=rv, label_selector=s):
            if ev.type == "DELETED":
                left.discard(ev.object["metadata"]["uid"])
                if not left:
                    return

    await asyncio.gather(*(until_gone(res) for res in kinds))


PLAIN_KINDS = tuple(kind for kind in KINDS if kind is not WORKLOAD)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("kinds", "shared"), [(KINDS, False), (KINDS, True),
                                                (PLAIN_KINDS, False)],
                         ids=["kueue", "kueue-informer", "plain"])
async def test_a_prompt_job_costs_near_the_bare_minimum(
        seed: int, kinds: tuple[Resource, ...], shared: bool) -> None:
    # The real grace: the collector comes first however slow the machine, so this costs no
    # time, and StopJob deleting what the collector would have is not what this counts.
    limits = replace(QUICK, gc_grace=1.0)
    # The bare minimum: DELETE the TrainJob + (one selector LIST + one WATCH until gone) per
    # kind the mode has: 1 + 2 x 6 = 13 requests in Kueue mode, 1 + 2 x 5 = 11 in plain.
    minimum = 1 + 2 * len(kinds)
    k = FakeKube(seed)
    await a_prompt_job(k)
    bare, bare_took, _ = await timed(k, bare_minimum(k, JOB_ID, kinds))
    assert bare <= minimum
    assert left(k, *ALL) == set()

    k = FakeKube(seed)
    await a_prompt_job(k)
    informers = Informers(k)
    asked, took, report = await timed(k, stop_job(
        k, NS, JOB_ID, "r", kinds=kinds, limit=timedelta(seconds=5),
        crowd=Crowd(informers) if shared else None, feeds=[WORKLOAD_FEED], limits=limits))
    await informers.close()
    assert report.complete
    assert report.alive == report.unproven == ()
    assert left(k, *ALL) == set()
    # What StopJob makes beyond the bare minimum: the reason's Event (1), and with no
    # informer to share, none; with one (a Backend's), its list and watch (2), shared by
    # every concurrent stop. A kind the collector emptied before StopJob listed it costs
    # its LIST alone (no WATCH).
    assert asked <= minimum + 1 + (2 if shared else 0)
    assert asked <= 1.3 * minimum
    # In time too: both wait for the same collector, StopJob kind after kind. (A
    # generous absolute margin: the machine's noise, not a ratio to assert.)
    assert took <= 1.3 * bare_took + 0.1


@FOLLOW
async def test_kinds_it_could_never_read_leave_the_stop_incomplete(follow: bool) -> None:
    """An API server that never answers a list: nothing was seen, so nothing is proven
    gone. The old report held only what was seen, and called such a stop complete."""
    k = FakeKube(1)
    await a_job(k)

    def no_lists(verb: str, res: object, name: str) -> None:
        if verb == "list":
            raise errors.KubeNoAnswer("no answer")

    k.before = no_lists
    report = await stop(k, follow, limit=1)
    assert not report.complete
    assert report.stopped == report.alive == ()
    # One reference a kind, with no name: whatever of the job is there, unread.
    assert sorted((r.kind, r.namespace, r.name) for r in report.unproven) == sorted(
        (res.kind, NS, "") for res in KINDS)
    assert left(k, *ALL)  # nothing could be deleted either: it was never seen

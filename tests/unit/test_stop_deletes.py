"""What StopJob deletes itself (dispatch_kubeflow.stop.deletes): what an orphan made is
reported, a pod that stays is waited for, and a delete without an answer is sent again."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest

from dispatch_kubeflow import errors
from dispatch_kubeflow.find import KINDS
from dispatch_kubeflow.kube import Resource
from dispatch_kubeflow.kube.resources import (
    POD,
    TRAINJOB,
    WORKLOAD,
)
from dispatch_kubeflow.stop import stop_job
from tests.unit.fake_kube import FakeKube
from tests.unit.stop_helpers import (
    ALL,
    FOLLOW,
    JOB_ID,
    NS,
    QUICK,
    RES_BY_PLURAL,
    SEEDS,
    TJ,
    a_job,
    a_pod_of_a_gone_job,
    a_prompt_job,
    left,
    passes_of,
    stop,
    timed,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.virtual_time]


@pytest.mark.parametrize("seed", SEEDS)
async def test_what_an_orphan_made_is_reported_though_the_collector_removes_it(
        seed: int) -> None:
    # The TrainJob was deleted with orphan propagation: its JobSet has no owner left; its
    # Job and pods are the JobSet's, which the collector removes once StopJob deletes it.
    k = FakeKube(seed)
    await a_prompt_job(k)
    tj = k.objects[("trainjobs", NS, TJ)]
    for (plural, _, name), o in list(k.objects.items()):
        refs = o["metadata"].get("ownerReferences") or []
        if any(r["uid"] == tj["metadata"]["uid"] for r in refs):
            k.write_now(RES_BY_PLURAL[plural], name, NS, {"metadata": {"ownerReferences": None}})
    await k.delete(TRAINJOB, TJ, NS)
    mine = left(k, *ALL)
    _, _, report = await timed(k, stop_job(k, NS, JOB_ID, "r", kinds=KINDS,
                                            limit=timedelta(seconds=5), limits=QUICK))
    assert left(k, *ALL) == set()
    assert report.complete
    assert {(r.kind, r.name) for r in report.stopped} == mine


async def test_a_pod_that_stays_past_its_grace_is_waited_for_not_spun_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # StopJob deletes it once the collector's grace is over; a finalizer nobody removes
    # keeps it. Waiting for it is waiting for its watch: a due time left behind once it was
    # asked to go woke the passes at once, again and again (4,768 passes in 0.5 s).
    k = FakeKube()
    await k.create(POD, a_pod_of_a_gone_job("example.com/keep"), NS)
    passes, report = await passes_of(k, 0.5, monkeypatch)
    assert passes < 10
    assert {(r.kind, r.name) for r in report.alive} == {("Pod", f"{TJ}-node-0-0")}


class LostAnswers(FakeKube):
    """The first DELETE of each kind in ``kinds`` gets no answer (a timeout under load):
    sent (``done``: the server deleted it) or not."""

    def __init__(self, seed: int, done: bool, kinds: Sequence[Resource], *,
                 transient: bool = True) -> None:
        super().__init__(seed)
        self.done, self.kinds, self.lost = done, set(kinds), 0
        self.transient = transient

    async def delete(self, res: Resource, name: str, namespace: str | None = None,
                     **kw: Any) -> Any:
        if res in self.kinds:
            self.kinds.discard(res)
            self.lost += 1
            if self.done:
                await super().delete(res, name, namespace, **kw)
            raise errors.KubeUnreachable(f"DELETE {res.plural}/{name}: TimeoutError()",
                                         transient=self.transient, sent=self.done)
        return await super().delete(res, name, namespace, **kw)


@FOLLOW
@pytest.mark.parametrize("done", [False, True], ids=["not-sent", "sent"])
@pytest.mark.parametrize("seed", SEEDS)
async def test_a_delete_that_gets_no_answer_is_sent_again(seed: int, done: bool,
                                                          follow: bool) -> None:
    # 1,000 StopJobs at once on the local cluster: one DELETE timed out and the whole stop
    # raised. Its deletes are idempotent under the UID precondition: it sends them again.
    k = LostAnswers(seed, done, (TRAINJOB, WORKLOAD))
    await a_job(k)
    mine = left(k, *ALL)
    report = await stop(k, follow)
    assert k.lost == 2
    assert report.complete
    assert left(k, *ALL) == set()
    assert {(r.kind, r.name) for r in report.stopped} == mine


@FOLLOW
async def test_a_delete_that_will_not_mend_is_raised_not_sent_again(follow: bool) -> None:
    """A rejected certificate (an Unreachable that is not transient) gets no answer on any
    pass: the stop says so at once instead of passing until its limit."""
    k = LostAnswers(0, False, (TRAINJOB,), transient=False)
    await a_job(k)
    with pytest.raises(errors.KubeUnreachable):
        await stop(k, follow)
    assert k.lost == 1

"""StopJob's views of the job's kinds (dispatch_kubeflow.stop.views): a kind made again
is listed again, a maker held by a finalizer holds nothing back, an expired watch
lists again, and only metadata is kept."""

from __future__ import annotations

import asyncio

import pytest

from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Resource
from dispatch_kubeflow.kube.resources import (
    JOB,
    JOBSET,
    POD,
    TRAINJOB,
)
from dispatch_kubeflow.model import StopReport
from dispatch_kubeflow.stop.passes import Stop
from tests.unit.fake_kube import FakeKube
from tests.unit.stop_helpers import (
    ALL,
    FOLLOW,
    NS,
    SEEDS,
    TJ,
    Metered,
    Obj,
    a_job,
    labelled,
    left,
    stop,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.virtual_time]


@FOLLOW
@pytest.mark.parametrize("seed", SEEDS)
async def test_what_is_made_again_after_its_kind_was_listed_is_not_missed(
        seed: int, follow: bool) -> None:
    k = Metered(seed)
    await a_job(k)
    late: list[asyncio.Task[Obj]] = []
    pod_lists = 0

    def when(verb: str, res: Resource, name: str) -> None:
        nonlocal pod_lists
        if (verb, res) == ("delete", POD) and not late:
            # While the pods are deleted, after Jobs were listed, a Job of the job appears
            # again (a late write), and a pod it made.
            pod_lists = k.lists["pods"]
            loop = asyncio.get_running_loop()
            late.append(loop.create_task(k.create(JOB, labelled(f"{TJ}-node-9"), NS)))
            pod = labelled(f"{TJ}-node-9-0")
            pod["metadata"]["labels"][names.JOBSET_NAME_LABEL] = TJ
            late.append(loop.create_task(k.create(POD, pod, NS)))

    k.before = when
    report = await stop(k, follow)
    await asyncio.gather(*late)
    assert left(k, *ALL) == set()
    assert {("Job", f"{TJ}-node-9"), ("Pod", f"{TJ}-node-9-0")} <= {
        (r.kind, r.name) for r in report.stopped}
    assert report.complete
    # The Job seen again made the pods' list stale: they were listed again once it went.
    assert k.lists["pods"] > pod_lists


@FOLLOW
async def test_a_trainjob_held_by_a_finalizer_does_not_keep_the_rest_running(
        follow: bool) -> None:
    k = FakeKube()
    await a_job(k)
    mine = left(k, *ALL)
    await k.patch(TRAINJOB, TJ, {"metadata": {"finalizers": ["example.com/keep"]}}, NS)
    report = await stop(k, follow, limit=0.3)
    # Being deleted, it makes nothing more: what it made is listed and deleted meanwhile.
    assert left(k, *ALL) == {("TrainJob", TJ)}
    assert {(r.kind, r.name) for r in report.alive} == {("TrainJob", TJ)}
    assert {(r.kind, r.name) for r in report.stopped} == mine - {("TrainJob", TJ)}
    assert report.unproven == ()


@FOLLOW
@pytest.mark.parametrize("seed", SEEDS)
async def test_a_watch_that_expired_is_listed_again(seed: int, follow: bool) -> None:
    k = Metered(seed)
    await a_job(k)
    mine = left(k, *ALL)
    expired: list[bool] = []

    def when(verb: str, res: Resource, name: str) -> None:
        if (verb, res) == ("delete", JOBSET) and not expired:
            # etcd compacts while the views are open: every watch ends with 410 Expired.
            expired.append(True)
            k.compact()
            k.end_watches()

    k.before = when
    report = await stop(k, follow)
    assert expired
    # Its watch expired: listed again, from a new version. Following the informer, the
    # informer lists again (its cache, past the deletions, proves the JobSet gone) and the
    # stop's own list stands: its first, and the informer's two; or one, when the crowd's
    # JobSet delete (no grace) came before the informer's first list.
    assert k.lists["jobsets"] in ((2, 3) if follow else (2,))
    assert left(k, *ALL) == set()
    assert report.complete
    assert {(r.kind, r.name) for r in report.stopped} == mine


@FOLLOW
async def test_a_stop_keeps_only_the_metadata_of_what_it_saw(
        follow: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """1,000 concurrent stops each holding their TrainJob, Workloads and pods whole grew the
    client by hundreds of MB (bench/scale.py, N = 1,000): a stop reads metadata alone."""
    k = FakeKube()
    await a_job(k)
    big = {"spec": {"blob": "x" * 10_000}, "status": {"blob": "y" * 10_000}}
    for res in ALL:
        for o in k.all(res):
            await k.patch(res, o["metadata"]["name"], {
                **big, "metadata": {"managedFields": [{"manager": "m", "blob": "z" * 1000}]}},
                NS)
    kept: list[Obj] = []
    report_of = Stop.report

    def report(self: Stop) -> StopReport:
        kept.extend(f.obj for f in self.views.seen.values())
        kept.extend(f.obj for kind in self.views.kinds.values() for f in kind.live.values())
        return report_of(self)

    monkeypatch.setattr(Stop, "report", report)
    report_ = await stop(k, follow)
    assert len(report_.stopped) == len(kept) >= 7
    assert not left(k, *ALL)
    for obj in kept:
        assert set(obj) == {"metadata"}, obj.keys()
        assert "managedFields" not in obj["metadata"]
        assert obj["metadata"]["name"]
        assert obj["metadata"]["uid"]

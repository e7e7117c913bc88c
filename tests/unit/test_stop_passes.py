"""StopJob's passes (dispatch_kubeflow.stop) against the in-memory fake port.

The fake has no garbage collector and no kubelet, so every object is there until someone
deletes it: what is tested is that stop_job itself finds every object of the job (by
label, by name, by owner), deletes each under its UID, lists again for what appeared
meanwhile, proves the end by watching, and reports honestly what is still there when its
time is up. How Kubernetes' garbage collector and JobSet react is the cluster tests'.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dispatch_kubeflow import stop as stop_mod
from dispatch_kubeflow.core import names
from dispatch_kubeflow.find import KINDS
from dispatch_kubeflow.kube import Resource
from dispatch_kubeflow.kube.resources import (
    EVENT,
    JOB,
    JOBSET,
    POD,
    TRAINING_RUNTIME,
    TRAINJOB,
    WORKLOAD,
)
from dispatch_kubeflow.model import JobID
from tests.unit.fake_kube import FakeKube

pytestmark = pytest.mark.asyncio
SEEDS = range(4)
NS = "ns"
JOB_ID = JobID.new(datetime(2026, 5, 1, tzinfo=UTC), bytes(10))
OTHER = JobID.new(datetime(2026, 5, 1, tzinfo=UTC), bytes(range(10)))
TJ = names.trainjob_name(str(JOB_ID), 1)
Obj = dict[str, Any]


def labelled(name: str, job: JobID = JOB_ID, **extra: Any) -> Obj:
    return {"metadata": {"name": name, "labels": {names.JOB_ID_LABEL: str(job)}, **extra}}


async def a_job(k: FakeKube, job: JobID = JOB_ID) -> None:
    """What a running job leaves in the namespace, as objects (no controller made them)."""
    tj_name = names.trainjob_name(str(job), 1)
    tj = await k.create(TRAINJOB, labelled(tj_name, job), NS)
    owner = [{"apiVersion": TRAINJOB.api_version, "kind": "TrainJob", "name": tj_name,
              "uid": tj["metadata"]["uid"], "controller": True}]
    await k.create(TRAINING_RUNTIME, labelled(tj_name, job, ownerReferences=owner), NS)
    await k.create(JOBSET, {"metadata": {"name": tj_name, "ownerReferences": owner}}, NS)
    await k.create(JOB, labelled(f"{tj_name}-node-0", job), NS)
    for i in range(2):
        pod = labelled(f"{tj_name}-node-0-{i}", job)
        pod["metadata"]["labels"][names.JOBSET_NAME_LABEL] = tj_name
        await k.create(POD, pod, NS)
    await k.create(WORKLOAD, {"metadata": {"name": f"trainjob-{tj_name}-a",
                                           "ownerReferences": owner}}, NS)
    # An orphan: no owner left, known only by the job label on its pod set's template.
    await k.create(WORKLOAD, {"metadata": {"name": f"trainjob-{tj_name}-b"}, "spec": {
        "podSets": [{"template": labelled("t", job)}]}}, NS)


def left(k: FakeKube, *kinds: Resource) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for res in kinds for o in k.all(res)}


ALL = (TRAINJOB, TRAINING_RUNTIME, JOBSET, JOB, POD, WORKLOAD)


@pytest.mark.parametrize("seed", SEEDS)
async def test_stop_deletes_everything_of_the_job_and_nothing_else(seed: int) -> None:
    k = FakeKube(seed)
    await a_job(k, OTHER)
    others = left(k, *ALL)
    await a_job(k)
    mine = left(k, *ALL) - others
    report = await stop_mod.stop_job(k, NS, JOB_ID, "asked to", kinds=KINDS,
                                     limit=timedelta(seconds=5))
    assert left(k, *ALL) == others
    assert {(r.kind, r.name) for r in report.stopped} == mine
    assert report.alive == ()
    assert report.unproven == ()
    reasons = [e for e in k.all(EVENT) if e["regarding"]["name"] == TJ]
    assert [e["note"] for e in reasons] == ["asked to"]


@pytest.mark.parametrize("seed", SEEDS)
async def test_what_appears_during_a_pass_is_deleted_by_the_next(seed: int) -> None:
    k = FakeKube(seed)
    await a_job(k)
    late: list[asyncio.Task[Obj]] = []

    def when(verb: str, res: Resource, name: str) -> None:
        if (verb, res) == ("delete", TRAINJOB) and not late:
            # A pod of the job arrives while the first deletions run (a late kubelet).
            late.append(asyncio.get_running_loop().create_task(
                k.create(POD, labelled(f"{TJ}-late"), NS)))

    k.before = when
    report = await stop_mod.stop_job(k, NS, JOB_ID, "r", kinds=KINDS,
                                     limit=timedelta(seconds=5))
    await late[0]  # already done: stop_job's passes ran until nothing was left
    assert left(k, *ALL) == set()
    assert ("Pod", f"{TJ}-late") in {(r.kind, r.name) for r in report.stopped}


async def test_what_will_not_go_is_reported_alive_when_the_time_is_up() -> None:
    k = FakeKube()
    await a_job(k)
    mine = left(k, *ALL)
    # A finalizer nobody removes (no controller here): deleted, it stays.
    await k.patch(POD, f"{TJ}-node-0-1", {"metadata": {"finalizers": ["example.com/keep"]}},
                  NS)
    loop = asyncio.get_running_loop()
    began = loop.time()
    report = await stop_mod.stop_job(k, NS, JOB_ID, "r", kinds=KINDS,
                                     limit=timedelta(seconds=0.3))
    took = loop.time() - began
    assert 0.3 <= took < 3  # it waited its time, by watching, and then stopped
    stuck = k.objects[("pods", NS, f"{TJ}-node-0-1")]
    assert "deletionTimestamp" in stuck["metadata"]
    assert left(k, *ALL) == {("Pod", f"{TJ}-node-0-1")}  # everything else went
    # The pod, and what it runs beneath (named by its jobset-name label), are not stopped.
    alive = {(r.kind, r.name) for r in report.alive}
    assert alive == {("Pod", f"{TJ}-node-0-1"), ("JobSet", TJ), ("TrainJob", TJ)}
    assert {(r.kind, r.name) for r in report.stopped} == mine - alive

"""What the tests of StopJob (dispatch_kubeflow.stop, tests/unit/test_stop_*.py) share:
jobs made of objects, the in-memory fake port and its meters, and StopJob's limits.

The fake has no garbage collector and no kubelet, so every object is there until someone
deletes it: what is tested is that stop_job itself finds every object of the job (by
label, by name, by owner), deletes each under its UID, lists again for what appeared
meanwhile, proves the end by watching, and reports honestly what is still there when its
time is up. How Kubernetes' garbage collector and JobSet react is the cluster tests'.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names
from dispatch_kubeflow.find import KINDS
from dispatch_kubeflow.informer import Informers
from dispatch_kubeflow.kube import Resource, WatchEvent
from dispatch_kubeflow.kube.resources import (
    JOB,
    JOBSET,
    POD,
    TRAINING_RUNTIME,
    TRAINJOB,
    WORKLOAD,
)
from dispatch_kubeflow.mode_kueue import KueueMode
from dispatch_kubeflow.model import JobID, StopReport
from dispatch_kubeflow.settings import Settings
from dispatch_kubeflow.stop import Crowd, Limits, stop_job
from dispatch_kubeflow.stop.deletes import Deletes
from dispatch_kubeflow.waits import cancel_all
from tests.unit.fake_kube import FakeKube

QUICK = Limits(pass_wait=0.05, gc_grace=0.05)
"""StopJob's waits at a twentieth: the collector here acts within milliseconds, so it
still comes first, and the suite does not wait out a second per test."""
CROWDED = replace(QUICK, crowd=1)
"""QUICK, and every stop a crowd (one is enough): it follows the informers at once."""
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
    # Trainer copies the runtime copy's JobSet template labels (the job id) onto the JobSet.
    await k.create(JOBSET, labelled(tj_name, job, ownerReferences=owner), NS)
    await k.create(JOB, labelled(f"{tj_name}-node-0", job), NS)
    for i in range(2):
        pod = labelled(f"{tj_name}-node-0-{i}", job)
        pod["metadata"]["labels"][names.JOBSET_NAME_LABEL] = tj_name
        await k.create(POD, pod, NS)
    # Kueue labels every Workload it makes with its job's UID (and copies no other label).
    await k.create(WORKLOAD, {"metadata": {
        "name": f"trainjob-{tj_name}-a", "ownerReferences": owner,
        "labels": {names.KUEUE_JOB_UID_LABEL: tj["metadata"]["uid"]}}}, NS)
    # An orphan: no owner left (its TrainJob went long ago), known only by the job label on
    # its pod set's template.
    await k.create(WORKLOAD, {"metadata": {
        "name": f"trainjob-{tj_name}-b",
        "labels": {names.KUEUE_JOB_UID_LABEL: f"gone-{tj['metadata']['uid']}"}}, "spec": {
        "podSets": [{"template": labelled("t", job)}]}}, NS)


async def stop(k: FakeKube, follow: bool, limit: float = 5, reason: str = "r"
               ) -> StopReport:
    """stop_job alone (its own watches), or as one of a crowd of a Backend's stops: every
    kind it can follows the Backend's informers (see dispatch_kubeflow.stop.sharing)."""
    if not follow:
        return await stop_job(k, NS, JOB_ID, reason, kinds=KINDS,
                              limit=timedelta(seconds=limit), limits=QUICK)
    informers = Informers(k)
    try:
        return await stop_job(k, NS, JOB_ID, reason, kinds=KINDS,
                              limit=timedelta(seconds=limit), crowd=Crowd(informers),
                              feeds=[WORKLOAD_FEED], limits=CROWDED)
    finally:
        await informers.close()


FOLLOW = pytest.mark.parametrize("follow", [False, True], ids=["alone", "informers"])


def left(k: FakeKube, *kinds: Resource) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for res in kinds for o in k.all(res)}


ALL = (TRAINJOB, TRAINING_RUNTIME, JOBSET, JOB, POD, WORKLOAD)


RES_BY_PLURAL = {r.plural: r for r in ALL}


class Metered(FakeKube):
    """The fake, also counting the objects each read returned (list items, watch events)
    and the lists by kind: what N concurrent stops would move over the wire."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self.read = 0
        self.lists: dict[str, int] = {}
        self.peak_watches = 0

    async def list(self, res: Resource, namespace: str | None = None, *,
                   label_selector: str | None = None,
                   field_selector: str | None = None,
                   trim: Callable[[Obj], Obj] | None = None,
                   metadata: bool = False) -> tuple[list[Obj], str]:
        items, rv = await super().list(res, namespace, label_selector=label_selector,
                                       field_selector=field_selector, trim=trim,
                                       metadata=metadata)
        self.read += len(items)
        self.lists[res.plural] = self.lists.get(res.plural, 0) + 1
        return items, rv

    async def watch(self, res: Resource, namespace: str | None = None, *,
                    resource_version: str = "", label_selector: str | None = None,
                    field_selector: str | None = None,
                    timeout_seconds: int = 290) -> AsyncIterator[WatchEvent]:
        async for ev in super().watch(res, namespace, resource_version=resource_version,
                                      label_selector=label_selector,
                                      field_selector=field_selector,
                                      timeout_seconds=timeout_seconds):
            self.peak_watches = max(self.peak_watches, self.open_watches)
            self.read += 1
            yield ev


class Collector:
    """The garbage collector the fake lacks: promptly deletes what lost every owner. Its
    requests are counted apart, so a test counts StopJob's alone."""

    def __init__(self, k: FakeKube) -> None:
        self.k = k
        self.requests = 0

    async def run(self) -> None:
        while True:
            await asyncio.sleep(0.002)
            uids = {o["metadata"]["uid"] for o in self.k.objects.values()}
            orphans = [(key, o) for key, o in self.k.objects.items()
                       if (owners := {r["uid"] for r in o["metadata"].get("ownerReferences")
                                      or []}) and not owners & uids]
            # Concurrently, as the real one's workers do.
            await asyncio.gather(*(self.collect(*key, o) for key, o in orphans))

    async def collect(self, plural: str, ns: str, name: str, obj: Obj) -> None:
        self.requests += 1
        with contextlib.suppress(errors.KubeConflict):
            await self.k.delete(RES_BY_PLURAL[plural], name, ns, uid=obj["metadata"]["uid"])


async def a_prompt_job(k: FakeKube, job: JobID = JOB_ID) -> None:
    """A job as Trainer, JobSet, the Job controller and Kueue make it: every object owned,
    so the garbage collector removes everything once the TrainJob is deleted."""
    tj_name = names.trainjob_name(str(job), 1)
    tj = await k.create(TRAINJOB, labelled(tj_name, job), NS)

    def owned_by(o: Obj) -> list[Obj]:
        return [{"apiVersion": "v1", "kind": o["kind"], "name": o["metadata"]["name"],
                 "uid": o["metadata"]["uid"], "controller": True}]

    await k.create(TRAINING_RUNTIME, labelled(tj_name, job, ownerReferences=owned_by(tj)), NS)
    jobset = await k.create(JOBSET, labelled(tj_name, job, ownerReferences=owned_by(tj)), NS)
    # Kueue copies the pod templates (with the job-id label) into the Workload's pod sets.
    await k.create(WORKLOAD, {"metadata": {
        "name": f"trainjob-{tj_name}-a", "ownerReferences": owned_by(tj),
        "labels": {names.KUEUE_JOB_UID_LABEL: tj["metadata"]["uid"]}},
        "spec": {"podSets": [{"template": labelled("node", job)}]}}, NS)
    batch = await k.create(JOB, labelled(f"{tj_name}-node-0", job,
                                         ownerReferences=owned_by(jobset)), NS)
    for i in range(2):
        pod = labelled(f"{tj_name}-node-0-{i}", job, ownerReferences=owned_by(batch))
        pod["metadata"]["labels"][names.JOBSET_NAME_LABEL] = tj_name
        await k.create(POD, pod, NS)


def _kueue_mode() -> KueueMode:
    mode = KueueMode.from_settings(Settings.parse(
        {"namespace": NS, "probeRuntime": {"name": "rt"}, "kueue": {"localQueue": "lq"}}))
    assert mode is not None
    return mode


KUEUE_MODE = _kueue_mode()
WORKLOAD_FEED, = KUEUE_MODE.watched(NS)  # Kueue mode's, as a Backend has


async def timed(k: FakeKube, work: Awaitable[Any]) -> tuple[int, float, Any]:
    """(requests, seconds, result) of ``work`` against ``k`` (the collector's not counted)."""
    gc = Collector(k)
    task = asyncio.create_task(gc.run())
    loop = asyncio.get_running_loop()
    before, began = k.requests, loop.time()
    try:
        out = await work
    finally:
        took = loop.time() - began
        await cancel_all([task])
    return k.requests - before - gc.requests, took, out


def a_pod_of_a_gone_job(*finalizers: str) -> Obj:
    """A pod of the job whose Job is gone (no Job has its owner's UID), held by finalizers:
    what the fault suite found once the Job controller's informers had gone stale."""
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": f"{TJ}-node-0",
             "uid": "a-job-that-is-gone", "controller": True}
    return labelled(f"{TJ}-node-0-0", ownerReferences=[owner], finalizers=list(finalizers))


async def passes_of(k: FakeKube, limit: float, monkeypatch: pytest.MonkeyPatch) -> tuple[
        int, Any]:
    """StopJob's report, and how many passes it made (each judges what is due)."""
    passes = 0
    judge = Deletes.due_deletes

    def counted(self: Any, now: float) -> list[Any]:
        nonlocal passes
        passes += 1
        return judge(self, now)

    monkeypatch.setattr(Deletes, "due_deletes", counted)
    report = await stop_job(k, NS, JOB_ID, "r", kinds=KINDS, limit=timedelta(seconds=limit),
                            limits=QUICK)
    return passes, report

"""Readmission._act (the controller's write path) against the in-memory fake port.

Everything Kubernetes-side is only objects in the fake: the Workload as Kueue would have
left it, the TrainJob, pods with the jobset-name label, the Lease. What is tested is our
orchestration: a fresh read before writing, wait while pods remain, raise A once then set
Ready, and the fences (a stale TrainJob or Workload answers 409: nothing is written, the
Workload is judged again). Kueue's, Trainer's and JobSet's behaviour is the cluster tests'.
"""

from __future__ import annotations

from typing import Any

import pytest

from admission.intake import Caches, Feed
from admission.lease import LeaderElector
from admission.observability import EventRecorder, Metrics
from admission.readmission import PENDING, READY, Readmission, ready_message, waiting_message
from dispatch_kubeflow.core import errors, names
from dispatch_kubeflow.kube.resources import EVENT, LEASE, POD, TRAINJOB, WORKLOAD, Resource
from tests.unit.fake_kube import FakeKube

pytestmark = pytest.mark.asyncio
SEEDS = range(4)
NS, WL, TJ, CHECK = "ns", "trainjob-dj-a-s1-abcde", "dj-a-s1", "dispatch-admission"
KEY = (NS, WL)
Obj = dict[str, Any]


def workload() -> Obj:
    """A Workload with quota reserved on a ClusterQueue that lists our check, Pending."""
    return {
        "metadata": {"name": WL, "ownerReferences": [{
            "apiVersion": f"{names.TRAINER_GROUP}/{names.TRAINER_VERSION}", "kind": "TrainJob",
            "name": TJ, "controller": True, "uid": "t1"}]},
        "spec": {"queueName": "lq"},
        "status": {
            "admissionChecks": [{"name": CHECK, "state": PENDING, "message": "",
                                 "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "conditions": [{"type": "QuotaReserved", "status": "True",
                            "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "admission": {"clusterQueue": "cq"},
        },
    }


def trainjob() -> Obj:
    return {"metadata": {"name": TJ, "labels": {names.JOB_ID_LABEL: "A"}}, "spec": {}}


def old_pod(i: int) -> Obj:
    return {"metadata": {"name": f"{TJ}-node-0-{i}", "labels": {names.JOBSET_NAME_LABEL: TJ}}}


class World:
    """The fake, a leading elector on a Lease in it, and the Readmission under test."""

    def __init__(self, k: FakeKube, elector: LeaderElector, r: Readmission) -> None:
        self.k, self.elector, self.r = k, elector, r

    def check(self) -> Obj:
        wl = self.k.objects[(WORKLOAD.plural, NS, WL)]
        entries = [c for c in wl["status"]["admissionChecks"] if c["name"] == CHECK]
        assert len(entries) == 1, entries
        return dict(entries[0])

    def annotations(self) -> dict[str, str]:
        return dict(self.k.objects[(TRAINJOB.plural, NS, TJ)]["metadata"].get("annotations")
                    or {})

    def events(self, reason: str) -> list[Obj]:
        return [e for e in self.k.all(EVENT) if e["reason"] == reason]

    def decisions(self, outcome: str) -> float:
        value = self.r.metrics.registry.get_sample_value(
            "dispatch_admission_decisions_total", {"outcome": outcome})
        return value or 0.0

    def when(self, verb: str, res: Resource, then: Any) -> None:
        """Run ``then()`` once, just before the next ``verb`` of ``res`` takes effect."""
        def hook(v: str, r: Resource, _name: str) -> None:
            if (v, r) == (verb, res):
                self.k.before = None
                then()
        self.k.before = hook


async def world(seed: int, *, pods: int = 0) -> World:
    k = FakeKube(seed)
    await k.create(WORKLOAD, workload(), NS)
    await k.create(TRAINJOB, trainjob(), NS)
    for i in range(pods):
        await k.create(POD, old_pod(i), NS)
    elector = LeaderElector(k, namespace="ctl", name="lease", identity="me")
    assert await elector.try_acquire_or_renew()
    caches = Caches()
    caches.bind({"workloads": {}, "workloads_by_job": {}, "pods_by_job": {},
                 "admission_checks": {CHECK: [{"metadata": {"name": CHECK}}]},
                 "cluster_queues": {"cq": [frozenset({CHECK})]}})
    r = Readmission(k, elector, caches, workloads=Feed("workloads"), pods=Feed("pods"),
                    admission_checks=Feed("admissionchecks"),
                    cluster_queues=Feed("clusterqueues"), metrics=Metrics(),
                    events=EventRecorder(k, instance="test"))
    return World(k, elector, r)


@pytest.mark.parametrize("seed", SEEDS)
async def test_pods_of_the_previous_execution_left_means_wait(seed: int) -> None:
    w = await world(seed, pods=2)
    await w.r._act(KEY, TJ)
    assert w.check()["state"] == PENDING
    assert w.check()["message"] == waiting_message(2)
    assert names.ADMISSION_COUNT not in w.annotations()
    assert len(w.events("WaitingForPreviousExecution")) == 1
    rv = w.k.objects[(WORKLOAD.plural, NS, WL)]["metadata"]["resourceVersion"]
    await w.r._act(KEY, TJ)  # the same wait again: the message is right, nothing is written
    assert w.k.objects[(WORKLOAD.plural, NS, WL)]["metadata"]["resourceVersion"] == rv
    await w.k.delete(POD, old_pod(0)["metadata"]["name"], NS)
    await w.r._act(KEY, TJ)
    assert w.check()["message"] == waiting_message(1)


@pytest.mark.parametrize("seed", SEEDS)
async def test_no_pod_left_raises_a_once_and_sets_ready(seed: int) -> None:
    w = await world(seed)
    uid = w.k.objects[(WORKLOAD.plural, NS, WL)]["metadata"]["uid"]
    await w.r._act(KEY, TJ)
    assert w.annotations()[names.ADMISSION_COUNT] == "1"
    assert w.annotations()[names.ADMISSION_TOKEN] == f"{uid}/0"
    assert w.check()["state"] == READY
    assert w.check()["message"] == ready_message(1)
    assert w.check()["lastTransitionTime"] != "2026-01-01T00:00:00Z"  # the state changed
    assert len(w.events("AdmissionCountRaised")) == 1
    assert len(w.events("AdmissionCheckReady")) == 1
    await w.r._act(KEY, TJ)  # Ready now: nothing more to do
    assert w.annotations()[names.ADMISSION_COUNT] == "1"
    assert len(w.events("AdmissionCheckReady")) == 1
    assert (w.decisions("raised"), w.decisions("ready")) == (1, 1)


@pytest.mark.parametrize("seed", SEEDS)
async def test_a_leader_that_died_after_raising_a_is_finished_without_raising_again(
        seed: int) -> None:
    w = await world(seed)

    def die() -> None:
        raise errors.KubeError("connection lost", status=0, reason="Unreachable")

    w.when("patch", WORKLOAD, die)  # A rises, then the Ready write never arrives
    with pytest.raises(errors.KubeError, match="connection lost"):
        await w.r._act(KEY, TJ)
    assert w.annotations()[names.ADMISSION_COUNT] == "1"
    assert w.check()["state"] == PENDING
    await w.r._act(KEY, TJ)  # the next attempt (or the next leader)
    assert w.annotations()[names.ADMISSION_COUNT] == "1"
    assert w.check()["state"] == READY
    assert len(w.events("AdmissionCountRaised")) == 1  # named by the token: once


@pytest.mark.parametrize("seed", SEEDS)
async def test_trainjob_changed_under_the_raise_is_judged_again(seed: int) -> None:
    w = await world(seed)
    w.when("patch", TRAINJOB, lambda: w.k.write_now(
        TRAINJOB, TJ, NS, {"metadata": {"labels": {"someone": "else"}}}))
    await w.r._act(KEY, TJ)
    assert names.ADMISSION_COUNT not in w.annotations()  # the fenced patch was refused
    assert w.check()["state"] == PENDING
    assert len(w.r.queue) == 1  # queued to judge again from a fresh read
    await w.r._act(KEY, TJ)
    assert w.annotations()[names.ADMISSION_COUNT] == "1"
    assert w.check()["state"] == READY


@pytest.mark.parametrize("seed", SEEDS)
async def test_workload_changed_before_ready_is_not_approved(seed: int) -> None:
    w = await world(seed)
    # Between our read and the Ready write, the Workload moves on (e.g. Kueue evicts).
    w.when("patch", WORKLOAD, lambda: w.k.write_now(WORKLOAD, WL, NS, {"status": {
        "conditions": [{"type": "QuotaReserved", "status": "True"},
                       {"type": "Evicted", "status": "True", "reason": "Preempted"}]}}))
    await w.r._act(KEY, TJ)
    assert w.check()["state"] == PENDING  # the fence refused the stale Ready
    assert w.decisions("stale") == 1
    assert len(w.r.queue) == 1
    await w.r._act(KEY, TJ)  # judged again: being evicted, so nothing to do
    assert w.check()["state"] == PENDING
    assert w.decisions("ready") == 0


@pytest.mark.parametrize("seed", SEEDS)
async def test_workload_changed_before_the_wait_message_is_judged_again(seed: int) -> None:
    w = await world(seed, pods=1)
    w.when("patch", WORKLOAD, lambda: w.k.write_now(
        WORKLOAD, WL, NS, {"metadata": {"labels": {"x": "y"}}}))
    await w.r._act(KEY, TJ)
    assert w.check()["message"] == ""
    assert len(w.r.queue) == 1
    await w.r._act(KEY, TJ)
    assert w.check()["message"] == waiting_message(1)


async def test_a_pod_appearing_after_the_index_said_none_still_waits() -> None:
    w = await world(0)
    await w.k.create(POD, old_pod(7), NS)  # the indexes lag: only the live list sees it
    await w.r._act(KEY, TJ)
    assert w.check()["message"] == waiting_message(1)
    assert names.ADMISSION_COUNT not in w.annotations()


async def test_not_the_leader_any_more_raises_nothing() -> None:
    w = await world(0)
    w.k.write_now(LEASE, "lease", "ctl", {"spec": {"holderIdentity": "another"}})
    await w.r._act(KEY, TJ)
    assert names.ADMISSION_COUNT not in w.annotations()
    assert w.check()["state"] == PENDING


async def test_a_newer_admission_recorded_on_the_trainjob_means_our_read_is_stale() -> None:
    w = await world(0)
    uid = w.k.objects[(WORKLOAD.plural, NS, WL)]["metadata"]["uid"]
    w.k.write_now(TRAINJOB, TJ, NS, {"metadata": {"annotations": {
        names.ADMISSION_COUNT: "2", names.ADMISSION_TOKEN: f"{uid}/1"}}})
    await w.r._act(KEY, TJ)
    assert w.annotations()[names.ADMISSION_COUNT] == "2"
    assert w.check()["state"] == PENDING
    assert w.decisions("stale") == 1


async def test_gone_workload_or_trainjob_writes_nothing() -> None:
    w = await world(0)
    await w.k.delete(TRAINJOB, TJ, NS)
    before = w.k.rv
    await w.r._act(KEY, TJ)
    assert w.check()["state"] == PENDING
    assert w.k.rv == before
    await w.k.delete(WORKLOAD, WL, NS)
    before = w.k.rv
    await w.r._act(KEY, TJ)
    assert w.k.rv == before

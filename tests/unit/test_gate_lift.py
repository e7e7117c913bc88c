"""admission.gate_lift: the leader asks for each gated dispatch pod's start; the webhook's
answer (here the fake's ``before`` hook) decides."""

from __future__ import annotations

from typing import Any

import pytest

from admission.gate_lift import GateLift
from admission.intake import Feed
from admission.lease import LeaderElector
from admission.observability import EventRecorder, Metrics
from dispatch_kubeflow.core import errors, names
from dispatch_kubeflow.core.scheduling_gate import gated
from dispatch_kubeflow.kube.resources import EVENT, POD, Resource
from tests.unit.fake_kube import FakeKube

pytestmark = pytest.mark.asyncio
NS = "ns"


def gated_pod(name: str, job: str = "dj-1-s1", **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NS,
                         "labels": {names.JOB_ID_LABEL: "01JOB", names.JOBSET_NAME_LABEL: job}},
            "spec": {"schedulingGates": [{"name": "kueue.x-k8s.io/topology"},
                                         {"name": names.EXECUTION_GATE}],
                     "containers": [{"name": "node"}]},
            "status": {"phase": "Pending"}, **extra}


async def world(leading: bool = True) -> tuple[FakeKube, GateLift, Feed]:
    k = FakeKube(1)
    elector = LeaderElector(k, namespace="ctl", name="lease", identity="me",
                            clock=lambda: 0.0)
    if leading:
        assert await elector.try_acquire_or_renew()
    feed = Feed("pods")
    return k, GateLift(k, elector, feed, Metrics(), EventRecorder(k, instance="me")), feed


async def test_the_leader_lifts_only_dispatchs_gate() -> None:
    k, lift, feed = await world()
    pod = await k.create(POD, gated_pod("p0"), NS)
    feed.notify("ADDED", pod)
    assert await lift.lift((NS, "p0"))
    stored = await k.get(POD, "p0", NS)
    assert stored["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/topology"}]
    assert not gated(stored)
    # Asked again from a cache that still shows the gate: the patch's test fails, nothing
    # is written, and it counts as done.
    rv = stored["metadata"]["resourceVersion"]
    assert await lift.lift((NS, "p0"))
    assert (await k.get(POD, "p0", NS))["metadata"]["resourceVersion"] == rv


async def test_a_standby_asks_nothing() -> None:
    k, lift, feed = await world(leading=False)
    feed.notify("ADDED", await k.create(POD, gated_pod("p0"), NS))
    assert await lift.lift((NS, "p0"))
    assert gated(await k.get(POD, "p0", NS))
    assert k.calls["patch"] == 0


async def test_a_refused_start_is_asked_again_when_another_pod_of_the_job_goes() -> None:
    k, lift, feed = await world()
    refusing = [True]

    def webhook(verb: str, res: Resource, name: str) -> None:
        if verb == "patch" and res.plural == "pods" and refusing[0]:
            raise errors.KubeWebhookDenied(
                "denied", status=403, webhook=names.WEBHOOK_NAME,
                denial="dispatch-admission: the pod may not start yet: waiting for 1 pods")

    k.before = webhook
    new = await k.create(POD, gated_pod("new"), NS)
    feed.notify("ADDED", new)
    other_job = await k.create(POD, gated_pod("x", job="dj-2-s1"), NS)
    feed.notify("ADDED", other_job)
    assert not await lift.lift((NS, "new"))
    assert gated(await k.get(POD, "new", NS))
    while len(lift.queue):  # drain what the events queued, as the workers would
        lift.queue.done(await lift.queue.get())
    # The old pod of the same job goes: the refused pod is queued again; another job's
    # pod going does not queue it.
    feed.notify("DELETED", gated_pod("y", job="dj-3-s1"))
    assert len(lift.queue) == 0
    feed.notify("DELETED", {"metadata": {"name": "old", "namespace": NS, "labels": {
        names.JOB_ID_LABEL: "01JOB", names.JOBSET_NAME_LABEL: "dj-1-s1"}},
        "status": {"phase": "Running"}})
    assert await lift.queue.get() == (NS, "new")
    # The pod says why it waits, once however often it is refused for the same reason.
    creates = k.calls["create"]
    assert not await lift.lift((NS, "new"))
    assert k.calls["create"] == creates  # not even asked again
    events = [e for e in k.all(EVENT) if e["regarding"]["name"] == "new"]
    assert [(e["reason"], e["note"]) for e in events] == [
        ("StartWaiting", "dispatch-admission: the pod may not start yet: waiting for 1 pods")]
    refusing[0] = False
    assert await lift.lift((NS, "new"))
    assert not gated(await k.get(POD, "new", NS))


async def test_another_webhooks_refusal_is_an_error_not_a_wait() -> None:
    k, lift, feed = await world()

    def other(verb: str, res: Resource, name: str) -> None:
        if verb == "patch":
            raise errors.KubeWebhookDenied("denied", status=403, webhook="other.example.com")

    k.before = other
    feed.notify("ADDED", await k.create(POD, gated_pod("p0"), NS))
    with pytest.raises(errors.KubeWebhookDenied):
        await lift.lift((NS, "p0"))

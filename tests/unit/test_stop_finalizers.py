"""A pod held by the Job controller's finalizer of a Job that is gone
(dispatch_kubeflow.stop.finalizers)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from dispatch_kubeflow.core import names
from dispatch_kubeflow.find import KINDS
from dispatch_kubeflow.kube import Resource
from dispatch_kubeflow.kube.resources import (
    JOB,
    POD,
)
from dispatch_kubeflow.stop import stop_job
from tests.unit.fake_kube import FakeKube
from tests.unit.stop_helpers import (
    JOB_ID,
    NS,
    QUICK,
    TJ,
    Obj,
    a_pod_of_a_gone_job,
    left,
    passes_of,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.virtual_time]


async def test_the_finalizer_of_a_job_that_is_gone_is_released(
        monkeypatch: pytest.MonkeyPatch) -> None:
    k = FakeKube()
    await k.create(POD, a_pod_of_a_gone_job(names.JOB_TRACKING_FINALIZER), NS)
    patches: list[Obj] = []
    patch = k.patch

    async def recorded(res: Resource, name: str, body: Any, *a: Any, **kw: Any) -> Obj:
        patches.append(body)
        return await patch(res, name, body, *a, **kw)

    monkeypatch.setattr(k, "patch", recorded)
    passes, report = await passes_of(k, 5, monkeypatch)
    assert passes < 10
    assert left(k, POD) == set()
    assert report.complete
    assert {(r.kind, r.name) for r in report.stopped} == {("Pod", f"{TJ}-node-0-0")}
    # One release, fenced by the version judged.
    assert len(patches) == 1
    assert patches[0]["metadata"]["finalizers"] == []
    assert patches[0]["metadata"]["resourceVersion"]


async def test_only_the_job_controllers_finalizer_is_released(
        monkeypatch: pytest.MonkeyPatch) -> None:
    k = FakeKube()
    await k.create(POD, a_pod_of_a_gone_job(names.JOB_TRACKING_FINALIZER, "example.com/keep"),
                   NS)
    _, report = await passes_of(k, 0.5, monkeypatch)
    stuck = k.objects[("pods", NS, f"{TJ}-node-0-0")]
    assert stuck["metadata"]["finalizers"] == ["example.com/keep"]
    assert {(r.kind, r.name) for r in report.alive} == {("Pod", f"{TJ}-node-0-0")}


async def test_a_finalizer_whose_job_is_there_is_the_job_controllers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The owner exists but is not of this job by its labels, so no view of StopJob holds
    # it: the GET by name before the release finds it, and the finalizer stays.
    k = FakeKube()
    job = await k.create(JOB, {"metadata": {"name": f"{TJ}-node-0"}}, NS)
    pod = a_pod_of_a_gone_job(names.JOB_TRACKING_FINALIZER)
    pod["metadata"]["ownerReferences"][0]["uid"] = job["metadata"]["uid"]
    await k.create(POD, pod, NS)
    passes, report = await passes_of(k, 0.5, monkeypatch)
    stuck = k.objects[("pods", NS, f"{TJ}-node-0-0")]
    assert stuck["metadata"]["finalizers"] == [names.JOB_TRACKING_FINALIZER]
    assert k.calls["patch"] == 0
    # Looked at again every four graces, not on every pass.
    assert 1 <= k.calls["get"] <= 1 + 0.5 // (4 * QUICK.gc_grace)
    assert passes < 20  # a pass per look, not a spin (thousands)
    assert {(r.kind, r.name) for r in report.alive} == {("Pod", f"{TJ}-node-0-0")}


async def test_a_release_that_conflicts_is_judged_again_at_the_new_version() -> None:
    k = FakeKube()
    await k.create(POD, a_pod_of_a_gone_job(names.JOB_TRACKING_FINALIZER), NS)
    changed: list[str] = []

    def when(verb: str, res: Resource, name: str) -> None:
        if (verb, res) == ("patch", POD) and not changed:
            # Between StopJob's judgement and its patch, someone writes the pod.
            changed.append(name)
            k.write_now(POD, name, NS, {"metadata": {"annotations": {"x": "y"}}})

    k.before = when
    report = await stop_job(k, NS, JOB_ID, "r", kinds=KINDS, limit=timedelta(seconds=5),
                            limits=QUICK)
    assert changed
    assert k.calls["patch"] == 2  # the first a 409, the second at the new version
    assert left(k, POD) == set()
    assert report.complete

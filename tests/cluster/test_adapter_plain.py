"""The adapter in plain mode (no Kueue): suspend is the gate, the adapter raises A itself."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio

from dispatch_kubeflow import (
    Actor,
    ActorKind,
    Backend,
    CallMeta,
    Capability,
    CapabilitySource,
    CapabilityValue,
    ConflictError,
    DeadlineExceeded,
    HoldError,
    HoldMeta,
    JobID,
    ObjectState,
    OutputStream,
    StartRequest,
)
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r
from tests.cluster.helpers import eventually
from tests.cluster.test_adapter_kueue import (
    TALKER,
    deadline,
    held_only_once_pods_are_gone,
    interrupted_start,
    job_objects,
    rank_zero_log,
    running_job,
    spec,
)

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio]


@pytest_asyncio.fixture
async def plain(kubeconfig: str, namespace: str, admission: Any, kube: Kube
                ) -> AsyncIterator[Backend]:
    await admission.deployed(kube)  # the webhook injects the identity in both modes
    async with await Backend.connect({
        "cluster": {"kubeconfig": kubeconfig}, "namespace": namespace,
        "probeRuntime": {"kind": "ClusterTrainingRuntime", "name": "dispatch-kind"},
        "timeouts": {"stopJob": "2m", "preflightProbe": "3s"},
    }) as b:
        yield b


def hold(instance: int, until: timedelta = timedelta(hours=1)) -> HoldMeta:
    now = datetime.now(UTC)
    return HoldMeta(instance, Actor(ActorKind.SERVICE, "plain-test"),
                    CallMeta(now + timedelta(minutes=2)), until=now + until, reason="plain")


async def state_is(b: Backend, ref: Any, want: ObjectState) -> Any:
    obs = await b.inspect(ref)
    return obs if obs.state is want else None


async def test_plain_capabilities(plain: Backend) -> None:
    caps = await plain.capabilities()
    assert all(c.value is CapabilityValue.YES for c in caps.values()), caps
    assert caps[Capability.READMISSION_GATE].source is CapabilitySource.MODE


async def test_plain_flow(plain: Backend, kube: Kube, namespace: str) -> None:
    job = JobID.new()
    ref = await plain.start(StartRequest(job, 1, 1, spec()))
    assert (await plain.inspect(ref)).state is ObjectState.GATED
    tj = await kube.get(r.TRAINJOB, ref.name, namespace)
    assert tj["spec"]["suspend"] is True
    assert names.ADMISSION_GATED_BY not in tj["metadata"]["annotations"]

    await plain.open(ref)
    await plain.open(ref)
    await eventually(lambda: state_is(plain, ref, ObjectState.RUNNING), 180, "running")
    first = await rank_zero_log(plain, job, "tutorial-ready")
    assert f"DISPATCH_ATTEMPT={job}.1.1.1.0" in first

    await plain.hold(ref, hold(1))
    await eventually(lambda: state_is(plain, ref, ObjectState.HELD), 120, "held")
    ann = (await kube.get(r.TRAINJOB, ref.name, namespace))["metadata"]["annotations"]
    assert set(names.HOLD_ANNOTATIONS) <= set(ann)
    with pytest.raises(HoldError):
        await plain.release(ref, hold(2))
    await plain.release(ref, hold(1))
    await eventually(lambda: state_is(plain, ref, ObjectState.RUNNING), 180, "running again")
    second = await rank_zero_log(plain, job, "DISPATCH_EPOCH=1000002")
    assert f"DISPATCH_ATTEMPT={job}.1.1.2.0" in second

    report = await plain.stop_job(job, "done")
    assert not report.alive
    assert await plain.find(job) == ()


async def test_plain_expired_hold_released_by_wait(plain: Backend) -> None:
    # Inspect only reads: in plain mode the library releases an expired hold in a wait.
    job = JobID.new()
    ref = await plain.start(StartRequest(job, 1, 1, spec()))
    await plain.open(ref)
    await plain.hold(ref, hold(1, until=timedelta(seconds=2)))
    await plain.wait(ref, ObjectState.RUNNING, deadline=deadline(180))
    await plain.stop_job(job, "done")


async def test_plain_start_idempotent_conflict_and_interrupted_stop(
        plain: Backend, kube: Kube, namespace: str) -> None:
    job = JobID.new()
    ref = await plain.start(StartRequest(job, 1, 1, spec()))
    assert await plain.start(StartRequest(job, 1, 1, spec())) == ref
    with pytest.raises(ConflictError):
        await plain.start(StartRequest(job, 1, 1, spec(nodes=1)))
    assert (await job_objects(kube, namespace, job)).get("TrainJob") == [ref.name]
    # Submission 2 interrupted after its runtime copy: found and stopped with the rest.
    copy_only = await interrupted_start(plain, kube, StartRequest(job, 2, 1, spec()),
                                        with_trainjob=False)
    assert ("TrainingRuntime", copy_only) in {(f.kind, f.name) for f in await plain.find(job)}
    report = await plain.stop_job(job, "done")
    stopped = {(s.kind, s.name) for s in report.stopped}
    assert {("TrainJob", ref.name), ("TrainingRuntime", ref.name),
            ("TrainingRuntime", copy_only)} <= stopped
    assert not report.alive
    assert not report.unproven
    assert await job_objects(kube, namespace, job) == {}


async def test_plain_hold_rules_output_and_stop(
        plain: Backend, kube: Kube, namespace: str) -> None:
    job, ref = await running_job(plain, TALKER, nodes=2)
    first = await rank_zero_log(plain, job, "out-0")
    assert f"DISPATCH_ATTEMPT={job}.1.1.1.0" in first
    async with await plain.output(job, 0, OutputStream.STDERR) as err:
        text = (await err.read()).decode()
    assert "err-0" in text
    assert "out-" not in text

    with pytest.raises(DeadlineExceeded):
        await plain.hold(ref, HoldMeta(1, Actor(ActorKind.SERVICE, "plain-test"),
                                       CallMeta(datetime.now(UTC) - timedelta(seconds=1))))
    tj = await kube.get(r.TRAINJOB, ref.name, namespace)
    assert tj["spec"]["suspend"] is False
    assert not set(names.HOLD_ANNOTATIONS) & set(tj["metadata"]["annotations"])

    await plain.hold(ref, hold(1))
    await held_only_once_pods_are_gone(plain, kube, ref)

    with pytest.raises(HoldError):
        await plain.release(ref, hold(2))
    tj = await kube.get(r.TRAINJOB, ref.name, namespace)
    assert tj["metadata"]["annotations"][names.HOLD_INSTANCE] == "1"
    assert tj["spec"]["suspend"] is True
    assert (await plain.inspect(ref)).state is ObjectState.HELD

    await plain.release(ref, hold(1))
    await plain.wait(ref, ObjectState.RUNNING, deadline=deadline())
    second = await rank_zero_log(plain, job, "DISPATCH_EPOCH=")
    assert f"DISPATCH_ATTEMPT={job}.1.1.2.0" in second
    assert ".1.1.1.0" not in second

    report = await plain.stop_job(job, "done")
    assert ("TrainJob", ref.name) in {(s.kind, s.name) for s in report.stopped}
    assert not report.alive
    assert not report.unproven
    assert await job_objects(kube, namespace, job) == {}


async def test_plain_jobset_remade_waits_for_hold_and_release(
        plain: Backend, kube: Kube, namespace: str) -> None:
    """Plain mode has no rebind (A is the library's to write): a JobSet re-made under a
    running job makes no pod that runs, at the old identity or any other, until the
    service holds and releases the job; Release then runs it past the old JobSet's J."""
    job = JobID.new()
    ref = await plain.start(StartRequest(job, 1, 1, spec()))
    await plain.open(ref)
    await eventually(lambda: state_is(plain, ref, ObjectState.RUNNING), 180, "running")
    await rank_zero_log(plain, job, f"DISPATCH_ATTEMPT={job}.1.1.1.0")
    old = await kube.get(r.JOBSET, ref.name, namespace)
    await kube.delete(r.JOBSET, ref.name, namespace)

    async def remade() -> dict[str, Any] | None:
        js = await kube.get_or_none(r.JOBSET, ref.name, namespace)
        return js if js and js["metadata"]["uid"] != old["metadata"]["uid"] else None

    new = await eventually(remade, 60, "Trainer's new JobSet")
    await asyncio.sleep(30)  # the old pods go; nothing of the new JobSet may start
    pods, _ = await kube.list(r.POD, namespace,
                              label_selector=names.pods_of(ref.name))
    made = [p["metadata"]["name"] for p in pods
            if p["metadata"]["labels"].get(names.JOBSET_UID_LABEL) == new["metadata"]["uid"]]
    assert made == [], f"pods of the re-made JobSet made without an approval: {made}"
    await plain.hold(ref, hold(1))
    await eventually(lambda: state_is(plain, ref, ObjectState.HELD), 120, "held")
    await plain.release(ref, hold(1))
    await eventually(lambda: state_is(plain, ref, ObjectState.RUNNING), 180, "running again")
    # 1 + 1 + maxRestarts (3 in dispatch-kind): past every J the old JobSet could reach.
    await rank_zero_log(plain, job, f"DISPATCH_ATTEMPT={job}.1.1.5.0")
    tj = await kube.get(r.TRAINJOB, ref.name, namespace)
    assert tj["metadata"]["annotations"][names.APPROVED_JOBSET] == new["metadata"]["uid"]
    assert not (await plain.stop_job(job, "done")).alive

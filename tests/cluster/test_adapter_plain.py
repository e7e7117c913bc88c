"""The adapter in plain mode (no Kueue): suspend is the gate, the adapter raises A itself."""

from __future__ import annotations

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
    HoldError,
    HoldMeta,
    JobID,
    ObjectState,
    StartRequest,
)
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r
from tests.cluster.helpers import eventually
from tests.cluster.test_adapter_kueue import rank_zero_log, spec

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio]


@pytest_asyncio.fixture
async def plain(kubeconfig: str, namespace: str, admission: Any, kube: Kube
                ) -> AsyncIterator[Backend]:
    admission.start()  # the webhook injects the identity in both modes
    await admission.wait_leader(kube)
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


async def test_plain_expired_hold_released_by_inspect(plain: Backend) -> None:
    job = JobID.new()
    ref = await plain.start(StartRequest(job, 1, 1, spec()))
    await plain.open(ref)
    await plain.hold(ref, hold(1, until=timedelta(seconds=2)))
    await eventually(lambda: state_is(plain, ref, ObjectState.RUNNING), 180,
                     "the expired hold released by Inspect")
    await plain.stop_job(job, "done")

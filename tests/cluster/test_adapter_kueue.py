"""The adapter against the local cluster in Kueue mode: the seed's tutorial and its edges.

Needs the local cluster (``kubeconfig``/``kube`` fixtures) and the admission controller
(``admission`` fixture: host processes holding the Lease and serving the webhook).
"""

from __future__ import annotations

import asyncio
import dataclasses
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
    CapabilityValue,
    ConflictError,
    HoldError,
    HoldMeta,
    Image,
    JobID,
    JobSpec,
    ObjectState,
    ObserveOnlyError,
    OutputStream,
    RuntimeRef,
    SpecError,
    StartRequest,
)
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r
from tests.cluster.helpers import IMAGE, delete_cluster_queue, eventually, make_queues

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio]

SCRIPT = ("env | grep '^DISPATCH_' | sort; echo tutorial-ready; trap 'exit 143' TERM; "
          "while :; do sleep 1; done")


def settings(kubeconfig: str, namespace: str, **kueue: Any) -> dict[str, Any]:
    return {
        "cluster": {"kubeconfig": kubeconfig},
        "namespace": namespace,
        "probeRuntime": {"kind": "ClusterTrainingRuntime", "name": "dispatch-kind"},
        "kueue": {"localQueue": "lq", "admissionCheck": names.ADMISSION_CHECK, **kueue},
        "timeouts": {"request": "10s", "stopJob": "2m", "preflightProbe": "5s"},
    }


def spec(nodes: int = 2, command: str = SCRIPT) -> JobSpec:
    return JobSpec(["/bin/sh", "-c", command], nodes,
                   [Image(IMAGE, "IfNotPresent"), RuntimeRef("ClusterTrainingRuntime",
                                                             "dispatch-kind")])


def hold_meta(instance: int = 1, seconds: float = 60) -> HoldMeta:
    now = datetime.now(UTC)
    return HoldMeta(instance, Actor(ActorKind.HUMAN, "test"),
                    CallMeta(now + timedelta(seconds=seconds)),
                    until=now + timedelta(hours=1), reason="a test's hold")


@pytest_asyncio.fixture
async def queued(kube: Kube, namespace: str) -> AsyncIterator[str]:
    await make_queues(kube, namespace, checks=[names.ADMISSION_CHECK], cpu="1", memory="1Gi")
    try:
        yield namespace
    finally:
        await delete_cluster_queue(kube, namespace)


@pytest_asyncio.fixture
async def backend(kubeconfig: str, queued: str, admission: Any, kube: Kube
                  ) -> AsyncIterator[Backend]:
    admission.start()
    await admission.wait_leader(kube)
    async with await Backend.connect(settings(kubeconfig, queued)) as b:
        yield b


async def objects_of(kube: Kube, namespace: str, job: JobID) -> list[str]:
    out = []
    for res in (r.TRAINJOB, r.TRAINING_RUNTIME, r.WORKLOAD, r.JOBSET, r.JOB, r.POD):
        items, _ = await kube.list(res, namespace)
        out += [f"{res.kind}/{i['metadata']['name']}" for i in items
                if job.lower() in i["metadata"]["name"]]
    return out


async def rank_zero_log(b: Backend, job: JobID, marker: str) -> str:
    async def read() -> str | None:
        try:
            async with await b.output(job, 0, OutputStream.STDOUT) as stream:
                text = (await stream.read()).decode()
        except Exception:  # not there yet
            return None
        return text if marker in text else None

    return await eventually(read, 120, f"{marker!r} in rank 0's log", interval=1)


async def test_preflight_proves_everything(backend: Backend, queued: str) -> None:
    caps = await backend.capabilities()
    for cap in Capability:
        assert caps[cap].value is CapabilityValue.YES, (cap, caps[cap])
    assert caps[Capability.READMISSION_GATE].reason == (
        f"ClusterQueue {queued} lists AdmissionCheck dispatch-admission, whose controller "
        "holds Lease dispatch-system/dispatch-admission")
    assert not backend.observe_only


async def test_tutorial_flow(backend: Backend, kube: Kube, queued: str) -> None:
    job = JobID.new()
    ref = await backend.start(StartRequest(job, 1, 1, spec()))
    assert ref.id == f"{queued}/dj-{job.lower()}-s1"
    obs = await backend.inspect(ref)
    assert obs.state is ObjectState.GATED
    assert obs.cause.detail == ""
    tj = await kube.get(r.TRAINJOB, ref.name, queued)
    assert tj["metadata"]["annotations"][names.ADMISSION_GATED_BY] == names.GATE
    rt = await kube.get(r.TRAINING_RUNTIME, ref.name, queued)
    assert rt["metadata"]["ownerReferences"][0]["uid"] == tj["metadata"]["uid"]
    assert await backend.start(StartRequest(job, 1, 1, spec())) == ref  # idempotent
    with pytest.raises(ConflictError):
        await backend.start(StartRequest(job, 1, 1, spec(nodes=1)))

    await backend.open(ref)
    await backend.open(ref)  # harmless twice
    await eventually(lambda: _state(backend, ref, ObjectState.RUNNING), 180, "running")
    first = await rank_zero_log(backend, job, "tutorial-ready")
    assert f"DISPATCH_ATTEMPT={job}.1.1.1.0" in first
    assert "DISPATCH_EPOCH=1000001" in first

    await backend.hold(ref, hold_meta(1))
    wl = (await kube.list(r.WORKLOAD, queued, label_selector=(
        f"{names.KUEUE_JOB_UID_LABEL}={tj['metadata']['uid']}")))[0][0]
    assert wl["spec"]["active"] is False
    assert set(names.HOLD_ANNOTATIONS) <= set(wl["metadata"]["annotations"])
    held = await eventually(lambda: _state(backend, ref, ObjectState.HELD), 120, "held")
    assert held.hold_instance == 1
    with pytest.raises(HoldError):
        await backend.release(ref, hold_meta(2))
    assert (await backend.inspect(ref)).state is ObjectState.HELD  # the hold stays

    await backend.release(ref, hold_meta(1))
    await eventually(lambda: _state(backend, ref, ObjectState.RUNNING), 180, "running again")
    second = await rank_zero_log(backend, job, "DISPATCH_EPOCH=1000002")
    assert f"DISPATCH_ATTEMPT={job}.1.1.2.0" in second

    report = await backend.stop_job(job, "the test is over")
    assert not report.alive
    assert not report.unproven
    assert any(s.kind == "TrainJob" for s in report.stopped)
    assert await backend.find(job) == ()
    assert await objects_of(kube, queued, job) == []


async def _state(b: Backend, ref: Any, want: ObjectState) -> Any:
    obs = await b.inspect(ref)
    return obs if obs.state is want else None


async def test_foreign_gate_stays(backend: Backend, kube: Kube, queued: str) -> None:
    """A TrainJob made with dispatch's gate and someone else's: Open removes only ours."""
    from dispatch_kubeflow import start as start_mod

    req, name, image, _ = start_mod.validate(StartRequest(JobID.new(), 1, 1, spec()))
    digest = start_mod.spec_hash(req)
    source = await kube.get(r.CLUSTER_TRAINING_RUNTIME, "dispatch-kind")
    await kube.create(r.TRAINING_RUNTIME, start_mod.runtime_copy(
        source, name=name, namespace=queued, labels=start_mod.job_labels(req), digest=digest,
        image=image), queued)
    body = start_mod.trainjob_body(req, backend.settings, name=name, image=image, digest=digest)
    body["metadata"]["annotations"][names.ADMISSION_GATED_BY] = \
        f"{names.GATE},example.com/theirs"
    await kube.create(r.TRAINJOB, body, queued)
    ref = await backend.start(req)  # the same request: adopts both, waits for the Workload
    before = await backend.inspect(ref)
    assert before.state is ObjectState.GATED
    assert before.cause.detail == "gated by example.com/theirs"
    await backend.open(ref)
    await backend.open(ref)
    obs = await backend.inspect(ref)
    assert obs.state is ObjectState.GATED
    assert obs.cause.detail == "gated by example.com/theirs"
    ann = (await kube.get(r.TRAINJOB, name, queued))["metadata"]["annotations"]
    assert ann[names.ADMISSION_GATED_BY] == "example.com/theirs"
    report = await backend.stop_job(req.job, "done")
    assert not report.alive


async def test_bad_inputs_leave_nothing(backend: Backend, kube: Kube, queued: str) -> None:
    job = JobID.new()
    bad = [
        StartRequest(job, 1, 1, JobSpec(["true"], 1, [RuntimeRef("ClusterTrainingRuntime",
                                                                "dispatch-kind")])),
        StartRequest(job, 1, 1, JobSpec(["true"], 1, [Image(IMAGE)])),
        StartRequest(job, 1, 1, dataclasses.replace(spec(), nodes=0)),
        StartRequest(job, 10**40, 1, spec()),
        StartRequest(job, 1, 1, JobSpec(["true"], 1, [Image(IMAGE), RuntimeRef(
            "ClusterTrainingRuntime", "no-such-runtime")])),
    ]
    for req in bad:
        with pytest.raises(SpecError):
            await backend.start(req)
    with pytest.raises(SpecError):
        await backend.start(StartRequest("not-a-job-id", 1, 1, spec()))  # type: ignore[arg-type]
    assert await objects_of(kube, queued, job) == []


async def test_cluster_queue_with_on_flavors_is_refused(
        kubeconfig: str, kube: Kube, namespace: str, admission: Any) -> None:
    admission.start()
    await admission.wait_leader(kube)
    await make_queues(kube, namespace, checks=[names.ADMISSION_CHECK],
                      on_flavors=["default-flavor"])
    try:
        async with await Backend.connect(settings(kubeconfig, namespace)) as b:
            st = (await b.capabilities())[Capability.READMISSION_GATE]
            assert st.value is CapabilityValue.NO
            assert "a check limited to some flavors lets workloads on other flavors be " \
                   "admitted without it" in st.reason
            with pytest.raises(ObserveOnlyError) as err:
                await b.start(StartRequest(JobID.new(), 1, 1, spec()))
            assert any("onFlavors" in reason for reason in err.value.reasons)
    finally:
        await delete_cluster_queue(kube, namespace)


async def test_dead_controller_is_observe_only(
        kubeconfig: str, kube: Kube, queued: str, admission: Any) -> None:
    rep = admission.start()
    await admission.wait_leader(kube)
    rep.kill9()  # no release: the Lease goes stale after its duration
    await asyncio.sleep(admission.lease_duration + 1)
    async with await Backend.connect(settings(kubeconfig, queued)) as b:
        st = (await b.capabilities())[Capability.READMISSION_GATE]
        assert st.value is CapabilityValue.NO
        assert "Lease dispatch-system/dispatch-admission" in st.reason
        with pytest.raises(ObserveOnlyError):
            await b.start(StartRequest(JobID.new(), 1, 1, spec()))
        assert await b.find(JobID.new()) == ()  # observing still works


async def test_missing_rbac_is_named(kubeconfig: str, kube: Kube, queued: str,
                                     admission: Any, tmp_path: Any) -> None:
    """A service account that may do everything but delete pods: preflight names it."""
    pytest.skip("needs a kubeconfig for a service account (token); written by the lead's "
                "helpers when available")

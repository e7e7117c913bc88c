"""Backend.jobs, watch_jobs and events, and Release's outcome, against the local cluster."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from dispatch_kubeflow import Backend, JobEvent, JobID, ObjectState, ReleaseOutcome, StartRequest
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube
from tests.cluster.helpers import delete_cluster_queue, make_queues
from tests.cluster.test_adapter_kueue import TALKER, hold_meta, settings, spec

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio]


@pytest_asyncio.fixture
async def kueue_backend(kubeconfig: str, namespace: str, admission: Any,
                        kube: Kube) -> AsyncIterator[Backend]:
    await make_queues(kube, namespace, checks=[names.ADMISSION_CHECK], cpu="2", memory="1Gi")
    await admission.deployed(kube)
    try:
        async with await Backend.connect(settings(kubeconfig, namespace)) as b:
            yield b
    finally:
        await delete_cluster_queue(kube, namespace)


async def test_jobs_lists_with_one_request_per_kind(kueue_backend: Backend) -> None:
    b = kueue_backend
    started = [JobID.new() for _ in range(4)]
    refs = [await b.start(StartRequest(job, 1, 1, spec(1, TALKER))) for job in started]
    await b.start(StartRequest(started[0], 2, 1, spec(1, TALKER)))  # a second submission
    before = b.kube.requests
    listed = await b.jobs()
    assert b.kube.requests - before == 3  # TrainJobs, pods, Workloads: never one per job
    assert [(j.job, j.submission) for j in listed] == sorted(
        [(job, 1) for job in started] + [(started[0], 2)])
    for j in listed:
        assert j.observation == await b.inspect(j.ref), j
        assert j.observation.state is ObjectState.GATED
    assert {r.name for r in refs} <= {j.ref.name for j in listed}
    for job in started:
        await b.stop_job(job, "done")
    assert await b.jobs() == []


async def test_watch_jobs_and_follow_events(kueue_backend: Backend) -> None:
    b = kueue_backend
    job = JobID.new()
    ref = await b.start(StartRequest(job, 1, 1, spec(2, TALKER)))
    seen_states: list[ObjectState] = []
    events: list[JobEvent] = []

    async def watch() -> None:
        async for listed in b.watch_jobs():
            mine = [j for j in listed if j.job == job]
            state = mine[0].observation.state if mine else ObjectState.GONE
            if not seen_states or seen_states[-1] is not state:
                seen_states.append(state)
            if mine and mine[0].observation.pods_running == 2:
                return

    async def follow() -> None:
        async for ev in b.events(job, follow=True):
            events.append(ev)
            if ev.reason == "AdmissionCheckReady":
                return

    async with asyncio.timeout(180):
        watching = asyncio.create_task(watch())
        following = asyncio.create_task(follow())
        await asyncio.sleep(1)
        await b.open(ref)
        await asyncio.gather(watching, following)
    assert seen_states[0] is ObjectState.GATED
    assert seen_states[-1] is ObjectState.RUNNING
    reasons = [e.reason for e in events]
    assert reasons.index("AdmissionCountRaised") < reasons.index("AdmissionCheckReady")
    listed = [e async for e in b.events(job)]
    assert [e.time for e in listed] == sorted(e.time for e in listed)
    assert {"CreatedWorkload", "AdmissionCountRaised", "AdmissionCheckReady"} <= {
        e.reason for e in listed}
    assert {e.regarding.kind for e in listed} >= {"TrainJob", "Workload", "JobSet", "Job"}
    await b.stop_job(job, "done")


async def test_release_of_a_job_not_held_says_so(kueue_backend: Backend) -> None:
    b = kueue_backend
    job = JobID.new()
    ref = await b.start(StartRequest(job, 1, 1, spec(1, TALKER)))
    await b.open(ref)
    await b.hold(ref, hold_meta(1))
    assert await b.release(ref, hold_meta(1)) is ReleaseOutcome.RELEASED
    assert await b.release(ref, hold_meta(1)) is ReleaseOutcome.NOT_HELD
    await b.stop_job(job, "done")

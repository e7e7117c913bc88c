"""Plain mode's admission (dispatch_kubeflow.admission_count.admit_plain) against the
in-memory fake of our port: A rises once per admission, only when no pod of the previous
execution is left, and never twice for one admission however calls interleave."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dispatch_kubeflow.admission_count import admit_plain
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.admission_count import admissions
from dispatch_kubeflow.kube.resources import JOBSET, POD, TRAINJOB
from tests.unit.fake_kube import FakeKube

pytestmark = pytest.mark.virtual_time

NS, NAME = "ns", "dj-x-s1"


async def suspended_trainjob(kube: FakeKube, a: int = 0, *, jobset: bool = True) -> None:
    annotations = {names.ADMISSION_COUNT: str(a)} if a else {}
    await kube.create(TRAINJOB, {"metadata": {"name": NAME, "annotations": annotations},
                                 "spec": {"suspend": True}}, NS)
    if jobset:  # Trainer makes the JobSet with the TrainJob, suspended
        await kube.create(JOBSET, {"metadata": {"name": NAME}, "spec": {"suspend": True}}, NS)


async def old_pod(kube: FakeKube, phase: str = "Running") -> None:
    await kube.create(POD, {"metadata": {"name": f"{NAME}-node-0-0-x", "labels": {
        names.JOBSET_NAME_LABEL: NAME}}, "status": {"phase": phase}}, NS)


def always(_: Any) -> bool:
    return True


async def trainjob(kube: FakeKube) -> dict[str, Any]:
    return await kube.get(TRAINJOB, NAME, NS)


@pytest.mark.asyncio
async def test_with_no_pod_left_a_rises_and_the_job_is_unsuspended() -> None:
    kube = FakeKube()
    await suspended_trainjob(kube)
    assert await admit_plain(kube, NS, NAME, should_admit=always)
    tj = await trainjob(kube)
    assert admissions(tj) == 1
    assert tj["spec"]["suspend"] is False
    assert tj["metadata"]["annotations"][names.ADMISSION_TOKEN] == "plain/1"


@pytest.mark.asyncio
async def test_it_waits_until_the_previous_execution_s_pods_are_gone() -> None:
    kube = FakeKube()
    await suspended_trainjob(kube, a=1)
    await old_pod(kube)
    admitting = asyncio.create_task(admit_plain(kube, NS, NAME, should_admit=always))
    await asyncio.sleep(0.05)
    assert not admitting.done()
    assert admissions(await trainjob(kube)) == 1, "A rose while a pod was left"
    await kube.delete(POD, f"{NAME}-node-0-0-x", NS)
    assert await asyncio.wait_for(admitting, 5)
    assert admissions(await trainjob(kube)) == 2


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.asyncio
async def test_concurrent_admissions_raise_a_once(seed: int) -> None:
    kube = FakeKube(seed)
    await suspended_trainjob(kube)
    results = await asyncio.gather(*(admit_plain(kube, NS, NAME, should_admit=always)
                                     for _ in range(3)))
    assert sorted(results) == [False, False, True]
    assert admissions(await trainjob(kube)) == 1


@pytest.mark.asyncio
async def test_a_change_under_the_patch_is_a_conflict_and_it_looks_again() -> None:
    kube = FakeKube()
    await suspended_trainjob(kube)
    patches = 0

    def before(verb: str, res: Any, name: str) -> None:
        nonlocal patches
        if verb == "patch" and res == TRAINJOB:
            patches += 1
            if patches == 1:  # someone else writes the TrainJob just before our patch
                kube.write_now(TRAINJOB, NAME, NS, {"metadata": {"labels": {"x": "y"}}})

    kube.before = before
    assert await admit_plain(kube, NS, NAME, should_admit=always)
    assert patches == 2
    assert admissions(await trainjob(kube)) == 1


@pytest.mark.asyncio
async def test_nothing_is_written_when_the_caller_s_condition_no_longer_holds() -> None:
    kube = FakeKube()
    await suspended_trainjob(kube)
    assert not await admit_plain(kube, NS, NAME, should_admit=lambda tj: False)
    assert admissions(await trainjob(kube)) == 0
    assert (await trainjob(kube))["spec"]["suspend"] is True


@pytest.mark.asyncio
@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
async def test_a_finished_pod_does_not_hold_the_admission_back(phase: str) -> None:
    # Issue 26, case 3, in plain mode: the suspended Job keeps a rank that ended.
    kube = FakeKube()
    await suspended_trainjob(kube, a=1)
    await old_pod(kube, phase)
    async with asyncio.timeout(5):
        assert await admit_plain(kube, NS, NAME, should_admit=always)
    tj = await trainjob(kube)
    assert tj["metadata"]["annotations"][names.ADMISSION_COUNT] == "2"


@pytest.mark.asyncio
async def test_the_admission_names_the_jobset_and_waits_for_trainer_to_make_it() -> None:
    kube = FakeKube()
    await suspended_trainjob(kube, jobset=False)
    admitting = asyncio.create_task(admit_plain(kube, NS, NAME, should_admit=always))
    await asyncio.sleep(1.5)
    assert not admitting.done()  # no JobSet: nothing to name yet
    js = await kube.create(JOBSET, {"metadata": {"name": NAME}, "spec": {"suspend": True}}, NS)
    async with asyncio.timeout(5):
        assert await admitting
    tj = await trainjob(kube)
    assert tj["metadata"]["annotations"][names.APPROVED_JOBSET] == js["metadata"]["uid"]


@pytest.mark.asyncio
async def test_a_jobset_remade_while_held_raises_a_past_its_restarts() -> None:
    # The model's RAISEPASTJ: the new JobSet starts again at J = 0, so A must rise past
    # every J of the old one (maxRestarts), or (A, J=1) and (A + 1, J=0) share an epoch.
    kube = FakeKube()
    await suspended_trainjob(kube, a=1, jobset=False)
    tj = await trainjob(kube)
    tj["metadata"]["annotations"][names.APPROVED_JOBSET] = "old-jobset"
    await kube.replace(TRAINJOB, tj, NS)
    await kube.create(JOBSET, {"metadata": {"name": NAME},
                               "spec": {"suspend": True, "failurePolicy": {"maxRestarts": 3}}},
                      NS)
    async with asyncio.timeout(5):
        assert await admit_plain(kube, NS, NAME, should_admit=always)
    assert (await trainjob(kube))["metadata"]["annotations"][names.ADMISSION_COUNT] == "5"

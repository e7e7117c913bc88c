"""Concurrent Starts of one job and submission, from two Backends, on the real cluster.

Each round races N Starts of the same job and submission, some with the same request and
some with another (attempt and command differ), then checks what linearizability promises:
one request's TrainJob, its ref for every caller of that request, a ConflictError naming
what differs for every other caller and no other error, the runtime copy the winner's
(hash, attempt, owner), and the identity the job's pod prints the winner's.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from dispatch_kubeflow import (
    Backend,
    ConflictError,
    JobID,
    ObjectRef,
    ObjectState,
    StartRequest,
)
from dispatch_kubeflow import start as start_mod
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r
from tests.cluster.helpers import delete_cluster_queue, make_queues
from tests.cluster.test_adapter_kueue import deadline, rank_zero_log, settings, spec

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio]

ROUNDS = 20
AT_ONCE = 5
"""Rounds raced at the same time (each its own job): more load, more interleavings."""


@pytest_asyncio.fixture
async def two_backends(kubeconfig: str, kube: Kube, namespace: str, admission: Any
                       ) -> AsyncIterator[tuple[Backend, Backend]]:
    await make_queues(kube, namespace, checks=[names.ADMISSION_CHECK], cpu="3", memory="2Gi")
    await admission.deployed(kube)
    try:
        async with await Backend.connect(settings(kubeconfig, namespace)) as one, \
                await Backend.connect(settings(kubeconfig, namespace)) as two:
            yield one, two
    finally:
        await delete_cluster_queue(kube, namespace)


def contender(job: JobID, i: int, distinct: int) -> StartRequest:
    """Request i of a round: requests i and i + distinct are the same request."""
    k = i % distinct
    command = f"echo started-{k} $DISPATCH_ATTEMPT"
    return StartRequest(job, 1, attempt=k + 1, spec=spec(nodes=1, command=command))


async def one_round(backends: tuple[Backend, Backend], kube: Kube, n: int) -> None:
    job = JobID.new()
    distinct = 2 if n == 2 else 3
    reqs = [contender(job, i, distinct) for i in range(n)]
    outcomes = await asyncio.gather(
        *(backends[i % 2].start(req) for i, req in enumerate(reqs)), return_exceptions=True)
    for o in outcomes:
        assert isinstance(o, ObjectRef | ConflictError), f"{type(o).__name__}: {o}"
    refs = {o for o in outcomes if isinstance(o, ObjectRef)}
    assert len(refs) == 1, outcomes
    ref = refs.pop()
    winner = next(k for k, o in enumerate(outcomes) if isinstance(o, ObjectRef)) % distinct
    for i, o in enumerate(outcomes):
        if i % distinct == winner:
            assert o == ref, f"caller {i} of the winning request got {o!r}"
        else:
            assert isinstance(o, ConflictError), f"caller {i} of another request got {o!r}"
            assert f"attempt {winner + 1} there, {i % distinct + 1} here" in str(o), str(o)

    ns = ref.namespace
    sel = f"{names.JOB_ID_LABEL}={job}"
    trainjobs, _ = await kube.list(r.TRAINJOB, ns, label_selector=sel)
    assert [t["metadata"]["uid"] for t in trainjobs] == [ref.uid]
    tj = trainjobs[0]
    want = start_mod.request_doc(reqs[winner])
    assert json.loads(tj["metadata"]["annotations"][names.REQUEST]) == want
    assert tj["metadata"]["labels"][names.ATTEMPT_LABEL] == str(winner + 1)
    copies, _ = await kube.list(r.TRAINING_RUNTIME, ns, label_selector=sel)
    assert len(copies) == 1
    rt = copies[0]
    assert rt["metadata"]["annotations"][names.SPEC_HASH] == start_mod.spec_hash(reqs[winner])
    assert rt["metadata"]["labels"][names.ATTEMPT_LABEL] == str(winner + 1)
    assert [o["uid"] for o in rt["metadata"]["ownerReferences"]] == [ref.uid]

    b = backends[0]
    await b.open(ref)
    obs = await b.wait(ref, ObjectState.SUCCEEDED, ObjectState.FAILED, deadline=deadline(240))
    assert obs.state is ObjectState.SUCCEEDED, obs
    jobsets, _ = await kube.list(r.JOBSET, ns, label_selector=sel)
    assert [j["metadata"]["labels"][names.ATTEMPT_LABEL] for j in jobsets] == [str(winner + 1)]
    log = await rank_zero_log(b, job, f"started-{winner}")
    assert f"started-{winner} {job}.1.{winner + 1}.1.0" in log, log
    report = await b.stop_job(job, "race test")
    assert not report.alive, report
    assert not report.unproven, report


@pytest.mark.parametrize("contenders", [2, 5])
async def test_concurrent_starts_are_linearizable(
        two_backends: tuple[Backend, Backend], kube: Kube, contenders: int) -> None:
    for first in range(0, ROUNDS, AT_ONCE):
        await asyncio.gather(*(one_round(two_backends, kube, contenders)
                               for _ in range(first, min(ROUNDS, first + AT_ONCE))))

"""Output of a pod that has not started: a typed error, not an empty log that reads as done.

The API server answers a log request for a pod with no node (gated, or waiting for room)
with 200 and an empty body (seen on the local cluster: follow=true returned at once, and
a CI run's test read no line at all)."""

from __future__ import annotations

from typing import Any

import pytest

from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube.resources import POD, TRAINJOB
from dispatch_kubeflow.model import JobID
from dispatch_kubeflow.output import output
from tests.unit.fake_kube import FakeKube

pytestmark = pytest.mark.asyncio
NS = "ns"


def rank_zero(job: JobID, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p0", "labels": {
        names.JOB_ID_LABEL: str(job), names.COMPLETION_INDEX_LABEL: "0",
        names.SUBMISSION_LABEL: "1"}},
        "spec": {"containers": [{"name": names.TRAINER_CONTAINER}], **spec}}


async def test_a_gated_pod_has_no_log_yet_and_a_scheduled_one_has() -> None:
    job = JobID.new()
    k = FakeKube(0)
    await k.create(TRAINJOB, {"metadata": {"name": "tj", "labels": {
        names.JOB_ID_LABEL: str(job), names.SUBMISSION_LABEL: "1"}}}, NS)
    await k.create(POD, rank_zero(job, schedulingGates=[{"name": names.EXECUTION_GATE}]), NS)
    k.logs[(NS, "p0", "Stdout")] = [b"out-0\n"]
    with pytest.raises(errors.NotFound, match=f"gated by {names.EXECUTION_GATE}"):
        await output(k, NS, job, follow=True)
    await k.delete(POD, "p0", NS)
    await k.create(POD, rank_zero(job, nodeName="dk-worker"), NS)
    async with await output(k, NS, job) as log:
        assert b"".join([chunk async for chunk in log]) == b"out-0\n"

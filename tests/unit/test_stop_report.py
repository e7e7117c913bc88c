"""StopJob's report (dispatch_kubeflow.stop.report): what will not go is reported alive,
with what runs beneath it."""

from __future__ import annotations

import asyncio

import pytest

from dispatch_kubeflow.kube.resources import (
    POD,
)
from tests.unit.fake_kube import FakeKube
from tests.unit.stop_helpers import (
    ALL,
    FOLLOW,
    NS,
    TJ,
    a_job,
    left,
    stop,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.virtual_time]


@FOLLOW
async def test_what_will_not_go_is_reported_alive_when_the_time_is_up(follow: bool) -> None:
    k = FakeKube()
    await a_job(k)
    mine = left(k, *ALL)
    # A finalizer nobody removes (no controller here): deleted, it stays.
    await k.patch(POD, f"{TJ}-node-0-1", {"metadata": {"finalizers": ["example.com/keep"]}},
                  NS)
    loop = asyncio.get_running_loop()
    began = loop.time()
    report = await stop(k, follow, limit=0.3)
    took = loop.time() - began
    assert 0.3 <= took < 3  # it waited its time, by watching, and then stopped
    stuck = k.objects[("pods", NS, f"{TJ}-node-0-1")]
    assert "deletionTimestamp" in stuck["metadata"]
    assert left(k, *ALL) == {("Pod", f"{TJ}-node-0-1")}  # everything else went
    # The pod, and what it runs beneath (named by its jobset-name label), are not stopped.
    alive = {(r.kind, r.name) for r in report.alive}
    assert alive == {("Pod", f"{TJ}-node-0-1"), ("JobSet", TJ), ("TrainJob", TJ)}
    assert {(r.kind, r.name) for r in report.stopped} == mine - alive

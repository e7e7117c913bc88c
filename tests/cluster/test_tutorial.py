"""examples/tutorial.py against the test cluster: it prints what the seed's tutorial shows.

Needs the admission controller (the ``admission`` fixture). The tutorial makes the
``tutorial`` namespace, ClusterQueue ``tutorial`` and LocalQueue ``lq`` as the seed does;
the test deletes them afterwards unless they were there before.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio]

REPO = Path(__file__).resolve().parents[2]
TUTORIAL = REPO / "examples" / "tutorial.py"


def expected(job: str) -> list[str]:
    """The lines the seed shows, in order, as regexes (``job`` is the upper-case id)."""
    first = [rf"DISPATCH_ATTEMPT={job}\.1\.1\.1\.0", "DISPATCH_EPOCH=1000001",
             f"DISPATCH_JOB_ID={job}", "DISPATCH_SUBMISSION=1", "tutorial-ready"]
    second = [rf"DISPATCH_ATTEMPT={job}\.1\.1\.2\.0", "DISPATCH_EPOCH=1000002",
              f"DISPATCH_JOB_ID={job}", "DISPATCH_SUBMISSION=1", "tutorial-ready"]
    return [
        r"ReadmissionGate: yes \(probed\) ClusterQueue tutorial lists AdmissionCheck "
        r"dispatch-admission, whose controller holds Lease dispatch-system/dispatch-admission",
        r"AttemptInjection: yes \(probed\) the admission webhook set DISPATCH_ATTEMPT=\S+"
        r"\.1\.1\.0\.0 and DISPATCH_EPOCH=1000000 on a dry-run pod of probe TrainJob "
        r"dj-probe-\S+",
        r"HoldCapability: yes \(probed\) Workloads in tutorial may be deactivated .+",
        rf"tutorial/dj-{job.lower()}-s1 gated - ?",
        *first, "held", *second,
        r"stopped: [1-9]\d* alive: 0 unproven: 0",
    ]


def assert_seed_output(out: str) -> None:
    """Every line of :func:`expected`, in order (other lines may come between)."""
    gated = re.search(r"^tutorial/dj-([0-9a-z]{26})-s1 gated", out, re.MULTILINE)
    assert gated, out
    job = gated.group(1).upper()
    lines = out.splitlines()
    at = 0
    for pattern in expected(job):
        rx = re.compile(pattern)
        while at < len(lines) and not rx.fullmatch(lines[at]):
            at += 1
        assert at < len(lines), f"no line {pattern!r} (in order) in:\n{out}"
        at += 1


@pytest_asyncio.fixture
async def tutorial_queues(kube: Kube) -> AsyncIterator[None]:
    """Delete what the tutorial makes, unless it was there before the test."""
    before = {
        (res, name, ns): await kube.get_or_none(res, name, ns) is not None
        for res, name, ns in ((r.NAMESPACE, "tutorial", None),
                              (r.CLUSTER_QUEUE, "tutorial", None),
                              (r.LOCAL_QUEUE, "lq", "tutorial"))}
    yield
    for (res, name, ns), existed in before.items():
        if not existed and res is not r.LOCAL_QUEUE:  # the namespace takes its LocalQueue
            await kube.delete(res, name, ns)


async def test_tutorial_prints_what_the_seed_shows(
        kubeconfig: str, kube: Kube, admission: Any, tutorial_queues: None) -> None:
    await admission.deployed(kube)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(TUTORIAL), cwd=REPO,
        env={**os.environ, "KUBECONFIG": kubeconfig},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out_b, err_b = await asyncio.wait_for(proc.communicate(), 600)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    out, err = out_b.decode(), err_b.decode()
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out}\n{err}"
    assert_seed_output(out)

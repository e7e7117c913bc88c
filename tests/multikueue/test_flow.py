"""A dispatch job through MultiKueue on the local clusters, with the library in MultiKueue mode
(issue 30 item 2): the preflight proves the manager and both workers; Start puts the runtime
copy in each worker; Open lets MultiKueue dispatch it; it runs in one worker, whose pods
carry the identity the manager approved (A = 1); Inspect names that worker and Output reads
rank 0 there; StopJob proves the manager and both workers empty.

In ``make test`` (the MultiKueue test CI runs) and ``make mk-test``: about 30 s with the
clusters up (``mk_up``: up once for the session).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from dispatch_kubeflow import (
    Backend,
    Image,
    JobID,
    JobSpec,
    ObjectRef,
    Observation,
    RuntimeRef,
    StartRequest,
)
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r
from tests.cluster.helpers import IMAGE, eventually
from tests.multikueue.clusters import CLUSTERS, prepared, settings

pytestmark = [pytest.mark.machine, pytest.mark.asyncio]

NS = "mk-flow"
MANAGER, WORKERS = CLUSTERS[0], CLUSTERS[1:]
SCRIPT = "env | grep '^DISPATCH_' | sort; echo mk-ready; sleep 600"


@pytest_asyncio.fixture
async def clusters(mk_up: None) -> AsyncIterator[dict[str, Kube]]:
    """The three clusters, each with the test's namespace and queues."""
    async with prepared(NS) as kubes:
        yield kubes


async def running(b: Backend, ref: ObjectRef) -> Observation | None:
    obs = await b.inspect(ref)
    return obs if obs.pods_running else None


async def output(b: Backend, job: JobID) -> str | None:
    async with b.output(job) as log:
        text = (await log.read()).decode()
    return text if "mk-ready" in text else None


async def test_a_job_runs_in_a_worker_and_stop_job_proves_every_cluster_empty(
        clusters: dict[str, Kube]) -> None:
    async with await Backend.connect(settings(NS)) as b:
        assert not b.observe_only, b.observe_only_reasons
        job = JobID.new()
        spec = JobSpec(["/bin/sh", "-c", SCRIPT], 1,
                       [Image(IMAGE, "IfNotPresent"),
                        RuntimeRef("ClusterTrainingRuntime", "dispatch-kind")])
        ref = await b.start(StartRequest(job, 1, 1, spec))
        tj = await clusters[MANAGER].get(r.TRAINJOB, ref.name, NS)
        assert tj["spec"]["managedBy"] == names.MULTIKUEUE_CONTROLLER
        for w in WORKERS:
            copy = await clusters[w].get_or_none(r.TRAINING_RUNTIME, ref.name, NS)
            assert copy is not None, f"no runtime copy in {w}"
        await b.open(ref)
        # Read while it runs: MultiKueue deletes its copy in the worker, pods and all, as
        # soon as the job finishes (so a finished job's log is gone from the worker).
        obs = await eventually(functools.partial(running, b, ref), 300, "rank 0 running")
        print(f"\nruns in {obs.cluster}: {obs}")
        assert obs.cluster in WORKERS
        assert obs.admissions == 1
        text = await eventually(functools.partial(output, b, job), 60, "rank 0's output")
        assert f"DISPATCH_ATTEMPT={job}.1.1.1.0" in text, text
        # No pod of it anywhere but in the worker that ran it.
        for c, kube in clusters.items():
            pods, _ = await kube.list(r.POD, NS, label_selector=f"{names.JOB_ID_LABEL}={job}")
            assert bool(pods) == (c == obs.cluster), (c, [p["metadata"]["name"] for p in pods])

        report = await b.stop_job(job, "the test is done")
        print(f"StopJob: {len(report.stopped)} stopped, by cluster "
              f"{sorted({x.cluster or MANAGER for x in report.stopped})}")
        assert report.complete, report
        assert {x.cluster for x in report.stopped} >= {"", *WORKERS}  # copies everywhere
        assert await b.find(job) == ()
    # Nothing of it in the test's namespace of any cluster: MultiKueue's remote Workload
    # and TrainJob in the worker too (they carry none of the job's labels but the template's).
    for c, kube in clusters.items():
        for res in (r.TRAINJOB, r.WORKLOAD, r.TRAINING_RUNTIME, r.JOBSET, r.POD):
            items, _ = await kube.list(res, NS)
            assert items == [], (c, res.plural, [i["metadata"]["name"] for i in items])

"""The scale benchmark's jobs and where they queue: the job every phase runs, the Backend's
settings, each phase's namespace and queues, and the benchmark's clock."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from datetime import timedelta
from typing import Any

from floor import gone

from dispatch_kubeflow import DispatchError, Image, JobSpec, ObjectState, RuntimeRef
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r

Obj = dict[str, Any]
IMAGE = "localhost/dispatch-busybox:kind"
RUNTIME = "dispatch-kind"
NODES = 2
COMMAND = ["/bin/sh", "-c", "echo ok"]
POD_CPU_M, POD_MEM_MI = 100, 32  # the runtime's requests per pod (deploy/base.yaml)
WAIT_LIMIT = timedelta(minutes=20)
DONE = (ObjectState.SUCCEEDED, ObjectState.FAILED)
SPEC = JobSpec(COMMAND, NODES, [Image(IMAGE, "IfNotPresent"),
                                RuntimeRef(names.KIND_CLUSTER_TRAINING_RUNTIME, RUNTIME)])


def wait_limit(n: int) -> timedelta:
    """The waits' deadline for N jobs queued at once: with the quota at 10 the cluster runs
    about 25 jobs a minute, so at N = 1,000 a fixed 20 minutes ended 301 waits of jobs still
    queued (counted lost, though Kueue had simply not got to them). 6 s a job on top."""
    return WAIT_LIMIT + timedelta(seconds=6 * n)


def now() -> float:
    return time.monotonic()


def settings(kubeconfig: str, namespace: str) -> dict[str, Any]:
    return {
        "cluster": {"kubeconfig": kubeconfig},
        "namespace": namespace,
        "probeRuntime": {"kind": names.KIND_CLUSTER_TRAINING_RUNTIME, "name": RUNTIME},
        "kueue": {"localQueue": "lq", "admissionCheck": names.ADMISSION_CHECK},
        # N concurrent Starts each wait for Kueue's Workload, which Kueue makes one after
        # another: at N = 1,000 on two cores some waited past the default 2 minutes.
        # The start-gate probe ends once Kueue reports its Workload gated (about a second on
        # an idle cluster); beside another team's 10,000 pending Workloads Kueue took longer
        # than the seed's 10 s and the Backend opened observe-only (bench/tenants.py).
        "timeouts": {"request": "30s", "start": "10m", "stopJob": "10m",
                     "preflightProbe": "60s"},
    }


async def make_queue(kube: Kube, ns: str, check: str, quota_jobs: int) -> None:
    await kube.create(r.NAMESPACE, {"metadata": {"name": ns, "labels": {"bench": "scale"}}})
    await kube.create(r.CLUSTER_QUEUE, {"metadata": {"name": ns}, "spec": {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
        "admissionChecksStrategy": {"admissionChecks": [{"name": check}]},
        "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
            "name": "default-flavor", "resources": [
                {"name": "cpu", "nominalQuota": f"{quota_jobs * NODES * POD_CPU_M}m"},
                {"name": "memory", "nominalQuota": f"{quota_jobs * NODES * POD_MEM_MI}Mi"},
            ]}]}]}})
    await kube.create(r.LOCAL_QUEUE, {"metadata": {"name": "lq"},
                                      "spec": {"clusterQueue": ns}}, ns)
    # Pods need the namespace's default ServiceAccount, which a controller adds.
    async for ev in kube.watch(r.SERVICE_ACCOUNT, ns, field_selector="metadata.name=default"):
        if ev.type == "ADDED":
            break


async def drop_queue(kube: Kube, ns: str, *, limit: float = 600.0) -> None:
    """Delete the phase's queue and namespace, and wait until the namespace is gone, so the
    next phase starts on an API server no longer busy with this one's remains (at N = 1,000
    the floor, started at once, had 475 of its bare jobs time out on their first GET)."""
    for res, name, where in ((r.CLUSTER_QUEUE, ns, None), (r.NAMESPACE, ns, None)):
        with contextlib.suppress(DispatchError):
            await kube.delete(res, name, where)
    try:
        async with asyncio.timeout(limit):
            while True:
                try:
                    await gone(kube, r.NAMESPACE, None, field_selector=f"metadata.name={ns}")
                    return
                except DispatchError:  # refused or timed out on a busy server: look again
                    await asyncio.sleep(2)
    except TimeoutError:
        print(f"note: namespace {ns} still there {limit:.0f} s after its phase", file=sys.stderr)

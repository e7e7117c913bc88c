"""What the suite makes for itself (a namespace and its queues), and removing it again."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from dispatch_kubeflow import errors
from dispatch_kubeflow.conformance.failed import CheckFailed
from dispatch_kubeflow.conformance.options import MANAGED_BY, Options
from dispatch_kubeflow.conformance.suite import Suite
from dispatch_kubeflow.conformance.watching import delete_and_wait
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube import resources as r

Made = list[tuple[r.Resource, str]]
"""The cluster-scoped objects made so far, to remove afterwards."""


async def make_queues(kube: KubeAPI, ns: str, o: Options, made: Made) -> None:
    """The namespace, ClusterQueue and LocalQueue; what was made goes into ``made``."""
    labels = {names.MANAGED_BY_LABEL: MANAGED_BY}
    if await kube.get_or_none(r.NAMESPACE, ns) is not None:
        raise CheckFailed(f"namespace {ns} exists already: the suite makes a namespace of its "
                          "own and deletes it afterwards, so name one that does not exist")
    if await kube.get_or_none(r.CLUSTER_QUEUE, ns) is not None:
        raise CheckFailed(f"ClusterQueue {ns} exists already: name another namespace")
    await kube.create(r.NAMESPACE, {"metadata": {"name": ns, "labels": labels}})
    made.append((r.NAMESPACE, ns))
    await kube.create(r.CLUSTER_QUEUE, {
        "metadata": {"name": ns, "labels": labels},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            "admissionChecksStrategy": {"admissionChecks": [{"name": o.admission_check}]},
            "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
                "name": o.flavor,
                "resources": [{"name": "cpu", "nominalQuota": "1"},
                              {"name": "memory", "nominalQuota": "1Gi"}]}]}],
        },
    })
    made.append((r.CLUSTER_QUEUE, ns))
    await kube.create(r.LOCAL_QUEUE, {"metadata": {"name": "lq", "labels": labels},
                                      "spec": {"clusterQueue": ns}}, ns)


async def clean_up(suite: Suite | None, kube: KubeAPI, made: Made,
                   out: Callable[[str], None]) -> list[str]:
    """Stop the job if a check left it, close the backend, delete what was made: problems."""
    problems: list[str] = []
    if suite is not None:
        if suite.backend is not None and suite.job is not None and not suite.stopped:
            try:
                async with asyncio.timeout(200):
                    await suite.backend.stop_job(suite.job, "the conformance suite is over")
            except (errors.DispatchError, TimeoutError) as exc:
                out(f"cleanup: StopJob of {suite.job} failed ({exc}); deleting the namespace")
        if suite.backend is not None:
            await suite.backend.close()
    # The namespace first (it takes the job's Workloads with it), then the ClusterQueue,
    # whose finalizer waits for its workloads.
    for res, limit in ((r.NAMESPACE, 240.0), (r.CLUSTER_QUEUE, 120.0)):
        for made_res, name in made:
            if made_res == res:
                problem = await delete_and_wait(kube, res, name, limit)
                if problem:
                    problems.append(problem)
    return problems

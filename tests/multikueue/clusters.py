"""The local MultiKueue clusters (deploy/local/multikueue.sh) as the tests reach them: the
script, the clusters' names and kubeconfigs, kubectl, and a wait."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r
from tests.cluster.admission_fixture import kubectl_binary
from tests.cluster.helpers import eventually, make_queues
from tests.conftest import REPO

SCRIPT = REPO / "deploy" / "local" / "multikueue.sh"
STATE = Path(os.environ.get("DISPATCH_STATE_ROOT", "/var/lib/dispatch-local"))
CLUSTERS = ("mk-manager", "mk-worker1", "mk-worker2")
MULTIKUEUE_CHECK = "multikueue"  # deploy/local/multikueue.sh's AdmissionCheck


def mk(*args: str, env: dict[str, str] | None = None, timeout: float | None = None) -> str:
    # up on a fresh machine builds every component first (about 20 minutes; CI's cluster
    # tests have built them by the time they run this).
    timeout = timeout or (2400 if args[:1] == ("up",) else 900)
    done = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})
    assert done.returncode == 0, f"multikueue.sh {' '.join(args)}:\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


def kubectl(kubeconfig: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([kubectl_binary(), "--kubeconfig", kubeconfig,
                           "--request-timeout", "5s", *args], capture_output=True, text=True,
                          timeout=timeout)


def up() -> bool:
    """Whether the three clusters were up before the test."""
    return all((STATE / c / "ready").exists() for c in CLUSTERS)


def kubeconfig(cluster: str) -> str:
    return f"/tmp/{cluster}.kubeconfig"


def until(what: str, check: Callable[[], bool], seconds: float) -> float:
    """Seconds until ``check()`` is true; fails after ``seconds``."""
    began = time.monotonic()
    while not check():
        assert time.monotonic() - began < seconds, f"{what} not within {seconds:.0f} s"
        time.sleep(2)
    return time.monotonic() - began


def permit(worker: str) -> dict[str, str]:
    """The permit Lease of ``worker`` in the manager: who renewed it last, and whether the
    manager's dispatch-admission revoked it ({} when it cannot be read)."""
    out = kubectl(kubeconfig("mk-manager"), "-n", "dispatch-system", "get", "lease",
                  f"dispatch-worker-{worker}", "-o", "json")
    if out.returncode != 0:
        return {}
    lease = json.loads(out.stdout)
    return {"holder": (lease.get("spec") or {}).get("holderIdentity") or "",
            "version": lease["metadata"]["resourceVersion"],
            "revoked": str(names.PERMIT_REVOKED in (lease["metadata"].get("annotations")
                                                    or {}))}


def renewed(worker: str) -> bool:
    """Whether ``worker``'s permit stands, renewed by one of its replicas."""
    got = permit(worker)
    return got.get("revoked") == "False" and got["holder"].startswith("dispatch-admission-")


def active(worker: str) -> str:
    """The manager's MultiKueueCluster ``worker``'s Active condition ("" when unread)."""
    out = kubectl(kubeconfig("mk-manager"), "get", "multikueuecluster", worker, "-o",
                  'jsonpath={.status.conditions[?(@.type=="Active")].status}')
    return out.stdout.strip()


@contextlib.asynccontextmanager
async def prepared(ns: str) -> AsyncIterator[dict[str, Kube]]:
    """A connection to each of the three clusters, each with namespace ``ns`` and its queues
    (made afresh, and deleted and waited for at the end): the manager's ClusterQueue lists
    MultiKueue's check and dispatch's, each worker's neither (MultiKueue's remote is not
    approved there: its A is the manager's)."""
    kubes = {c: await Kube.connect(kubeconfig=kubeconfig(c)) for c in CLUSTERS}
    try:
        for c, kube in kubes.items():
            await gone(kube, ns)  # an earlier run's, still being deleted
            await kube.create(r.NAMESPACE, {"metadata": {"name": ns}})
            await make_queues(kube, ns, cpu="2", memory="2Gi", checks=[
                MULTIKUEUE_CHECK, names.ADMISSION_CHECK] if c == CLUSTERS[0] else None)
        yield kubes
    finally:
        for kube in kubes.values():
            await gone(kube, ns)
            await kube.close()


async def gone(kube: Kube, ns: str) -> None:
    """Namespace ``ns`` and the ClusterQueue of its name deleted, and waited for until they
    are gone."""
    # The namespace first: a ClusterQueue is held (finalizer) while Workloads of it exist.
    for res, name in ((r.NAMESPACE, ns), (r.CLUSTER_QUEUE, ns)):
        if await kube.get_or_none(res, name) is not None:
            with contextlib.suppress(errors.KubeNotFound):
                await kube.delete(res, name)
        await eventually(functools.partial(absent, kube, res, name), 180,
                         f"{res.kind} {name} gone")


async def absent(kube: Kube, res: r.Resource, name: str) -> bool:
    return await kube.get_or_none(res, name) is None


def settings(ns: str, stop_job: str = "2m") -> dict[str, Any]:
    """The library's settings in MultiKueue mode: the manager, both workers, namespace
    ``ns`` and its queue (as :func:`prepared` makes them)."""
    return {
        "cluster": {"kubeconfig": kubeconfig(CLUSTERS[0])},
        "namespace": ns,
        "probeRuntime": {"kind": "ClusterTrainingRuntime", "name": "dispatch-kind"},
        "kueue": {"localQueue": "lq", "admissionCheck": names.ADMISSION_CHECK,
                  "multiKueue": {"workers": {w: {"kubeconfig": kubeconfig(w)}
                                             for w in CLUSTERS[1:]}}},
        "timeouts": {"request": "10s", "stopJob": stop_job, "preflightProbe": "10s"},
    }

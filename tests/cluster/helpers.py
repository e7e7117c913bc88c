"""Helpers for cluster tests: queues, TrainJobs, waiting for conditions."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import yaml

from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r

T = TypeVar("T")
Obj = dict[str, Any]
IMAGE = "localhost/dispatch-busybox:kind"
STATE_ROOT = Path(os.environ.get("DISPATCH_STATE_ROOT", "/var/lib/dispatch-local"))


def _server_and_ca(kubeconfig: Path) -> tuple[str, str]:
    cfg = yaml.safe_load(kubeconfig.read_text())
    ctx_name = cfg.get("current-context")
    ctx = next(c["context"] for c in cfg.get("contexts") or [] if c["name"] == ctx_name)
    cluster = next(c["cluster"] for c in cfg.get("clusters") or []
                   if c["name"] == ctx["cluster"])
    return str(cluster.get("server")), str(cluster.get("certificate-authority-data"))


def why_not_local(kubeconfig: str, name: str) -> str:
    """Why the cluster ``kubeconfig`` names is not the local cluster ``name`` whose tools
    (deploy/local: apiserver.sh, node.sh) we may run ("" when it is)."""
    admin = STATE_ROOT / name / "admin.kubeconfig"
    if not admin.exists():
        return (f"the test cluster is not a local one: no local cluster {name} ({admin} is "
                "missing); set DISPATCH_TEST_CLUSTER to the local cluster KUBECONFIG names")
    if _server_and_ca(Path(kubeconfig)) != _server_and_ca(admin):
        return f"KUBECONFIG {kubeconfig} names a cluster other than the local cluster {name}"
    if os.geteuid() != 0:
        return "the local cluster's tools need root"
    return ""


@contextlib.contextmanager
def controller_manager_paused(name: str) -> Iterator[None]:
    """The local cluster ``name``'s kube-controller-manager stopped (SIGSTOP) for the block,
    and continued after it whatever happened: no garbage collector, no Job controller."""
    pid = int((STATE_ROOT / name / "pids" / "kube-controller-manager").read_text())
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


async def eventually(probe: Callable[[], Awaitable[T | None]], timeout: float, what: str,
                     interval: float = 0.25) -> T:
    """Call ``probe`` until it returns something truthy; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"never saw {what} within {timeout}s (last: {last!r})")


async def make_queues(kube: Kube, namespace: str, *, checks: list[str] | None = None,
                      cpu: str = "1", memory: str = "1Gi",
                      on_flavors: list[str] | None = None) -> str:
    """A ClusterQueue named like the namespace (for it alone) and a LocalQueue ``lq``."""
    strategy: Obj = {}
    if checks:
        strategy = {"admissionChecksStrategy": {"admissionChecks": [
            {"name": c, **({"onFlavors": on_flavors} if on_flavors else {})} for c in checks]}}
    await kube.create(r.CLUSTER_QUEUE, {
        "metadata": {"name": namespace},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            **strategy,
            "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
                "name": "default-flavor",
                "resources": [{"name": "cpu", "nominalQuota": cpu},
                              {"name": "memory", "nominalQuota": memory}]}]}],
        },
    })
    await kube.create(r.LOCAL_QUEUE, {"metadata": {"name": "lq"},
                                      "spec": {"clusterQueue": namespace}}, namespace)
    return "lq"


async def delete_cluster_queue(kube: Kube, name: str) -> None:
    await kube.delete(r.CLUSTER_QUEUE, name)


def trainjob(name: str, command: str, *, nodes: int = 2, queue: str | None = "lq",
             runtime: str = "dispatch-kind", annotations: dict[str, str] | None = None) -> Obj:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    return {
        "metadata": {"name": name, "labels": labels, "annotations": annotations or {}},
        "spec": {
            "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                           "name": runtime},
            "trainer": {"numNodes": nodes, "image": IMAGE, "command": ["/bin/sh", "-c", command]},
        },
    }


def condition(obj: Obj | None, kind: str) -> Obj | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return None


def is_true(obj: Obj | None, kind: str) -> bool:
    c = condition(obj, kind)
    return bool(c and c.get("status") == "True")


async def workload_of(kube: Kube, namespace: str, trainjob_uid: str) -> Obj | None:
    items, _ = await kube.list(r.WORKLOAD, namespace,
                               label_selector=f"kueue.x-k8s.io/job-uid={trainjob_uid}")
    return items[0] if items else None


async def pods_of(kube: Kube, namespace: str, trainjob_name: str) -> list[Obj]:
    items, _ = await kube.list(r.POD, namespace,
                               label_selector=f"jobset.sigs.k8s.io/jobset-name={trainjob_name}")
    return items


async def pod_log(kube: Kube, namespace: str, pod: str, container: str | None = None) -> str:
    body = await kube.open_pod_log(pod, namespace, container=container)
    chunks = [c async for c in body]
    return b"".join(chunks).decode()


def token_kubeconfig(admin_kubeconfig: str, token: str, path: Path) -> str:
    """A kubeconfig for ``token``: the admin kubeconfig's server and CA, bearer auth."""
    admin = yaml.safe_load(Path(admin_kubeconfig).read_text())
    ctx_name = admin.get("current-context")
    ctx = next(c["context"] for c in admin["contexts"] if c["name"] == ctx_name)
    cluster = next(c["cluster"] for c in admin["clusters"] if c["name"] == ctx["cluster"])
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa"}}],
        "current-context": "sa",
    }))
    return str(path)

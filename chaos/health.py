"""The cluster's health before a run (``chaos.runner``'s step 1): every node Ready, the
controller Deployment available, its Lease held by a live pod of it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube, Resource
from dispatch_kubeflow.kube import resources as r

CONTROLLER = "dispatch-admission"  # the Deployment, its pods' app label, and the Lease
DEPLOYMENT = Resource("apps", "v1", "deployments", "Deployment")
HEALTH_WAIT = 120.0


async def health_problem(kube: Kube) -> str:
    """"" when healthy, else which component is not."""
    nodes, _ = await kube.list(r.NODE)
    if not nodes:
        return "nodes: none"
    for n in nodes:
        ready = [c for c in (n.get("status") or {}).get("conditions") or []
                 if c.get("type") == "Ready"]
        if not ready or ready[0].get("status") != "True":
            return f"node {n['metadata']['name']}: not Ready"
    dep = await kube.get_or_none(DEPLOYMENT, CONTROLLER, names.CONTROLLER_NAMESPACE)
    if dep is None:
        return f"controller: no Deployment {names.CONTROLLER_NAMESPACE}/{CONTROLLER}"
    st = dep.get("status") or {}
    want = (dep.get("spec") or {}).get("replicas", 1)
    if st.get("availableReplicas", 0) < want or st.get("readyReplicas", 0) < want:
        return (f"controller: Deployment {CONTROLLER} has {st.get('readyReplicas', 0)}/{want} "
                "replicas ready")
    holder = await lease_holder(kube)
    pods = await controller_pods(kube)
    if not holder or holder not in pods:
        return f"controller: Lease {CONTROLLER} held by {holder or 'nobody'}, not a live pod"
    return ""


async def lease_holder(kube: Kube) -> str:
    lease = await kube.get_or_none(r.LEASE, names.LEASE_NAME, names.CONTROLLER_NAMESPACE)
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


async def controller_pods(kube: Kube) -> list[str]:
    pods, _ = await kube.list(r.POD, names.CONTROLLER_NAMESPACE,
                              label_selector=f"app.kubernetes.io/name={CONTROLLER}")
    return [p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")]


async def wait_healthy(kube: Kube, limit: float) -> str:
    return await until_no_problem(lambda: health_problem(kube), limit, 2)


async def until_no_problem(check: Callable[[], Awaitable[str]], limit: float,
                           interval: float) -> str:
    """Ask ``check()`` every ``interval`` seconds: "" once it finds no problem within
    ``limit`` seconds, else the last problem it found (an error asking counts as one: the
    API server is not there yet)."""
    deadline = time.monotonic() + limit
    problem = "not checked"
    while time.monotonic() < deadline:
        try:
            problem = await check()
        except Exception as exc:
            problem = f"API server: {type(exc).__name__}: {exc}"
        if not problem:
            return ""
        await asyncio.sleep(interval)
    return problem

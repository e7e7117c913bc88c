"""The deployed controller rolled out with another ``--workers``, before a dispatch phase."""

from __future__ import annotations

import asyncio
import time

from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r

CONTROLLER = r.Resource("apps", "v1", "deployments", "Deployment")
CONTROLLER_NAME = "dispatch-admission"


async def set_workers(admin: Kube, workers: int) -> None:
    """Roll the deployed controller out with ``--workers=W`` and wait until every replica
    runs it and one leads (the phase's decisions are that version's)."""
    dep = await admin.get(CONTROLLER, CONTROLLER_NAME, names.CONTROLLER_NAMESPACE)
    containers = dep["spec"]["template"]["spec"]["containers"]
    i = next(i for i, c in enumerate(containers) if c["name"] == "controller")
    args = [a for a in containers[i].get("args", []) if not a.startswith("--workers=")]
    # A JSON patch whose test op carries the version read: a concurrent edit fails it (409).
    await admin.patch(CONTROLLER, CONTROLLER_NAME, [
        {"op": "test", "path": "/metadata/resourceVersion",
         "value": dep["metadata"]["resourceVersion"]},
        {"op": "replace", "path": f"/spec/template/spec/containers/{i}/args",
         "value": [*args, f"--workers={workers}"]}], names.CONTROLLER_NAMESPACE, kind="json")
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        dep = await admin.get(CONTROLLER, CONTROLLER_NAME, names.CONTROLLER_NAMESPACE)
        st, want = dep.get("status", {}), dep["spec"].get("replicas", 1)
        lease = await admin.get_or_none(r.LEASE, names.LEASE_NAME, names.CONTROLLER_NAMESPACE)
        pods, _ = await admin.list(r.POD, names.CONTROLLER_NAMESPACE,
                                   label_selector=f"app.kubernetes.io/name={CONTROLLER_NAME}")
        # The replicas' identity is their pod's name: the leader must be a pod of this roll-out.
        new = {p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")
               and f"--workers={workers}" in p["spec"]["containers"][i].get("args", [])}
        if (st.get("observedGeneration") == dep["metadata"]["generation"]
                and st.get("updatedReplicas") == want == st.get("readyReplicas")
                and st.get("replicas") == want and lease
                and (lease.get("spec") or {}).get("holderIdentity") in new):
            return
        await asyncio.sleep(1)
    raise TimeoutError(f"the controller did not roll out with --workers={workers} in 180 s")

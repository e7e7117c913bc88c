"""The fenced floor: the least an approver can do that keeps dispatch's fence (issue 28 item 3).

dispatch-admission's approval is three requests one after another, each a fence: a live
list of the job's pods (none of the previous execution may be left), the raise of A on the
TrainJob under the resourceVersion it was judged from, and the check Ready under the
Workload's. :class:`FencedApprover` sends exactly those three and nothing else: no decision
rules, no JobSet, no second read of the Workload, no Events, no metrics. Beside the minimal
approver (one write) it shows what the fence alone costs on this machine, and beside the
controller how close the controller comes to it.

Its A is an annotation of its own (the cluster's ValidatingAdmissionPolicy lets only the
controller write dispatch's), the same size of write.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from typing import Any

from bare import MinimalApprover

from dispatch_kubeflow import DispatchError
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.execution import alive
from dispatch_kubeflow.core.kueue import trainjob_of
from dispatch_kubeflow.errors import KubeConflict
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r

Obj = dict[str, Any]
FENCED_CHECK = "bench-fenced-floor"
FENCED_CONTROLLER = "bench.dispatch.phpboyscout.uk/fenced-floor"
FENCED_MANAGER = "bench-fenced-floor"
FENCED_A = "bench.dispatch.phpboyscout.uk/admission-count"


class FencedApprover(MinimalApprover):
    """The minimal approver's watch on Workloads, and one on TrainJobs (for the version A's
    raise is fenced by); for each Workload whose quota is reserved and whose check is
    Pending: the pods' list, the fenced raise, the fenced Ready."""

    check = FENCED_CHECK

    def __init__(self, kube: Kube, namespace: str) -> None:
        super().__init__(kube, namespace)
        self.trainjobs: dict[str, Obj] = {}
        self._trainjobs_watch = asyncio.create_task(self._watch_trainjobs())

    async def _approve(self, wl: Obj) -> None:
        name, ns = wl["metadata"]["name"], self.namespace
        tj_name = trainjob_of(wl) or ""
        try:
            # 1. The job's pods, live: none of a previous execution may be left.
            pods, _ = await self.kube.list(r.POD, ns, label_selector=names.pods_of(tj_name))
            if alive(pods):
                raise RuntimeError(f"{len(alive(pods))} pods alive before the first admission")
            # 2. A, fenced by the TrainJob's version as the watch last showed it (a newer
            # one, a status write of Trainer's, answers 409: read live and raise again).
            tj = self.trainjobs.get(tj_name) or await self.kube.get(r.TRAINJOB, tj_name, ns)
            for _ in range(5):
                try:
                    await self.kube.patch(r.TRAINJOB, tj_name, {"metadata": {
                        "resourceVersion": tj["metadata"]["resourceVersion"],
                        "annotations": {FENCED_A: "1"}}}, ns, kind="merge")
                    break
                except KubeConflict:
                    tj = await self.kube.get(r.TRAINJOB, tj_name, ns)
            # 3. Ready, fenced by the Workload's version judged.
            body = {"apiVersion": r.WORKLOAD.api_version, "kind": "Workload",
                    "metadata": {"name": name, "namespace": ns,
                                 "resourceVersion": wl["metadata"]["resourceVersion"]},
                    "status": {"admissionChecks": [{
                        "name": FENCED_CHECK, "state": "Ready", "message": "bench fenced floor",
                        "lastTransitionTime": datetime.now(UTC).strftime(
                            "%Y-%m-%dT%H:%M:%SZ")}]}}
            await self.kube.patch(r.WORKLOAD, name, body, ns, kind="apply",
                                  subresource="status", field_manager=FENCED_MANAGER,
                                  force=True)
        except (DispatchError, RuntimeError) as exc:
            self.done.discard(name)  # judged again on its next event
            print(f"fenced floor approver: {name}: {exc}", file=sys.stderr)

    async def _watch_trainjobs(self) -> None:
        async for ev in self.kube.observe(r.TRAINJOB, self.namespace):
            if ev.type == "SYNC":
                self.trainjobs = {o["metadata"]["name"]: o for o in ev.items}
            elif ev.type == "DELETED":
                self.trainjobs.pop(ev.object["metadata"]["name"], None)
            else:
                self.trainjobs[ev.object["metadata"]["name"]] = ev.object

    def close(self) -> None:
        self._trainjobs_watch.cancel()
        super().close()

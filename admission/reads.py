"""Where each object a readmission decision reads comes from, and why that is safe.

The Workload and the TrainJob come from the indexes, because each write judged from them
carries that object's resourceVersion (a stale read makes the write a 409, and the key is
judged again from live reads). What no precondition covers is read live: the job's pods
(by the caller), the JobSet an approval names, and the Workload right before A is raised
for it.
"""

from __future__ import annotations

import logging

from admission.intake import Caches, Obj, key_of
from dispatch_kubeflow.core.execution import approved_jobset
from dispatch_kubeflow.core.objects import controller_uid, meta
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import JOBSET, POD, TRAINJOB, WORKLOAD

log = logging.getLogger(__name__)


async def pod_named(kube: KubeAPI, namespace: str, name: str) -> Obj | None:
    """The pod ``name``, or None: a list by name, not a get. The controller's RBAC lists
    and watches pods (its watch, the live count) and grants no get, and a get it was never
    given crash-looped the worker replicas and told every fence no on the clusters."""
    pods, _ = await kube.list(POD, namespace, field_selector=f"metadata.name={name}")
    return pods[0] if pods else None


class Reads:
    def __init__(self, kube: KubeAPI, caches: Caches) -> None:
        self.kube = kube
        self.caches = caches

    async def workload(self, ns: str, name: str, live: bool) -> Obj | None:
        """From the index unless told to read live (after a 409) or it lacks the Workload.
        Safe because every write judged from it carries its resourceVersion."""
        wl = None if live else self.caches.workload(ns, name)
        return wl if wl is not None else await self.kube.get_or_none(WORKLOAD, name, ns)

    async def trainjob(self, wl: Obj, ns: str, name: str, live: bool) -> Obj | None:
        """From the index unless told to read live, it lacks the TrainJob, or it holds an
        earlier TrainJob of that name (not the UID the Workload's owner reference names).
        Safe because the raise of A carries its resourceVersion; without a raise, the token
        it shows for this admission is in every newer version too, or a newer admission's
        Workload version fails the Ready's fence (docs/readmission-model.md)."""
        owner = controller_uid(wl, "TrainJob")
        tj = None if live else self.caches.trainjob(ns, name)
        if tj is not None and owner not in ("", meta(tj).get("uid")):
            tj = None
        if tj is None:
            tj = await self.kube.get_or_none(TRAINJOB, name, ns)
        if tj is not None and owner not in ("", meta(tj).get("uid")):
            # A later attempt's TrainJob of the same name: not the one this Workload is of.
            return None
        return tj

    async def workload_still(self, wl: Obj) -> bool:
        """Whether the Workload judged is still there, the same object (UID) and not being
        deleted, read live after the TrainJob and right before A is raised for it. The raise
        is fenced by the TrainJob's version only: without this, a decision about a Workload
        deleted and re-made (by anyone, or by Kueue) meanwhile, or about the previous
        attempt's TrainJob, raises A on a TrainJob the admission was never about (the
        model's variants NOWLCONFIRM)."""
        ns, name = key_of(wl)
        live = await self.kube.get_or_none(WORKLOAD, name, ns)
        meta_ = (live or {}).get("metadata") or {}
        if live is None or meta_.get("uid") != (wl.get("metadata") or {}).get("uid") \
                or meta_.get("deletionTimestamp"):
            log.info("workload %s/%s: gone, re-made or being deleted since it was judged; "
                     "raising nothing", ns, name, extra={"workload": f"{ns}/{name}"})
            return False
        return True

    async def jobset_to_approve(self, tj: Obj, ns: str, name: str) -> tuple[str, Obj | None]:
        """The UID of the JobSet an approval names, and the JobSet when it was read live
        (else None; ("", None) when there is none yet).

        The approval names the JobSet it lets run (core.execution): its pods alone pass the
        webhook. From the index, else read live; read live too when it is not the one
        approved before (a re-made JobSet: A then rises past its old restarts,
        core.execution.raise_step, which needs the JobSet itself)."""
        uid = self.caches.jobset_uid(ns, name) or ""
        approved = approved_jobset(tj)
        if uid and (not approved or approved == uid):
            return uid, None
        jobset = await self.kube.get_or_none(JOBSET, name, ns)
        return str(((jobset or {}).get("metadata") or {}).get("uid") or ""), jobset

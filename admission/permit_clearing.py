"""A worker whose permit the manager revoked deletes the pods that wait on it.

The manager grants a revoked permit again only once no dispatch pod is alive in the worker
(admission.permit_revocation): a pod made before the revocation that still waits to start
(gated, or for its first answer) would start on the new permit at an identity read before
the job was dispatched again (the model's REGRANTANY). The model lets such a pod end, "no
share, the pod ends" (verify/multikueue.pml); nothing ended it: its gate is not lifted and
its fence gets no positive answer while the permit stays revoked. When MultiKueue keeps the
job in the worker (a cut shorter than Kueue's workerLostTimeout), nothing else deletes the
pod either, and the job stays "running" there with no pod running, for good: the campaign's
run 30000-84, where the fence stopped the job's pod 45 s into a 70 s cut and its JobSet made
the next pod in the seconds when a replica still held its permit; that pod then waited.

So while the permit is revoked, each replica deletes every alive pod here that carries the
fence (a MultiKueue job's): none of them runs, since every share ended before the manager
could revoke, and none may start before the grant. The pod's Job makes the next one, which
the webhook refuses until the permit is granted again, and which then asks for its first
answer like any other.

The order is what keeps a pod made after the grant from being deleted: the pods are listed,
then the Lease is read live in the manager, and only if it is still revoked are the listed
pods deleted. Each of them existed while the permit was revoked, and the manager grants only
once none is alive, so none of them can be a pod of the grant. Each delete carries the pod's
UID as its precondition: a pod of the same name made since is not touched.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from admission.fence import carries_the_fence
from admission.permit_renewal import PermitRenewal
from dispatch_kubeflow.core import errors, names
from dispatch_kubeflow.core.execution import is_alive
from dispatch_kubeflow.core.objects import meta
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import POD

log = logging.getLogger(__name__)


def waiting_on_the_permit(pod: Mapping[str, Any]) -> bool:
    """Whether ``pod`` (a dispatch pod of this worker) is one a revoked permit keeps from
    ever starting, and whose presence keeps the permit revoked: alive, carrying the fence,
    not being deleted already."""
    return (is_alive(pod) and carries_the_fence(dict(pod))
            and not meta(pod).get("deletionTimestamp"))


class PermitClearing:
    """One replica's clearing of the worker's pods while its permit is revoked; ``worker`` is
    a client of this worker's API server, ``renewal`` this replica's permit."""

    INTERVAL = 2.0
    """Seconds between rounds while the permit is revoked (a round lists the worker's
    dispatch pods): a pod made just before the revocation goes within about this."""

    def __init__(self, worker: KubeAPI, renewal: PermitRenewal, *,
                 interval: float = INTERVAL) -> None:
        self.worker = worker
        self.renewal = renewal
        self.interval = interval
        self.deleted = 0
        """Pods this replica deleted (tests, logs)."""

    async def clear_once(self) -> int:
        """One round: if this replica last read its permit revoked, delete the pods waiting
        on it (:func:`waiting_on_the_permit`) once the Lease, read live after the list, is
        still revoked. How many it deleted."""
        if not self.renewal.revoked:
            return 0
        pods, _ = await self.worker.list(POD, label_selector=names.JOB_ID_LABEL)
        waiting = [p for p in pods if waiting_on_the_permit(p)]
        # After the list: a grant since would make pods of its own, which must be spared.
        if not waiting or not await self.renewal.revoked_live():
            return 0
        done = 0
        for pod in waiting:
            m = meta(pod)
            ns, name = str(m.get("namespace") or ""), str(m.get("name") or "")
            try:
                # Fenced by the UID: only the pod listed; 404 (gone already) is None.
                gone = await self.worker.delete(POD, name, ns, uid=str(m.get("uid") or ""))
            except errors.KubeConflict:
                continue  # a new pod of that name: made since, judged on its own
            if gone is None:
                continue
            done += 1
            log.warning("pod %s/%s waited on this worker's permit, which the manager revoked: "
                        "deleted, so that the manager can grant it again (its Job makes the "
                        "next pod)", ns, name, extra={"namespace": ns, "pod": name})
        self.deleted += done
        return done

    async def run(self) -> None:
        """A round every :attr:`interval` seconds until cancelled; a failed round (an API
        server unreachable) is logged and the next one tries again."""
        while True:
            try:
                await self.clear_once()
            except errors.KubeError as exc:
                log.warning("cannot clear the pods waiting on the revoked permit %s: %s",
                            self.renewal.name, exc)
            await asyncio.sleep(self.interval)

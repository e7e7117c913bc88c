"""The manager's side of the permit: time every worker's permit Lease, revoke a silent one,
and grant a revoked one again once its worker is proven free of dispatch pods.

In the manager cluster (MultiKueue, docs/multikueue-fence.md) the leader reads the permit
Leases (``dispatch-worker-<cluster>``) every few seconds. A version it sees unchanged for
:func:`core.permit.manager_wait` on its own clock has ended every share it gave to any pod
anywhere; the leader then writes "revoked" on exactly that version (a PUT carrying its
resourceVersion), so that a renewal sent meanwhile, landing after, meets a 409 and extends
nothing. The readmission gate counts a worker it cannot list as proven empty only when its
permit is revoked, read live (:meth:`PermitRevocation.revoked_live`).

A revoked Lease stays revoked until the leader, by a live list of the worker, sees no alive
dispatch pod there (a pod still waiting for its first answer counts: on a new permit it
would start, the model's REGRANTANY) and writes the grant on exactly the revoked version.
While it is revoked no dispatch pod can be made there (the worker's webhook admits none
without a permit), so the list cannot miss one made after it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping

from dispatch_kubeflow.core import errors, names
from dispatch_kubeflow.core.execution import alive
from dispatch_kubeflow.core.objects import meta
from dispatch_kubeflow.core.permit import (
    DEFAULT_DRIFT,
    DEFAULT_LENGTH,
    Silence,
    grant,
    is_revoked,
    lease_name,
    manager_wait,
    revocation,
)
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import LEASE, POD

log = logging.getLogger(__name__)


class PermitRevocation:
    """The leader's timing of every worker's permit, through ``manager`` (a client of the
    manager cluster's API server)."""

    ROUNDS = 20
    """Reads per wait: a silent permit is revoked at most wait / ROUNDS late."""

    def __init__(self, manager: KubeAPI, *, length: float = DEFAULT_LENGTH,
                 drift: float = DEFAULT_DRIFT,
                 namespace: str = names.CONTROLLER_NAMESPACE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.manager = manager
        self.namespace = namespace
        self.wait = manager_wait(length, drift)
        self._clock = clock
        self._silences: dict[str, Silence] = {}

    async def observe_once(self) -> list[str]:
        """One round: read every permit Lease, time each version, revoke those silent for
        the wait. The names revoked in this round."""
        leases, _ = await self.manager.list(LEASE, self.namespace)
        # Read after the list came back, never before it was sent: a renewal that landed
        # while the list was in flight must not be timed from before it landed.
        now = self._clock()
        revoked: list[str] = []
        seen: set[str] = set()
        for lease in leases:
            name = str(meta(lease).get("name") or "")
            if not name.startswith(names.PERMIT_LEASE_PREFIX) or is_revoked(lease):
                continue
            seen.add(name)
            silence = self._silences.setdefault(name, Silence(self.wait))
            silence.seen(str(meta(lease).get("resourceVersion") or ""), now)
            if not silence.revocable(now):
                continue
            try:
                # Carries the version timed: a renewal that landed since makes it a 409,
                # and the next round times the new version from when it is first seen.
                await self.manager.replace(LEASE, revocation(lease), self.namespace)
            except errors.KubeConflict:
                continue
            except errors.KubeNotFound:
                continue  # deleted: the worker was removed; nothing holds it
            log.warning("revoked the permit %s/%s: unchanged for %.0f s on this clock; the "
                        "worker runs no dispatch execution until it grants it again",
                        self.namespace, name, now - silence.since)
            revoked.append(name)
            seen.discard(name)
        # A Lease revoked, granted again or deleted is timed afresh when next seen.
        for name in set(self._silences) - seen:
            del self._silences[name]
        return revoked

    async def revoked_live(self, cluster: str) -> bool:
        """Whether the worker ``cluster``'s permit is revoked, read live now: the gate's
        proof that no pod of that worker runs. A missing Lease proves nothing: it may have
        been deleted while the worker held it, and its pods' shares still run; the gate then
        needs a live list of that worker."""
        return is_revoked(await self.manager.get_or_none(LEASE, lease_name(cluster),
                                                         self.namespace))

    async def grant_again(self, cluster: str, worker: KubeAPI) -> bool:
        """Grant the revoked permit of the worker ``cluster`` again if ``worker`` (a client
        of its API server) lists no alive dispatch pod; whether it was granted. A KubeError
        (the worker unreachable) is raised: it stays revoked."""
        lease = await self.manager.get_or_none(LEASE, lease_name(cluster), self.namespace)
        if lease is None or not is_revoked(lease):
            return False
        pods, _ = await worker.list(POD, label_selector=names.JOB_ID_LABEL)
        left = alive(pods)
        if left:
            log.info("the permit of %s stays revoked: %d dispatch pod(s) alive there",
                     cluster, len(left))
            return False
        try:
            # Carries the revoked version read before the list (core.permit.grant).
            await self.manager.replace(LEASE, grant(lease), self.namespace)
        except errors.KubeConflict:
            return False
        log.warning("granted the permit %s/%s again: worker %s lists no dispatch pod",
                    self.namespace, lease_name(cluster), cluster)
        return True

    async def run(self) -> None:
        """Observe every wait / :attr:`ROUNDS` seconds until cancelled."""
        while True:
            await self._observe()
            await asyncio.sleep(self.wait / self.ROUNDS)

    async def lead(self, leading: Callable[[], bool], workers: Mapping[str, KubeAPI]) -> None:
        """The leader's loop in a manager: while ``leading()``, every wait / :attr:`ROUNDS`
        seconds, time and revoke the permits, then grant each revoked one again whose worker
        (``workers``: a client of each by cluster name) lists no alive dispatch pod.

        Leadership only spares the other replica the work: every revocation and grant is a
        write carrying the version it judged, so two replicas racing change nothing twice,
        and a version unchanged since a follower last saw it has had no write since (a
        resourceVersion is never reused)."""
        while True:
            if leading():
                await self._observe()
                for cluster, worker in sorted(workers.items()):
                    try:
                        await self.grant_again(cluster, worker)
                    except errors.KubeError as exc:
                        log.info("the permit of %s stays revoked: cannot list it (%s)",
                                 cluster, exc)
            await asyncio.sleep(self.wait / self.ROUNDS)

    async def _observe(self) -> None:
        try:
            await self.observe_once()
        except errors.KubeError as exc:
            # The wait only grows while nothing is read: a version first seen later is
            # timed from later. Safe, only slower.
            log.warning("cannot read the permit Leases: %s", exc)

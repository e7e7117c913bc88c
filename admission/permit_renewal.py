"""A worker's side of the permit: renew it in the manager, and say what is left of it.

In a worker cluster (MultiKueue, docs/multikueue-fence.md) every replica of the controller
renews the worker's permit Lease in the manager, each on its own: it reads its clock, reads
the Lease, and PUTs it back with the version read (core.permit.renewal). An accepted PUT
extends the replica's own permit from the clock reading taken before anything was sent; a
409 (the manager's revocation, or the other replica's renewal) extends nothing and the
next round reads again. Each replica answers a pod's "how long" from its own permit: every
replica's permit began before its write landed, and every write landed before the version
the manager times, so the manager's wait bounds them all.

A revoked Lease ends the replica's permit at once; only the manager grants it again, after
it has proven the worker's dispatch pods gone (admission.permit_revocation).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime

from dispatch_kubeflow.core import errors, names
from dispatch_kubeflow.core.permit import (
    DEFAULT_LENGTH,
    Permit,
    is_revoked,
    lease_name,
    renewal,
)
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import LEASE

log = logging.getLogger(__name__)


class PermitRenewal:
    """One replica's permit for the worker ``cluster``, renewed through ``manager`` (a client
    of the manager cluster's API server)."""

    ROUNDS = 3
    """Renewals per permit length: two may fail before the permit runs out."""
    RETRY = 2.0
    """Seconds (at most; jittered down to half) before a round that extended nothing is tried
    again: a worker back from a cut renews at once rather than a whole period later."""
    ROUND_SECONDS = 5.0
    """A round that has not landed by then is given up and tried again: a request sent into a
    cut waits out the transport's timeout and retries (up to half a minute), past the heal."""

    def __init__(self, manager: KubeAPI, cluster: str, identity: str, *,
                 length: float = DEFAULT_LENGTH,
                 namespace: str = names.CONTROLLER_NAMESPACE,
                 clock: Callable[[], float] = time.monotonic,
                 wallclock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 retry: float = RETRY, round_seconds: float = ROUND_SECONDS) -> None:
        self.manager = manager
        self.retry, self.round_seconds = retry, round_seconds
        self.cluster, self.identity, self.namespace = cluster, identity, namespace
        self.permit = Permit(length)
        self._clock = clock
        self._wallclock = wallclock
        self.revoked = False
        """Whether the last Lease read was revoked."""
        self.missing = False
        """Whether the last read found no Lease (the permit never granted)."""

    @property
    def name(self) -> str:
        return lease_name(self.cluster)

    def left(self) -> float:
        """Seconds of this replica's permit left now (0: none): a pod's answer."""
        return self.permit.left(self._clock())

    async def revoked_live(self) -> bool:
        """Whether the permit Lease is revoked, read live in the manager now (a missing
        Lease is not: core.permit.is_revoked)."""
        return is_revoked(await self.manager.get_or_none(LEASE, self.name, self.namespace))

    async def renew_once(self) -> bool:
        """One round; whether it extended the permit. A KubeError other than a 409 (the
        manager unreachable, say) is raised: the permit then runs out by itself."""
        asked = self._clock()  # before anything is sent: the permit is measured from here
        lease = await self.manager.get_or_none(LEASE, self.name, self.namespace)
        if lease is None:
            if not self.missing:  # once, not each retry
                log.warning("no permit Lease %s/%s in the manager: not granted; this worker "
                            "runs no dispatch execution", self.namespace, self.name)
            self.missing = True
            self.permit.revoked()
            return False
        self.missing = False
        if is_revoked(lease):
            if not self.revoked:
                log.warning("the manager revoked this worker's permit (%s/%s): no dispatch "
                            "execution runs here until it grants it again",
                            self.namespace, self.name)
            self.revoked = True
            self.permit.revoked()
            return False
        self.revoked = False
        try:
            # Carries the version read: a revocation since then refuses it (409).
            await self.manager.replace(LEASE, renewal(lease, self.identity, self._wallclock()),
                                       self.namespace)
        except errors.KubeConflict:
            return False  # written since the read: judged again at the next round
        self.permit.renewed(asked)
        return True

    async def run(self) -> None:
        """Renew every length / :attr:`ROUNDS` seconds (with a little jitter, so two replicas
        do not meet at every round) until cancelled. A round that extended nothing (the
        manager unreachable or slow past :attr:`ROUND_SECONDS`, the other replica's write
        first, no permit granted) is tried again after at most :attr:`RETRY` seconds: the
        permit must outlast a cut shorter than its length, and pods see a grant soon."""
        period = self.permit.length / self.ROUNDS
        while True:
            renewed = False
            try:
                # Given up mid-request, a PUT may still land: the manager then sees a newer
                # version and waits longer; the permit is extended only by an answer.
                async with asyncio.timeout(self.round_seconds):
                    renewed = await self.renew_once()
            except errors.KubeError as exc:
                log.warning("cannot renew the permit %s/%s in the manager: %s; %.0f s of it "
                            "left", self.namespace, self.name, exc, self.left())
            except TimeoutError:
                log.warning("the manager did not answer a renewal of the permit %s/%s within "
                            "%.0f s; %.0f s of it left", self.namespace, self.name,
                            self.round_seconds, self.left())
            await asyncio.sleep(period * random.uniform(0.8, 1.0) if renewed
                                else self.retry * random.uniform(0.5, 1.0))

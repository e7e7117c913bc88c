"""Leader election on a coordination.k8s.io/v1 Lease, by client-go's rules.

* The record: ``holderIdentity``, ``leaseDurationSeconds``, ``acquireTime``, ``renewTime``
  (UTC MicroTime, ``2006-01-02T15:04:05.000000Z``), ``leaseTransitions``.
* Expiry is judged by this process's own monotonic clock: a lease held by someone else is
  valid while (the moment we last saw the record *change*) + leaseDurationSeconds is in the
  future. ``renewTime`` is never compared with our clock, so clock skew does not matter.
* Taking over (or acquiring a free lease) sets acquireTime = renewTime = now and increments
  leaseTransitions; renewing keeps both. An empty holder is a free lease.
* Writes are optimistic: PUT with the resourceVersion read, a 409 loses the round.
* A leader that cannot renew within ``renew_deadline`` stops leading (renew_deadline <
  lease_duration leaves a margin in which no one else can have taken over).
* Clean shutdown releases: holder "", leaseDurationSeconds 1, transitions unchanged.

``confirm()`` re-reads the Lease (the hold expiry calls it before releasing a hold).
Readmission decisions check only ``is_leader()``, no request: both their writes carry a
resourceVersion precondition, and the model shows the confirms add no safety to that
(docs/readmission-model.md, variants ``leaseconfirm`` and ``noleader``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

from dispatch_kubeflow.core import errors
from dispatch_kubeflow.core.lease import LeaseRecord
from dispatch_kubeflow.core.times import format_microtime
from dispatch_kubeflow.kube import KubeAPI, retry
from dispatch_kubeflow.kube.resources import LEASE

log = logging.getLogger(__name__)

def expires_at(observed_at: float, record: LeaseRecord) -> float:
    """When (on our monotonic clock) a record last seen changing at ``observed_at`` expires."""
    return observed_at + record.duration


def held_by_other(record: LeaseRecord, me: str, observed_at: float, now: float) -> bool:
    """True when someone else holds the lease and, by our clock, it has not expired."""
    return bool(record.holder) and record.holder != me and now < expires_at(observed_at, record)


def next_record(old: LeaseRecord, me: str, duration: int, now: datetime) -> LeaseRecord:
    """The record to write to acquire or renew: client-go's tryAcquireOrRenew."""
    stamp = format_microtime(now)
    if old.holder == me:
        return replace(old, duration=duration, renew_time=stamp)
    return LeaseRecord(holder=me, duration=duration, acquire_time=stamp, renew_time=stamp,
                       transitions=old.transitions + 1)


def released_record(old: LeaseRecord, now: datetime) -> LeaseRecord:
    """client-go's release: empty holder, duration 1, transitions kept."""
    stamp = format_microtime(now)
    return LeaseRecord(holder="", duration=1, acquire_time=stamp, renew_time=stamp,
                       transitions=old.transitions)


class LeaderElector:
    """Campaigns for the Lease and keeps it; ``leading`` is set while this replica leads."""

    def __init__(
        self,
        kube: KubeAPI,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        wallclock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if not 0 < retry_period < renew_deadline < lease_duration:
            raise ValueError("need 0 < retry period < renew deadline < lease duration")
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._clock = clock
        self._wallclock = wallclock
        self._observed = LeaseRecord()
        self._observed_at = 0.0
        self._observed_rv = ""
        self._renewed_at: float | None = None  # our clock, last successful write as holder
        self.leading = asyncio.Event()
        self._listeners: list[Callable[[bool], None]] = []

    # --- state ---------------------------------------------------------------------------
    def on_change(self, listener: Callable[[bool], None]) -> None:
        """Call ``listener(leading)`` whenever leadership starts or stops."""
        self._listeners.append(listener)

    def is_leader(self) -> bool:
        """Cheap local view: we renewed within the renew deadline."""
        return (self._renewed_at is not None
                and self._clock() - self._renewed_at < self.renew_deadline)

    def _set_leading(self, leading: bool) -> None:
        if leading == self.leading.is_set():
            return
        if leading:
            self.leading.set()
        else:
            self.leading.clear()
            self._renewed_at = None
        log.info("leadership %s", "acquired" if leading else "lost",
                 extra={"lease": f"{self.namespace}/{self.name}", "identity": self.identity})
        for listener in self._listeners:
            try:
                listener(leading)
            except Exception:
                log.exception("leadership listener failed")

    async def confirm(self) -> bool:
        """Re-read the Lease: True only if it names us and our last renewal is recent."""
        if not self.is_leader():
            return False
        try:
            with retry.deadline(retry.now() + self.retry_period):
                lease = await self.kube.get(LEASE, self.name, self.namespace)
        except errors.KubeError as exc:
            log.warning("cannot confirm leadership: %s", exc)
            return False
        ok = LeaseRecord.from_lease(lease).holder == self.identity and self.is_leader()
        if not ok:
            self._set_leading(False)
        return ok

    # --- one round -------------------------------------------------------------------------
    def _observe(self, record: LeaseRecord, rv: str) -> None:
        if record != self._observed or rv != self._observed_rv:
            self._observed, self._observed_rv = record, rv
            self._observed_at = self._clock()

    async def try_acquire_or_renew(self) -> bool:
        """One client-go round. True when we hold the lease after it."""
        # A round's requests ride out a restarting API server only until the next round
        # (client-go bounds a renewal the same way), not the transport's longer window.
        with retry.deadline(retry.now() + self.retry_period):
            return await self._round()

    async def _round(self) -> bool:
        now_wall = self._wallclock()
        duration = max(1, round(self.lease_duration))
        try:
            lease = await self.kube.get_or_none(LEASE, self.name, self.namespace)
        except errors.KubeError as exc:
            log.warning("cannot read lease: %s", exc)
            return False
        if lease is None:
            record = next_record(LeaseRecord(transitions=-1), self.identity, duration, now_wall)
            body = {"metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": record.spec()}
            try:
                created = await self.kube.create(LEASE, body, self.namespace)
            except errors.KubeError as exc:  # 409: someone else created it first
                log.info("cannot create lease: %s", exc)
                return False
            self._observe(record, str(created["metadata"].get("resourceVersion", "")))
            self._renewed_at = self._clock()
            return True
        old = LeaseRecord.from_lease(lease)
        rv = str(lease["metadata"].get("resourceVersion", ""))
        self._observe(old, rv)
        if held_by_other(old, self.identity, self._observed_at, self._clock()):
            return False
        record = next_record(old, self.identity, duration, now_wall)
        lease["spec"] = {**(lease.get("spec") or {}), **record.spec()}
        try:
            updated = await self.kube.replace(LEASE, lease, self.namespace)
        except errors.KubeError as exc:  # 409 lost the race; anything else: next round
            log.info("cannot write lease: %s", exc)
            return False
        self._observe(record, str(updated["metadata"].get("resourceVersion", "")))
        self._renewed_at = self._clock()
        return True

    def _next_wait(self) -> float:
        """Sleep the retry period, but wake exactly when another holder's lease expires."""
        if self.leading.is_set() or not self._observed.holder:
            return self.retry_period
        until_expiry = expires_at(self._observed_at, self._observed) - self._clock()
        return max(0.05, min(self.retry_period, until_expiry + 0.05))

    async def run(self) -> None:
        """Campaign and renew until cancelled."""
        while True:
            ok = await self.try_acquire_or_renew()
            if ok:
                self._set_leading(True)
            elif self.leading.is_set() and not self.is_leader():
                self._set_leading(False)  # could not renew within the renew deadline
            elif self.leading.is_set() and self._observed.holder != self.identity:
                self._set_leading(False)
            await asyncio.sleep(self._next_wait())

    async def release(self) -> None:
        """Give the lease up (clean shutdown) so another replica need not wait for expiry."""
        was_leading = self.leading.is_set()
        self._set_leading(False)
        if not was_leading:
            return
        with contextlib.suppress(errors.KubeError):
            lease = await self.kube.get(LEASE, self.name, self.namespace)
            old = LeaseRecord.from_lease(lease)
            if old.holder != self.identity:
                return
            lease["spec"] = {**(lease.get("spec") or {}),
                             **released_record(old, self._wallclock()).spec()}
            await self.kube.replace(LEASE, lease, self.namespace)
            log.info("lease released", extra={"lease": f"{self.namespace}/{self.name}"})

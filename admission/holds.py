"""Release Kueue-mode holds whose hold-until has passed.

A hold is ``spec.active=false`` plus the ``hold-*`` annotations on the Workload, and the
same annotations on its TrainJob (core.hold; docs/design.md "Holds"). Each held Workload
gets one timer at its hold-until (no poll of everything), on the keyed work queue the
readmission uses (a failure comes back after its backoff, a bug included); when it fires
the leader re-reads
the Workload and, if the same hold instance is still there and expired, first removes the
TrainJob's record (as Release does: the controller puts back a hold the TrainJob still
records), then sets ``spec.active=true`` and removes the Workload's annotations. Each is one
merge patch with a resourceVersion precondition (so a hold renewed meanwhile is never
released).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from admission.faults import Faults
from admission.intake import Caches, Feed, Key, Obj, key_of
from admission.lease import LeaderElector
from admission.observability import EventRecorder, Metrics
from admission.workqueue import WorkQueue, serve
from dispatch_kubeflow.core import hold, names
from dispatch_kubeflow.core.kueue import trainjob_of
from dispatch_kubeflow.core.objects import annotations_of
from dispatch_kubeflow.core.times import parse_time
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import TRAINJOB, WORKLOAD

log = logging.getLogger(__name__)


def hold_until(wl: Obj) -> datetime | None:
    """The hold's end if the Workload is held (inactive with a readable hold-until)."""
    raw = annotations_of(wl).get(names.HOLD_UNTIL)
    if not raw or (wl.get("spec") or {}).get("active") is not False:
        return None
    return parse_time(raw)


def unreadable_until(wl: Obj) -> str | None:
    """The hold-until of a held Workload when it is not an RFC 3339 time (None otherwise):
    such a hold never expires by itself, and its holder should be told."""
    raw = annotations_of(wl).get(names.HOLD_UNTIL)
    if not raw or (wl.get("spec") or {}).get("active") is not False or parse_time(raw):
        return None
    return str(raw)


def release_patch(wl: Obj) -> Obj:
    """spec.active=true and every hold annotation removed, only on this exact version."""
    meta = wl.get("metadata") or {}
    return {
        "metadata": {"resourceVersion": meta.get("resourceVersion"),
                     "annotations": dict.fromkeys(names.HOLD_ANNOTATIONS)},
        "spec": {"active": True},
    }


class HoldExpiry:
    def __init__(self, kube: KubeAPI, elector: LeaderElector, caches: Caches, workloads: Feed,
                 metrics: Metrics, faults: Faults | None = None, *, workers: int = 1,
                 events: EventRecorder | None = None) -> None:
        self.kube = kube
        self.events = events
        self.faults = faults or Faults()
        self.elector = elector
        self.caches = caches
        self.metrics = metrics
        self.workers = workers
        # 409 included: re-read and judged again after the backoff.
        self.queue: WorkQueue[Key] = WorkQueue(base_delay=0.2, max_delay=30.0)
        self._told: set[tuple[str, str]] = set()
        """(Workload UID, hold-until) pairs already reported unreadable."""
        workloads.subscribe(self._on_workload)
        elector.on_change(self._on_leadership)

    def _on_leadership(self, leading: bool) -> None:
        if leading:  # timers that fired while we followed did nothing: look again
            for wl in self.caches.workloads():
                self._schedule(key_of(wl), wl)

    def _on_workload(self, typ: str, obj: Obj) -> None:
        self._schedule(key_of(obj), None if typ == "DELETED" else obj)

    def _schedule(self, key: Key, wl: Obj | None) -> None:
        until = hold_until(wl) if wl else None
        if until is None:
            self.queue.cancel_after(key)
            if wl is not None and unreadable_until(wl) is not None:
                self.queue.add(key)  # the worker tells the holder, as leader
            return
        self.queue.add_after(key, max(0.0, (until - datetime.now(UTC)).total_seconds()))

    async def run(self) -> None:
        await asyncio.gather(*(serve(self.queue, self._release, what="expired hold of workload")
                               for _ in range(self.workers)))

    async def _release(self, key: Key) -> bool:
        await self._release_once(key)
        return True

    async def _release_once(self, key: Key) -> None:
        if not self.elector.is_leader():
            return  # the next leader looks at every hold when it starts leading
        ns, name = key
        wl = await self.kube.get_or_none(WORKLOAD, name, ns)
        until = hold_until(wl) if wl else None
        if wl is not None and until is None and (raw := unreadable_until(wl)) is not None:
            await self._unreadable(wl, raw)
            return
        if wl is None or until is None:
            return
        if until > datetime.now(UTC):
            self._schedule(key, wl)
            return
        if not await self.elector.confirm():
            return
        instance = annotations_of(wl).get(names.HOLD_INSTANCE)
        tj_name = trainjob_of(wl)
        read = await self.kube.get_or_none(TRAINJOB, tj_name, ns) if tj_name else None
        tj = hold.of_trainjob(wl, read)
        if tj is not None and hold.instance(tj) == hold.instance(wl):
            # The TrainJob's record first; a 409 (it changed) is judged again by _release.
            await self.kube.patch(TRAINJOB, str(tj_name), hold.clear_patch(tj), ns,
                                  kind="merge")
            self.faults.kill_if("kill-after-expiry-clear",
                                "after clearing the expired hold's TrainJob record",
                                {"workload": f"{ns}/{name}"})
        await self.kube.patch(WORKLOAD, name, release_patch(wl), ns, kind="merge")
        self.metrics.holds_released.inc()
        log.info("released expired hold of workload %s/%s", ns, name,
                 extra={"workload": f"{ns}/{name}", "hold_instance": instance,
                        "hold_until": until.isoformat()})

    async def _unreadable(self, wl: Obj, raw: str) -> None:
        """A Warning Event on the Workload and a metric, once per Workload and value: the
        hold stays until Release, since nobody can tell when it was meant to end."""
        ns, name = key_of(wl)
        uid = str((wl.get("metadata") or {}).get("uid") or "")
        if (uid, raw) in self._told:
            return
        self._told.add((uid, raw))
        self.metrics.holds_unreadable.inc()
        note = (f"hold-until {raw!r} is not an RFC 3339 time (2026-05-01T13:00:00Z): the hold "
                "will not expire by itself; release it, or hold again with a valid until")
        log.warning("workload %s/%s: %s", ns, name, note, extra={"workload": f"{ns}/{name}"})
        if self.events is not None:
            await self.events.record(
                {"apiVersion": WORKLOAD.api_version, "kind": WORKLOAD.kind, **wl},
                reason="HoldUntilUnreadable", action="ExpireHold", note=note,
                type_="Warning", key=f"HoldUntilUnreadable/{uid}/{raw}")

    def close(self) -> None:
        self.queue.close()

"""The readmission gate's writes: each fenced, what a refused one means, and their Events.

Every write the gate makes on a decision carries the resourceVersion of the object the
decision was judged from: the check's entry on the Workload (:func:`admission.decision.
check_apply`), A's raise on the TrainJob (the plans of :mod:`dispatch_kubeflow.core.
admission_count` and :mod:`dispatch_kubeflow.core.execution`). A 409 says the object
changed since: nothing is written, and the Workload is judged again from live reads
(:meth:`GateWrites.stale`), not from the indexes that may still hold the version refused.
A Workload left waiting is judged again after :attr:`GateWrites.WAIT_RECHECK` whether or
not an event comes. Events are recorded in the background, after the writes they tell of.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

from admission.decision import PENDING, Decision, check_apply
from admission.faults import Faults
from admission.intake import Caches, Key, Obj
from admission.observability import BackgroundEvents, EventRecorder, Metrics
from admission.workqueue import WorkQueue
from dispatch_kubeflow.core import errors, names
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import TRAINJOB, WORKLOAD

log = logging.getLogger(__name__)


class GateWrites:
    """The gate's fenced writes, for the Workloads of one work queue (the module doc)."""

    EVENTS_IN_FLIGHT = 256
    """At most this many Events being recorded at once; beyond it one is dropped, with a
    warning (Events are advice; decisions must not wait for them)."""

    WAIT_RECHECK = 10.0
    """Seconds after which a waiting Workload (old pods left, no JobSet yet, a re-made JobSet
    beside old pods) is judged again with no event: what it waits for is read live then, so
    a watch that missed the event (a stalled stream after an API server restart, stop 34's
    CI) delays an approval by this much, never forever. A LIST or GET per waiting Workload
    per period."""

    def __init__(self, kube: KubeAPI, queue: WorkQueue[Key], caches: Caches, *,
                 metrics: Metrics, events: EventRecorder, faults: Faults,
                 skip: Callable[[Key, str], None]) -> None:
        self.kube, self.queue, self.caches = kube, queue, caches
        self.metrics, self.events, self.faults = metrics, events, faults
        self.skip = skip
        """Says why a Workload is left alone (the readmission's, one log line per reason)."""
        self.live: set[Key] = set()
        """Keys whose last write met a 409: judged next from live reads, not the indexes
        (which may still hold the version the 409 refused)."""
        self.background = BackgroundEvents(self.EVENTS_IN_FLIGHT)

    def judged_live(self, key: Key) -> bool:
        """Whether ``key`` is to be judged from live reads this time (and not the next)."""
        live = key in self.live
        self.live.discard(key)
        return live

    def stale(self, key: Key, what: str) -> None:
        """A fence refused a write (or the token showed our Workload read is older than the
        TrainJob read): judge again, from live reads this time."""
        self.metrics.decisions.labels("stale").inc()
        log.info("workload %s/%s: changed since it was judged; not writing %s, judging again",
                 *key, what, extra={"workload": f"{key[0]}/{key[1]}"})
        self.live.add(key)
        self.queue.add(key)

    def recheck(self, key: Key) -> None:
        """Judge ``key`` again in :attr:`WAIT_RECHECK` seconds, event or not (the timer
        replaces an earlier one, so a Workload has one at a time)."""
        self.queue.add_after(key, self.WAIT_RECHECK)

    async def apply_check(self, ns: str, name: str, body: Obj) -> None:
        # force: our field manager owns only our entry; the resourceVersion in ``body`` is
        # the precondition (a stale version answers 409, see check_apply).
        await self.kube.patch(WORKLOAD, name, body, ns, kind="apply", subresource="status",
                              field_manager=names.FIELD_MANAGER, force=True)

    async def write_wait(self, key: Key, wl: Obj, d: Decision) -> None:
        """Write the check's wait message (Pending), unless it says so already."""
        self.recheck(key)
        if not d.write:
            return
        ns, name = key
        # Fenced like the Ready: the body carries the resourceVersion of the Workload judged.
        body = check_apply(wl, d.check, PENDING, d.message, datetime.now(UTC),
                           fenced="no-fence" not in self.faults)
        try:
            await self.apply_check(ns, name, body)
        except errors.KubeNotFound:
            return  # the Workload went between the read and the write
        except errors.KubeConflict:
            self.stale(key, "the wait message")
            return
        self.metrics.decisions.labels("waiting").inc()
        log.info("workload %s/%s: %s", ns, name, d.message,
                 extra={"workload": f"{ns}/{name}", "trainjob": d.trainjob, "pods": d.pods})
        self.later("WaitingForPreviousExecution", self.record_on_trainjob(
            ns, d.trainjob, reason="WaitingForPreviousExecution", note=d.message,
            action="Wait"))

    async def raise_a(self, key: Key, tj_name: str, patch: Obj, what: str) -> Obj | None:
        """Raise A with ``patch``; the TrainJob as written, or None when nothing was.

        Fenced: the patch carries the resourceVersion of the TrainJob it was planned from
        (raise_patch, plan_rebind), so a plan made from an older version raises nothing
        (409, judged again from live reads)."""
        try:
            written: Obj = await self.kube.patch(TRAINJOB, tj_name, patch, key[0], kind="merge")
        except errors.KubeConflict:
            self.stale(key, what)
            return None
        except errors.KubeNotFound:  # the index still had a TrainJob that went
            self.skip(key, f"TrainJob {tj_name} is gone")
            return None
        return written

    # --- Events, off the critical path ------------------------------------------------------
    def later(self, what: str, coro: Coroutine[Any, Any, None]) -> None:
        """Record an Event in the background: the next decision does not wait for it."""
        self.background.spawn(what, coro)

    async def record_on_trainjob(self, ns: str, name: str, **event: str) -> None:
        tj = self.caches.trainjob(ns, name) or await self.kube.get_or_none(TRAINJOB, name, ns)
        if tj is not None:
            await self.events.record(tj, **event)

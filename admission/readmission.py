"""Readmission: set a Workload's dispatch check Ready only once the previous execution is gone.

For a Workload whose ClusterQueue lists our check and whose check is Pending with quota
reserved: while any pod labelled ``jobset-name=<trainjob>`` exists (terminating included),
the check stays Pending with the message ``waiting for N pods of the previous execution to
go``; when none is left, the leader raises A on the TrainJob (once per admission: the token
rule of docs/design.md) and then server-side applies the check Ready.

The decision is a pure function (:func:`decide`, and the admission-count rule
:func:`dispatch_kubeflow.core.admission_count.plan_admission`) of the objects;
:class:`Readmission` does the I/O: kopf's event handlers feed a keyed work queue (a pod's
deletion re-queues its job's Workload, so readiness follows the last pod's deletion event,
with no polling); a worker judges from the indexes whether there may be something to do, and
then judges again with a live list of the job's pods before it writes anything.

An approval's critical path is three requests: the live LIST of the job's pods, the PATCH
that raises A (fenced by the TrainJob's resourceVersion) and the apply of the check Ready
(fenced by the Workload's resourceVersion). The Workload and the TrainJob come from the
indexes: a stale one makes its fenced write answer 409, and the key is judged again from
live reads. Leadership is checked from the elector's own state (no request): the fences,
not the Lease, keep a deposed leader's writes out (the model's variants ``leaseconfirm`` and
``noleader``, docs/readmission-model.md). Events are recorded in the background after the
writes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from admission.faults import Faults
from admission.intake import (
    LISTED,
    Caches,
    Feed,
    Key,
    Obj,
    key_of,
)
from admission.lease import LeaderElector
from admission.observability import EventRecorder, Metrics
from admission.workqueue import WorkQueue
from dispatch_kubeflow.core import errors, hold, names
from dispatch_kubeflow.core.admission_count import admission_token, plan_admission
from dispatch_kubeflow.core.admission_count import admissions as admissions_of
from dispatch_kubeflow.core.execution import (
    alive,
    approval_annotations,
    approved_jobset,
    is_alive,
    jobset_uid_of,
    plan_rebind,
    raise_step,
)
from dispatch_kubeflow.core.kueue import checks_listed, is_our_check, trainjob_of
from dispatch_kubeflow.core.objects import (
    annotations_of,
    condition,
    controller_uid,
    is_true,
    labels_of,
)
from dispatch_kubeflow.core.times import format_time, parse_time
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import JOBSET, POD, TRAINJOB, WORKLOAD

log = logging.getLogger(__name__)

PENDING, READY = "Pending", "Ready"
_UNSEEN = object()


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def waiting_message(n: int) -> str:
    return f"waiting for {n} pods of the previous execution to go"


def ready_message(a: int) -> str:
    return f"no pod of the previous execution is left; admission count A = {a}"


def unguarded_message(cluster_queue: str) -> str:
    return (f"ClusterQueue {cluster_queue} does not list dispatch's admission check: Kueue "
            "admits this dispatch job without the readmission gate (A is not raised). The pod "
            "webhook still refuses a pod beside an alive pod of another execution or of the "
            "same rank; list the check again to restore the gate")


def no_jobset_message(trainjob: str) -> str:
    return f"waiting for Trainer to make JobSet {trainjob}, which the approval names"


# --- judging the objects (pure) --------------------------------------------------------
def check_entry(wl: Obj, check_names: frozenset[str]) -> Obj | None:
    for c in (wl.get("status") or {}).get("admissionChecks") or []:
        if c.get("name") in check_names:
            return dict(c)
    return None


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with one Workload, judged from the objects.

    ``ignore``: not ours (no check of ours on it). ``skip``: ours but unusable; log why.
    ``idle``: ours, nothing to do now. ``wait``: old pods remain (or the JobSet the approval
    must name is not there yet). ``approve``: raise A (if the token says so) and set the
    check Ready. ``rebind``: admitted, but the TrainJob's JobSet is not the one approved (it
    was re-made): raise A for it once the old execution's pods are gone (core.execution).
    ``unguarded``: a dispatch job's Workload has quota reserved with no check of ours on it
    (its ClusterQueue stopped listing the check): Kueue admits it without the gate; say so.
    ``hold``: the TrainJob records a hold its Workload does not carry (the Workload was
    re-made under the hold): put the hold back on it (core.hold).
    """

    kind: Literal["ignore", "skip", "idle", "wait", "approve", "rebind", "unguarded", "hold"]
    reason: str = ""
    check: str = ""
    trainjob: str = ""
    pods: int = 0
    message: str = ""
    write: bool = False
    """For ``wait``: whether the check's message must change."""


def decide(wl: Obj, *, check_names: frozenset[str], cluster_queues: Mapping[str, frozenset[str]],
           pods_left: int, jobset_uid: str | None, trainjob: Obj | None = None) -> Decision:
    """Judge a Workload. ``cluster_queues`` maps a ClusterQueue to the checks it lists;
    ``pods_left`` counts the job's alive pods; ``jobset_uid`` (the UID of the TrainJob's
    JobSet as indexed, None when none is) and ``trainjob`` (as indexed) are read only to
    notice a JobSet re-made under an admitted Workload."""
    entry = check_entry(wl, check_names)
    if entry is None:
        cq = str(((wl.get("status") or {}).get("admission") or {}).get("clusterQueue") or "")
        # Only once the ClusterQueue (as indexed) lists none of our checks: right after the
        # reservation Kueue may not have added our entry yet.
        if trainjob is not None and labels_of(trainjob).get(names.JOB_ID_LABEL) \
                and is_true(wl, "QuotaReserved") and cq in cluster_queues \
                and not cluster_queues[cq] & check_names:
            return Decision("unguarded", unguarded_message(cq), trainjob=trainjob_of(wl) or "")
        return Decision("ignore", "no check of ours on it")
    check = str(entry["name"])
    tj = trainjob_of(wl)
    if tj is None:
        return Decision("skip", "not owned by a TrainJob", check=check)
    # A held job is never approved, whatever its Workload says: the hold outlives a
    # Workload re-made under it (core.hold). Before the rebind and the approval.
    held = hold.instance(hold.of_trainjob(wl, trainjob))
    if held:
        if hold.lacks_hold(trainjob, wl):
            return Decision("hold", f"TrainJob {tj} is held (instance {held}) and its "
                            "Workload is not", check=check, trainjob=tj)
        return Decision("idle", f"TrainJob {tj} is held (instance {held})", check=check,
                        trainjob=tj)
    if entry.get("state") == READY and _rebound(wl, trainjob, jobset_uid):
        return Decision("rebind", f"JobSet {jobset_uid} is not the approved "
                        f"{approved_jobset(trainjob)}", check=check, trainjob=tj)
    if entry.get("state") != PENDING:
        return Decision("idle", f"check is {entry.get('state')}", check=check, trainjob=tj)
    if (wl.get("spec") or {}).get("active") is False:
        return Decision("idle", "Workload is deactivated", check=check, trainjob=tj)
    if not is_true(wl, "QuotaReserved"):
        return Decision("idle", "quota not reserved", check=check, trainjob=tj)
    if is_true(wl, "Evicted"):
        # Kueue keeps QuotaReserved while it tears an evicted reservation down (until the
        # job is stopped) and sets Evicted=False with the next reservation. Approving in
        # between would leave the check Ready for that next reservation, admitted at once,
        # while the torn-down execution's late pods get the new A (found by the model,
        # verify/readmission.pml, variant NOEVICTGUARD).
        return Decision("idle", "Workload is being evicted", check=check, trainjob=tj)
    cq = str(((wl.get("status") or {}).get("admission") or {}).get("clusterQueue") or "")
    if not cq:
        return Decision("skip", "quota reserved but status.admission names no ClusterQueue",
                        check=check, trainjob=tj)
    if cq not in cluster_queues:
        return Decision("skip", f"ClusterQueue {cq} is unknown", check=check, trainjob=tj)
    if check not in cluster_queues[cq]:
        return Decision("skip", f"ClusterQueue {cq} does not list check {check}",
                        check=check, trainjob=tj)
    if pods_left > 0:
        msg = waiting_message(pods_left)
        return Decision("wait", msg, check=check, trainjob=tj, pods=pods_left, message=msg,
                        write=entry.get("message") != msg)
    return Decision("approve", "no pod of the previous execution is left", check=check,
                    trainjob=tj)


def _rebound(wl: Obj, trainjob: Obj | None, jobset_uid: str | None) -> bool:
    """The Workload's admission is the one the TrainJob's A was raised for, it is admitted
    and running, and the TrainJob's JobSet is not the one that admission approved."""
    if trainjob is None or not jobset_uid:
        return False
    approved = approved_jobset(trainjob)
    if not approved or approved == jobset_uid:
        return False
    if (wl.get("spec") or {}).get("active") is False or is_true(wl, "Evicted") \
            or not is_true(wl, "Admitted"):
        return False
    return annotations_of(trainjob).get(names.ADMISSION_TOKEN) == admission_token(wl)


def check_apply(wl: Obj, check: str, state: str, message: str, now: datetime, *,
                fenced: bool = True) -> Obj:
    """The server-side apply body that sets only our check's entry.

    lastTransitionTime moves only when the state changes (Kueue's own rule). The body
    carries the resourceVersion of ``wl``, the Workload version the decision was judged
    from: the API server applies it only to that version and answers 409 otherwise. That is
    the fence leader election cannot give (client-go: "does not guarantee that only one
    client is acting as a leader"): a leader that stalled between confirming its Lease and
    this write, while another judged, approved and the job was held and released, writes
    nothing. ``fenced=False`` exists only for the test that shows the stale write.
    """
    entry = check_entry(wl, frozenset({check})) or {}
    ltt = entry.get("lastTransitionTime")
    if entry.get("state") != state or not ltt:
        ltt = format_time(now)
    meta = wl.get("metadata") or {}
    return {
        "apiVersion": WORKLOAD.api_version,
        "kind": WORKLOAD.kind,
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"),
                     **({"resourceVersion": meta.get("resourceVersion")} if fenced else {})},
        "status": {"admissionChecks": [
            {"name": check, "state": state, "message": message, "lastTransitionTime": ltt},
        ]},
    }


def quota_reserved_at(wl: Obj) -> datetime | None:
    return parse_time((condition(wl, "QuotaReserved") or {}).get("lastTransitionTime"))


def owner_uid(wl: Mapping[str, Any]) -> str:
    """The UID of the TrainJob that controls this Workload ("" when none is recorded)."""
    return controller_uid(wl, "TrainJob")


# --- the I/O ------------------------------------------------------------------------------
class Readmission:
    """Runs the decisions for every Workload, as leader only."""

    RELIST_QUIET = 1.0
    """Seconds without a pod listing event after which a re-list counts as over."""
    EVENTS_IN_FLIGHT = 256
    """At most this many Events being recorded at once; beyond it one is dropped, with a
    warning (Events are advice; decisions must not wait for them)."""

    def __init__(self, kube: KubeAPI, elector: LeaderElector, caches: Caches, *,
                 workloads: Feed, trainjobs: Feed, pods: Feed, jobsets: Feed,
                 admission_checks: Feed, cluster_queues: Feed, metrics: Metrics,
                 events: EventRecorder, workers: int = 2,
                 faults: Faults | None = None) -> None:
        self.kube = kube
        self.elector = elector
        self.caches = caches
        self.faults = faults or Faults()
        self.metrics = metrics
        self.events = events
        self.workers = workers
        self.queue: WorkQueue[Key] = WorkQueue()
        self.warm = False
        """Set once the indexes are warm: pod listing events after that are a re-list."""
        self._relisted: asyncio.TimerHandle | None = None
        self._skipped: dict[Key, str] = {}
        self._warned: set[str] = set()
        """Reservations (tokens) already reported as admitted without our check."""
        self._live: set[Key] = set()
        """Keys whose last write met a 409: judged next from live reads, not the indexes
        (which may still hold the version the 409 refused)."""
        self._events: set[asyncio.Task[None]] = set()
        self._setup: dict[tuple[str, str], object] = {}
        """What decisions read of each AdmissionCheck and ClusterQueue, as last seen."""
        workloads.subscribe(self._on_workload)
        trainjobs.subscribe(self._on_trainjob)
        pods.subscribe(self._on_pod)
        jobsets.subscribe(self._on_jobset)
        admission_checks.subscribe(
            lambda typ, ac: self._on_setup("admissionchecks", typ, ac, is_our_check(ac)))
        cluster_queues.subscribe(
            lambda typ, cq: self._on_setup("clusterqueues", typ, cq, checks_listed(cq)))
        elector.on_change(lambda leading: self.enqueue_all() if leading else None)

    # --- what is ours -----------------------------------------------------------------
    def pods_left(self, namespace: str, trainjob: str) -> int:
        return self.caches.pods_left(namespace, trainjob)

    # --- feed listeners (sync, cheap) -------------------------------------------------
    def _on_workload(self, typ: str, obj: Obj) -> None:
        key = key_of(obj)
        if typ == "DELETED":
            self._skipped.pop(key, None)
            return
        self.queue.add(key)

    def _on_trainjob(self, typ: str, obj: Obj) -> None:
        if typ == "ADDED":  # a Workload judged before its TrainJob was indexed
            self._enqueue_job(*key_of(obj))

    def _on_jobset(self, typ: str, obj: Obj) -> None:
        if typ != "MODIFIED":  # a JobSet made, or re-made: what an approval names
            self._enqueue_job(*key_of(obj))

    def _enqueue_job(self, ns: str, trainjob: str) -> None:
        for wl in self.caches.workloads_of_job(ns, trainjob):
            self.queue.add((ns, wl))

    def _on_pod(self, typ: str, obj: Obj) -> None:
        if typ == "MODIFIED" and is_alive(obj):
            # Only a pod's coming, going or finishing changes what a Workload waits for.
            return
        ns, _ = key_of(obj)
        self._enqueue_job(ns, str(labels_of(obj).get(names.JOBSET_NAME_LABEL)))
        if typ == LISTED and self.warm:
            # kopf re-lists after a watch gap without DELETED events for what went meanwhile:
            # once the re-list is quiet, judge every Workload again from a live read.
            if self._relisted is not None:
                self._relisted.cancel()
            self._relisted = asyncio.get_running_loop().call_later(
                self.RELIST_QUIET, self.enqueue_all)

    def _on_setup(self, plural: str, typ: str, obj: Obj, read: object) -> None:
        """Judge every Workload again only when what a decision reads of an AdmissionCheck
        (is it ours) or a ClusterQueue (the checks it lists) changed. Kueue rewrites a
        ClusterQueue's status on every admission and every finish: re-queueing all Workloads
        on each of those put every decision behind the whole backlog, and judged again keys
        whose index had not yet brought our own Ready (a stale judgement, a 409; 62 of 200
        decisions at N = 200, issue 11)."""
        name = (plural, key_of(obj)[1])
        if typ == "DELETED":
            self._setup.pop(name, None)
        elif self._setup.get(name, _UNSEEN) == read:
            return
        else:
            self._setup[name] = read
        self.enqueue_all()

    def enqueue_all(self) -> None:
        for wl in self.caches.workloads():
            self.queue.add(key_of(wl))

    def close(self) -> None:
        if self._relisted is not None:
            self._relisted.cancel()
        self.queue.close()

    async def aclose(self, timeout: float = 5.0) -> None:
        """Stop, giving the Events in flight ``timeout`` seconds to be recorded."""
        self.close()
        if not self._events:
            return
        _, pending = await asyncio.wait(set(self._events), timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            log.warning("stopping: %d events not recorded", len(pending))
        await asyncio.gather(*pending, return_exceptions=True)

    # --- Events, off the critical path ----------------------------------------------------
    def _later(self, what: str, coro: Coroutine[Any, Any, None]) -> None:
        """Record an Event in the background: the next decision does not wait for it."""
        if len(self._events) >= self.EVENTS_IN_FLIGHT:
            coro.close()
            log.warning("not recording event %s: %d events in flight already", what,
                        len(self._events))
            return
        task = asyncio.get_running_loop().create_task(coro, name=f"event {what}")
        self._events.add(task)
        task.add_done_callback(self._recorded)

    def _recorded(self, task: asyncio.Task[None]) -> None:
        self._events.discard(task)
        if task.cancelled():
            return
        exc = task.exception()  # the recorder logs API errors itself: this is a bug
        if exc is not None:
            log.error("%s failed", task.get_name(), exc_info=exc)

    async def settle(self) -> None:
        """Wait until no Event is being recorded (tests; the recorder never raises)."""
        while self._events:
            await asyncio.gather(*set(self._events), return_exceptions=True)

    async def _record_admission(self, tj: Obj, count: int, token: str,
                                ready_check: str | None) -> None:
        """An admission's Events, A's raise then (when it was written) the check Ready."""
        await self.events.record(
            tj, reason="AdmissionCountRaised", action="RaiseAdmissionCount",
            note=f"admission count A raised to {count} for admission {token}",
            key=f"AdmissionCountRaised/{token}")
        if ready_check is not None:
            await self.events.record(tj, reason="AdmissionCheckReady", action="Approve",
                                     note=f"check {ready_check} Ready: {ready_message(count)}")

    async def _record_on_trainjob(self, ns: str, name: str, **event: str) -> None:
        tj = self.caches.trainjob(ns, name) or await self.kube.get_or_none(TRAINJOB, name, ns)
        if tj is not None:
            await self.events.record(tj, **event)

    # --- workers ----------------------------------------------------------------------
    async def run(self) -> None:
        await asyncio.gather(*(self._worker() for _ in range(self.workers)))

    async def _worker(self) -> None:
        while True:
            key = await self.queue.get()
            try:
                await self.reconcile(key)
                self.queue.forget(key)
            except asyncio.CancelledError:
                raise
            except errors.KubeError as exc:
                delay = self.queue.retry(key)
                self.metrics.decisions.labels("error").inc()
                log.warning("workload %s/%s: %s; retrying in %.1fs", *key, exc, delay)
            except Exception:
                delay = self.queue.retry(key)
                self.metrics.decisions.labels("error").inc()
                log.exception("workload %s/%s: unexpected failure; retrying in %.1fs",
                              *key, delay)
            finally:
                self.queue.done(key)

    def _skip(self, key: Key, why: str) -> None:
        if self._skipped.get(key) != why:  # one log line per reason, not per event
            self._skipped[key] = why
            self.metrics.decisions.labels("skipped").inc()
            log.info("skipping workload %s/%s: %s", *key, why,
                     extra={"workload": f"{key[0]}/{key[1]}"})

    def _decide(self, wl: Obj, pods_left: int) -> Decision:
        ns, _ = key_of(wl)
        tj = trainjob_of(wl) or ""
        return decide(wl, check_names=self.caches.check_names(),
                      cluster_queues=self.caches.cq_checks(), pods_left=pods_left,
                      jobset_uid=self.caches.jobset_uid(ns, tj),
                      trainjob=self.caches.trainjob(ns, tj))

    async def reconcile(self, key: Key) -> None:
        if not self.elector.is_leader():
            return
        wl = self.caches.workload(*key)
        if wl is None:
            return
        d = self._decide(wl, self.pods_left(key[0], trainjob_of(wl) or ""))
        if d.kind == "unguarded":
            self._unguarded(wl, d)
            return
        if d.kind == "ignore" or d.kind == "idle":
            return
        if d.kind == "skip":
            self._skip(key, d.reason)
            return
        self._skipped.pop(key, None)
        if d.kind == "hold":
            await self._keep_hold(key, d.trainjob)
            return
        await self._act(key, d.trainjob)

    async def _keep_hold(self, key: Key, tj_name: str) -> None:
        """Put the TrainJob's hold back on its Workload (re-made under the hold).

        The TrainJob is read live, after the Workload: Release clears the TrainJob's record
        before it reactivates the Workload, so a record still there when read live belongs
        to a hold whose Workload release has not happened yet, and the write carries the
        resourceVersion of the Workload judged (core.hold.keep_patch): a release that lands
        first makes it a 409, never a hold put back on a released job."""
        ns, name = key
        live = key in self._live
        self._live.discard(key)
        wl = await self._workload(ns, name, live)
        if wl is None:
            return
        tj = await self._trainjob(wl, ns, tj_name, True)
        if not hold.lacks_hold(tj, wl):
            return
        held = hold.record(tj) or {}
        if not self.elector.is_leader():
            return
        try:
            await self.kube.patch(WORKLOAD, name, hold.keep_patch(wl, held), ns, kind="merge")
        except errors.KubeConflict:
            self._stale(key, "the hold")
            return
        except errors.KubeNotFound:
            return  # the Workload went; Kueue makes another, judged when it comes
        self.faults.kill_if("kill-after-hold-copy", "after putting the hold back",
                 {"workload": f"{ns}/{name}"})
        self.metrics.decisions.labels("held").inc()
        instance = held.get(names.HOLD_INSTANCE, "")
        note = (f"TrainJob {tj_name} records hold instance {instance} and its Workload "
                "carried none (made after the hold, or the hold not written there yet): "
                "deactivated it with the same record")
        log.info("workload %s/%s: %s", ns, name, note,
                 extra={"workload": f"{ns}/{name}", "trainjob": tj_name,
                        "hold_instance": instance})
        self._later("HoldKept", self.events.record(
            dict(wl), reason="HoldKept", action="Deactivate", note=note,
            key=f"HoldKept/{(wl.get('metadata') or {}).get('uid')}/{instance}"))

    def _unguarded(self, wl: Obj, d: Decision) -> None:
        """A Warning Event on the Workload and a metric, once per reservation (its token)."""
        token = admission_token(wl)
        if token in self._warned:
            return
        self._warned.add(token)
        self.metrics.decisions.labels("unguarded").inc()
        ns, name = key_of(wl)
        log.warning("workload %s/%s: %s", ns, name, d.reason,
                    extra={"workload": f"{ns}/{name}", "trainjob": d.trainjob})
        self._later("AdmittedWithoutCheck", self.events.record(
            dict(wl), reason="AdmittedWithoutCheck", action="Warn", note=d.reason,
            type_="Warning", key=f"AdmittedWithoutCheck/{token}"))

    def _stale(self, key: Key, what: str) -> None:
        """A fence refused a write (or the token showed our Workload read is older than the
        TrainJob read): judge again, from live reads this time."""
        self.metrics.decisions.labels("stale").inc()
        log.info("workload %s/%s: changed since it was judged; not writing %s, judging again",
                 *key, what, extra={"workload": f"{key[0]}/{key[1]}"})
        self._live.add(key)
        self.queue.add(key)

    async def _write_wait(self, wl: Obj, d: Decision) -> None:
        ns, name = key_of(wl)
        # Fenced like the Ready: the body carries the resourceVersion of the Workload judged.
        body = check_apply(wl, d.check, PENDING, d.message, datetime.now(UTC),
                           fenced="no-fence" not in self.faults)
        await self._apply_check(ns, name, body)
        self.metrics.decisions.labels("waiting").inc()
        log.info("workload %s/%s: %s", ns, name, d.message,
                 extra={"workload": f"{ns}/{name}", "trainjob": d.trainjob, "pods": d.pods})
        self._later("WaitingForPreviousExecution", self._record_on_trainjob(
            ns, d.trainjob, reason="WaitingForPreviousExecution", note=d.message,
            action="Wait"))

    async def _apply_check(self, ns: str, name: str, body: Obj) -> None:
        # force: our field manager owns only our entry; the resourceVersion in ``body`` is
        # the precondition (a stale version answers 409, see check_apply).
        await self.kube.patch(WORKLOAD, name, body, ns, kind="apply", subresource="status",
                              field_manager=names.FIELD_MANAGER, force=True)

    async def _workload(self, ns: str, name: str, live: bool) -> Obj | None:
        """From the index unless told to read live (after a 409) or it lacks the Workload.
        Safe because every write judged from it carries its resourceVersion."""
        wl = None if live else self.caches.workload(ns, name)
        return wl if wl is not None else await self.kube.get_or_none(WORKLOAD, name, ns)

    async def _trainjob(self, wl: Obj, ns: str, name: str, live: bool) -> Obj | None:
        """From the index unless told to read live, it lacks the TrainJob, or it holds an
        earlier TrainJob of that name (not the UID the Workload's owner reference names).
        Safe because the raise of A carries its resourceVersion; without a raise, the token
        it shows for this admission is in every newer version too, or a newer admission's
        Workload version fails the Ready's fence (docs/readmission-model.md)."""
        tj = None if live else self.caches.trainjob(ns, name)
        if tj is not None and owner_uid(wl) not in ("", (tj.get("metadata") or {}).get("uid")):
            tj = None
        if tj is None:
            tj = await self.kube.get_or_none(TRAINJOB, name, ns)
        if tj is not None and owner_uid(wl) not in ("", (tj.get("metadata") or {}).get("uid")):
            # A later attempt's TrainJob of the same name: not the one this Workload is of.
            return None
        return tj

    async def _act(self, key: Key, tj_name: str) -> None:
        """Judge again with a live list of the job's pods, then write: the check's wait
        message, or A and Ready.

        The pods are listed live: they are what the pod index may still be wrong about (a
        pod its watch has not brought yet, or after a watch gap one long gone), and no
        write's precondition covers them. The Workload and the TrainJob come from the
        indexes (after a 409, from live reads), because each write judged from them carries
        that object's resourceVersion.
        """
        ns, name = key
        live = key in self._live
        self._live.discard(key)
        began = time.monotonic()
        wl = await self._workload(ns, name, live)
        if wl is None:
            return
        live_pods, _ = await self.kube.list(
            POD, ns, label_selector=f"{names.JOBSET_NAME_LABEL}={tj_name}")
        listed = time.monotonic()
        d = self._decide(wl, len(alive(live_pods)))
        if d.kind == "rebind":
            await self._rebind(key, wl, tj_name, live_pods, live)
            return
        if d.kind == "wait":
            if d.write:
                try:
                    await self._write_wait(wl, d)
                except errors.KubeNotFound:
                    return  # the Workload went between the read and the write
                except errors.KubeConflict:
                    self._stale(key, "the wait message")
            return
        if d.kind != "approve":
            return
        tj = await self._trainjob(wl, ns, tj_name, live)
        if tj is None:
            self._skip(key, f"TrainJob {tj_name} is gone")
            return
        if hold.instance(tj):
            return  # held since the index showed it: its TrainJob event judges it again
        token = admission_token(wl)
        # The approval names the JobSet it lets run (core.execution): its pods alone pass
        # the webhook. From the index, else read live; read live too when it is not the one
        # approved before (a re-made JobSet: A then rises past its old restarts, raise_step).
        # None yet: wait. Trainer applies the JobSet with the TrainJob, suspended or not
        # (Trainer v2.3.0 reconcileObjects), so the wait is short; recording none instead
        # would let the webhook skip the JobSet rule (the model's variant RECORDNONE).
        jobset_uid = self.caches.jobset_uid(ns, tj_name) or ""
        jobset: Obj | None = None
        approved = approved_jobset(tj)
        if not jobset_uid or (approved and approved != jobset_uid):
            jobset = await self.kube.get_or_none(JOBSET, tj_name, ns)
            jobset_uid = str(((jobset or {}).get("metadata") or {}).get("uid") or "")
        if not jobset_uid:
            msg = no_jobset_message(tj_name)
            if (check_entry(wl, frozenset({d.check})) or {}).get("message") != msg:
                try:
                    await self._write_wait(wl, Decision("wait", msg, check=d.check,
                                                        trainjob=tj_name, message=msg))
                except errors.KubeNotFound:
                    return
                except errors.KubeConflict:
                    self._stale(key, "the wait message")
            return
        plan = plan_admission(tj, token, approval_annotations(jobset_uid),
                              raise_step(tj, jobset_uid, jobset))
        if not plan.ok:
            self._skip(key, f"TrainJob {tj_name}: {plan.reason}")
            return
        if plan.stale:
            self._stale(key, "A")
            return
        ctx = {"workload": f"{ns}/{name}", "trainjob": tj_name, "token": token,
               "admission_count": plan.count}
        raised = ready = False
        try:
            if plan.raise_a:
                # The elector's own state, no request: it spares a deposed leader's writes
                # most of the time. It is not what makes them safe; the precondition is.
                if not self.elector.is_leader():
                    log.info("workload %s/%s: not the leader any more; not raising A", ns, name)
                    return
                if not await self._workload_still(wl):
                    return
                raised_tj = await self._raise(key, tj_name, plan.patch, "A")
                if raised_tj is None:
                    return
                tj = raised_tj
                raised = True
                self.metrics.decisions.labels("raised").inc()
                log.info("workload %s/%s: raised A to %d", ns, name, plan.count, extra=ctx)
                self.faults.kill_if("kill-after-raise", "after raising A", ctx)
            if not self.elector.is_leader():
                log.info("workload %s/%s: not the leader any more; not approving", ns, name)
                return
            self.faults.stop_once("stop-before-ready", "before the Ready write", ctx)
            started = time.monotonic()
            try:
                # Fenced: check_apply carries the resourceVersion of the Workload judged.
                await self._apply_check(ns, name, check_apply(
                    wl, d.check, READY, ready_message(plan.count), datetime.now(UTC),
                    fenced="no-fence" not in self.faults))
            except errors.KubeConflict:
                self._stale(key, "Ready")
                return
            except errors.KubeNotFound:
                return  # the Workload went (the index may keep one after a watch gap)
            ready = True
            self.metrics.decisions.labels("ready").inc()
            reserved = quota_reserved_at(wl)
            if reserved is not None:
                latency = (datetime.now(UTC) - reserved).total_seconds()
                self.metrics.ready_latency.observe(max(0.0, latency))
            # Where an approval's time went (docs/scale.md): the live list, the raise, the
            # Ready, and all of _act.
            done = time.monotonic()
            log.info("workload %s/%s: check %s Ready", ns, name, d.check,
                     extra={**ctx, "list_ms": _ms(listed - began),
                            "raise_ms": _ms(started - listed), "write_ms": _ms(done - started),
                            "act_ms": _ms(done - began)})
        finally:
            # After the writes, in the background. AdmissionCountRaised whether A rose just
            # now (even if the Ready write then failed) or a leader before us raised it and
            # died before recording it: its name is made from the token, so it exists once.
            # One task, so the Events are recorded in the order the writes happened.
            if raised or ready:
                self._later("AdmissionCountRaised", self._record_admission(
                    tj, plan.count, token, d.check if ready else None))

    async def _raise(self, key: Key, tj_name: str, patch: Obj, what: str) -> Obj | None:
        """Raise A with ``patch``; the TrainJob as written, or None when nothing was.

        Fenced: the patch carries the resourceVersion of the TrainJob it was planned from
        (raise_patch, plan_rebind), so a plan made from an older version raises nothing
        (409, judged again from live reads)."""
        try:
            written: Obj = await self.kube.patch(TRAINJOB, tj_name, patch, key[0], kind="merge")
        except errors.KubeConflict:
            self._stale(key, what)
            return None
        except errors.KubeNotFound:  # the index still had a TrainJob that went
            self._skip(key, f"TrainJob {tj_name} is gone")
            return None
        return written

    async def _workload_still(self, wl: Obj) -> bool:
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

    async def _rebind(self, key: Key, wl: Obj, tj_name: str, pods: list[Obj],
                      live: bool) -> None:
        """Approve a JobSet re-made under an admitted Workload as a new execution: once no
        alive pod of another JobSet is left, raise A and record the new JobSet. Until then
        the webhook refuses the new JobSet's pods (core.execution.judge_pod)."""
        ns, name = key
        # Live: two replicas rebinding from lagging indexes would each take the other's
        # JobSet for the new one, and raise A at every turn (the model's CACHEDJOBSET).
        jobset = await self.kube.get_or_none(JOBSET, tj_name, ns)
        jobset_uid = str(((jobset or {}).get("metadata") or {}).get("uid") or "")
        tj = await self._trainjob(wl, ns, tj_name, live)
        if tj is None or jobset is None or not jobset_uid or hold.instance(tj):
            return
        others = sum(1 for p in alive(pods) if jobset_uid_of(p) != jobset_uid)
        plan = plan_rebind(tj, admissions_of(tj), jobset, others)
        ctx = {"workload": f"{ns}/{name}", "trainjob": tj_name, "jobset_uid": jobset_uid}
        if not plan.needed or plan.patch is None:
            log.info("workload %s/%s: %s", ns, name, plan.reason, extra=ctx)
            return
        if not self.elector.is_leader() or not await self._workload_still(wl):
            return
        raised_tj = await self._raise(key, tj_name, plan.patch, "A for the re-made JobSet")
        if raised_tj is None:
            return
        self.faults.kill_if("kill-after-rebind", "after the rebind raised A", ctx)
        tj = raised_tj
        self.metrics.decisions.labels("rebound").inc()
        log.info("workload %s/%s: %s; raised A to %d", ns, name, plan.reason, plan.count,
                 extra={**ctx, "admission_count": plan.count})
        self._later("ExecutionRebound", self.events.record(
            tj, reason="AdmissionCountRaised", action="RaiseAdmissionCount",
            note=f"admission count A raised to {plan.count}: {plan.reason}, and no pod of "
                 "the previous execution is left",
            key=f"AdmissionCountRaised/{jobset_uid}"))

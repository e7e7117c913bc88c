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
then judges again from a fresh read through ``Kube`` (the Workload and a live list of the
job's pods) before it writes anything.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from admission.intake import LISTED, Caches, Feed, Key, Obj, key_of, trainjob_of
from admission.lease import LeaderElector
from admission.observability import EventRecorder, Metrics
from admission.workqueue import WorkQueue
from dispatch_kubeflow.core import errors, names
from dispatch_kubeflow.core.admission_count import admission_token, plan_admission
from dispatch_kubeflow.core.objects import condition, is_true, labels_of
from dispatch_kubeflow.core.times import format_time, parse_time
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import POD, TRAINJOB, WORKLOAD

log = logging.getLogger(__name__)

PENDING, READY = "Pending", "Ready"
FAULT_ENV = "DISPATCH_ADMISSION_FAULT"
"""Test-only fault injection, comma-separated:

* ``kill-after-raise`` SIGKILLs the process right after A rose;
* ``stop-before-ready`` SIGSTOPs the whole process once, after the last ``confirm()`` and
  before the Ready write: a leader frozen (GC pause, CPU starvation, SIGSTOP) between
  knowing it leads and writing, which the test resumes with SIGCONT;
* ``no-fence`` writes the check without the Workload's resourceVersion, to show in a test
  what the fence prevents. Never for production.
"""


def faults() -> frozenset[str]:
    return frozenset(f.strip() for f in os.environ.get(FAULT_ENV, "").split(",") if f.strip())


_stopped_once = False


def waiting_message(n: int) -> str:
    return f"waiting for {n} pods of the previous execution to go"


def ready_message(a: int) -> str:
    return f"no pod of the previous execution is left; admission count A = {a}"


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
    ``idle``: ours, nothing to do now. ``wait``: old pods remain. ``approve``: raise A (if
    the token says so) and set the check Ready.
    """

    kind: Literal["ignore", "skip", "idle", "wait", "approve"]
    reason: str = ""
    check: str = ""
    trainjob: str = ""
    pods: int = 0
    message: str = ""
    write: bool = False
    """For ``wait``: whether the check's message must change."""


def decide(wl: Obj, *, check_names: frozenset[str], cluster_queues: Mapping[str, frozenset[str]],
           pods_left: int) -> Decision:
    """Judge a Workload. ``cluster_queues`` maps a ClusterQueue to the checks it lists."""
    entry = check_entry(wl, check_names)
    if entry is None:
        return Decision("ignore", "no check of ours on it")
    check = str(entry["name"])
    tj = trainjob_of(wl)
    if tj is None:
        return Decision("skip", "not owned by a TrainJob", check=check)
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


# --- the I/O ------------------------------------------------------------------------------
class Readmission:
    """Runs the decisions for every Workload, as leader only."""

    RELIST_QUIET = 1.0
    """Seconds without a pod listing event after which a re-list counts as over."""

    def __init__(self, kube: KubeAPI, elector: LeaderElector, caches: Caches, *,
                 workloads: Feed, pods: Feed, admission_checks: Feed, cluster_queues: Feed,
                 metrics: Metrics, events: EventRecorder, workers: int = 2) -> None:
        self.kube = kube
        self.elector = elector
        self.caches = caches
        self.metrics = metrics
        self.events = events
        self.workers = workers
        self.queue: WorkQueue[Key] = WorkQueue()
        self.warm = False
        """Set once the indexes are warm: pod listing events after that are a re-list."""
        self._relisted: asyncio.TimerHandle | None = None
        self._skipped: dict[Key, str] = {}
        workloads.subscribe(self._on_workload)
        pods.subscribe(self._on_pod)
        admission_checks.subscribe(lambda *_: self.enqueue_all())
        cluster_queues.subscribe(lambda *_: self.enqueue_all())
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

    def _on_pod(self, typ: str, obj: Obj) -> None:
        if typ == "MODIFIED":
            return  # only a pod's coming and going changes what a Workload waits for
        ns, _ = key_of(obj)
        job = labels_of(obj).get(names.JOBSET_NAME_LABEL)
        for wl in self.caches.workloads_of_job(ns, str(job)):
            self.queue.add((ns, wl))
        if typ == LISTED and self.warm:
            # kopf re-lists after a watch gap without DELETED events for what went meanwhile:
            # once the re-list is quiet, judge every Workload again from a live read.
            if self._relisted is not None:
                self._relisted.cancel()
            self._relisted = asyncio.get_running_loop().call_later(
                self.RELIST_QUIET, self.enqueue_all)

    def enqueue_all(self) -> None:
        for wl in self.caches.workloads():
            self.queue.add(key_of(wl))

    def close(self) -> None:
        if self._relisted is not None:
            self._relisted.cancel()
        self.queue.close()

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
        return decide(wl, check_names=self.caches.check_names(),
                      cluster_queues=self.caches.cq_checks(), pods_left=pods_left)

    async def reconcile(self, key: Key) -> None:
        if not self.elector.is_leader():
            return
        wl = self.caches.workload(*key)
        if wl is None:
            return
        d = self._decide(wl, self.pods_left(key[0], trainjob_of(wl) or ""))
        if d.kind == "ignore" or d.kind == "idle":
            return
        if d.kind == "skip":
            self._skip(key, d.reason)
            return
        self._skipped.pop(key, None)
        await self._act(key, d.trainjob)

    def _stale(self, key: Key, what: str) -> None:
        """The fence refused a write: the Workload changed since it was judged. Judge again."""
        self.metrics.decisions.labels("stale").inc()
        log.info("workload %s/%s: changed since it was judged; not writing %s, judging again",
                 *key, what, extra={"workload": f"{key[0]}/{key[1]}"})
        self.queue.add(key)

    @staticmethod
    def _fault_stop_before_ready(ctx: Mapping[str, Any]) -> None:
        global _stopped_once
        if "stop-before-ready" in faults() and not _stopped_once:
            _stopped_once = True
            log.warning("fault injection: SIGSTOP before the Ready write", extra=dict(ctx))
            for h in logging.getLogger().handlers:
                h.flush()
            os.kill(os.getpid(), signal.SIGSTOP)

    async def _write_wait(self, wl: Obj, d: Decision) -> None:
        ns, name = key_of(wl)
        body = check_apply(wl, d.check, PENDING, d.message, datetime.now(UTC),
                           fenced="no-fence" not in faults())
        await self._apply_check(ns, name, body)
        self.metrics.decisions.labels("waiting").inc()
        log.info("workload %s/%s: %s", ns, name, d.message,
                 extra={"workload": f"{ns}/{name}", "trainjob": d.trainjob, "pods": d.pods})
        tj = await self.kube.get_or_none(TRAINJOB, d.trainjob, ns)
        if tj is not None:
            await self.events.record(tj, reason="WaitingForPreviousExecution", note=d.message,
                                     action="Wait")

    async def _apply_check(self, ns: str, name: str, body: Obj) -> None:
        # force: our field manager owns only our entry; the resourceVersion in ``body`` is
        # the precondition (a stale version answers 409, see check_apply).
        await self.kube.patch(WORKLOAD, name, body, ns, kind="apply", subresource="status",
                              field_manager=names.FIELD_MANAGER, force=True)

    async def _act(self, key: Key, tj_name: str) -> None:
        """Judge again from the server, then write: the check's wait message, or A and Ready."""
        ns, name = key
        # The indexes may lag the server (or, after a watch gap, keep a pod that is gone).
        wl = await self.kube.get_or_none(WORKLOAD, name, ns)
        if wl is None:
            return
        live_pods, _ = await self.kube.list(
            POD, ns, label_selector=f"{names.JOBSET_NAME_LABEL}={tj_name}")
        d = self._decide(wl, len(live_pods))
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
        tj = await self.kube.get_or_none(TRAINJOB, tj_name, ns)
        if tj is None:
            self._skip(key, f"TrainJob {tj_name} is gone")
            return
        token = admission_token(wl)
        plan = plan_admission(tj, token)
        if not plan.ok:
            self._skip(key, f"TrainJob {tj_name}: {plan.reason}")
            return
        if plan.stale:
            self._stale(key, "A")
            return
        ctx = {"workload": f"{ns}/{name}", "trainjob": tj_name, "token": token,
               "admission_count": plan.count}
        if plan.raise_a:
            if not await self.elector.confirm():
                log.info("workload %s/%s: not the leader any more; not raising A", ns, name)
                return
            try:
                tj = await self.kube.patch(TRAINJOB, tj_name, plan.patch, ns, kind="merge")
            except errors.KubeConflict:
                # The TrainJob changed since we read it: judge again from a fresh read.
                self.queue.add(key)
                return
            self.metrics.decisions.labels("raised").inc()
            log.info("workload %s/%s: raised A to %d", ns, name, plan.count, extra=ctx)
            if "kill-after-raise" in faults():
                log.warning("fault injection: SIGKILL after raising A", extra=ctx)
                os.kill(os.getpid(), signal.SIGKILL)
        # Recorded whether we raised A just now or a leader before us did and died before
        # recording it: the Event's name is made from the token, so it exists once.
        await self.events.record(
            tj, reason="AdmissionCountRaised", action="RaiseAdmissionCount",
            note=f"admission count A raised to {plan.count} for admission {token}",
            key=f"AdmissionCountRaised/{token}")
        if not await self.elector.confirm():
            log.info("workload %s/%s: not the leader any more; not approving", ns, name)
            return
        self._fault_stop_before_ready(ctx)
        started = time.monotonic()
        try:
            await self._apply_check(ns, name, check_apply(
                wl, d.check, READY, ready_message(plan.count), datetime.now(UTC),
                fenced="no-fence" not in faults()))
        except errors.KubeConflict:
            self._stale(key, "Ready")
            return
        self.metrics.decisions.labels("ready").inc()
        reserved = quota_reserved_at(wl)
        if reserved is not None:
            latency = (datetime.now(UTC) - reserved).total_seconds()
            self.metrics.ready_latency.observe(max(0.0, latency))
        log.info("workload %s/%s: check %s Ready", ns, name, d.check,
                 extra={**ctx, "write_ms": round((time.monotonic() - started) * 1000, 1)})
        await self.events.record(tj, reason="AdmissionCheckReady", action="Approve",
                                 note=f"check {d.check} Ready: {ready_message(plan.count)}")

"""Readmission: set a Workload's dispatch check Ready only once the previous execution is gone.

For a Workload whose ClusterQueue lists our check and whose check is Pending with quota
reserved: while any pod labelled ``jobset-name=<trainjob>`` exists (terminating included),
the check stays Pending with the message ``waiting for N pods of the previous execution to
go``; when none is left, the leader raises A on the TrainJob (once per admission: the token
rule of docs/design.md) and then server-side applies the check Ready.

The decision is a pure function (:func:`decide`, :func:`plan_admission`) of the objects;
:class:`Readmission` does the I/O: informers feed a keyed work queue (pod deletions re-queue
the job's Workload, so readiness follows the last pod's deletion event, with no polling),
and a worker re-reads what it is about to approve.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from admission.informer import Informer, Key, Obj, key_of
from admission.lease import LeaderElector
from admission.observability import EventRecorder, Metrics
from admission.workqueue import WorkQueue
from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.identity import IdentityError, parse_count
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube.resources import POD, TRAINJOB, WORKLOAD

log = logging.getLogger(__name__)

PENDING, READY = "Pending", "Ready"
FAULT_ENV = "DISPATCH_ADMISSION_FAULT"
"""Test-only fault injection: ``kill-after-raise`` SIGKILLs the process right after A rose."""


def waiting_message(n: int) -> str:
    return f"waiting for {n} pods of the previous execution to go"


def ready_message(a: int) -> str:
    return f"no pod of the previous execution is left; admission count A = {a}"


# --- reading the objects (pure) -------------------------------------------------------
def trainjob_of(wl: Obj) -> str | None:
    """The name of the TrainJob that controls this Workload, or None."""
    for ref in (wl.get("metadata") or {}).get("ownerReferences") or []:
        if (ref.get("kind") == "TrainJob" and ref.get("controller")
                and str(ref.get("apiVersion", "")).startswith(names.TRAINER_GROUP + "/")):
            return str(ref.get("name") or "") or None
    return None


def condition(obj: Obj, typ: str) -> Obj | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == typ:
            return dict(c)
    return None


def is_true(obj: Obj, typ: str) -> bool:
    c = condition(obj, typ)
    return c is not None and c.get("status") == "True"


def eviction_count(wl: Obj) -> int:
    """Total evictions of this Workload (``status.schedulingStats.evictions[].count``)."""
    stats = (wl.get("status") or {}).get("schedulingStats") or {}
    return sum(int(e.get("count") or 0) for e in stats.get("evictions") or [])


def admission_token(wl: Obj) -> str:
    """``<workload uid>/<evictions>``: names one admission of one Workload."""
    return f"{(wl.get('metadata') or {}).get('uid', '')}/{eviction_count(wl)}"


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


@dataclass(frozen=True, slots=True)
class AdmissionPlan:
    """What to do to the TrainJob before the check goes Ready."""

    ok: bool
    reason: str = ""
    raise_a: bool = False
    count: int = 0
    """A after the plan (raised or not)."""
    patch: dict[str, Any] = field(default_factory=dict)


def plan_admission(trainjob: Obj, token: str) -> AdmissionPlan:
    """Raise A by one unless this admission (``token``) already raised it.

    The patch carries the TrainJob's resourceVersion, so it applies only to the TrainJob
    this plan was made from: a racing writer makes it fail with 409, never raise twice.
    """
    meta = trainjob.get("metadata") or {}
    labels = meta.get("labels") or {}
    if not labels.get(names.JOB_ID_LABEL):
        return AdmissionPlan(False, f"TrainJob has no {names.JOB_ID_LABEL} label: not dispatch's")
    annotations = meta.get("annotations") or {}
    try:
        a = parse_count(annotations.get(names.ADMISSION_COUNT), names.ADMISSION_COUNT)
    except IdentityError as exc:
        return AdmissionPlan(False, f"malformed admission count: {exc}")
    if annotations.get(names.ADMISSION_TOKEN) == token:
        return AdmissionPlan(True, "A was raised for this admission already", False, a)
    patch = {"metadata": {
        "resourceVersion": meta.get("resourceVersion"),
        "annotations": {names.ADMISSION_COUNT: str(a + 1), names.ADMISSION_TOKEN: token},
    }}
    return AdmissionPlan(True, "new admission", True, a + 1, patch)


def check_apply(wl: Obj, check: str, state: str, message: str, now: datetime) -> Obj:
    """The server-side apply body that sets only our check's entry.

    lastTransitionTime moves only when the state changes (Kueue's own rule).
    """
    entry = check_entry(wl, frozenset({check})) or {}
    ltt = entry.get("lastTransitionTime")
    if entry.get("state") != state or not ltt:
        ltt = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    meta = wl.get("metadata") or {}
    return {
        "apiVersion": WORKLOAD.api_version,
        "kind": WORKLOAD.kind,
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
        "status": {"admissionChecks": [
            {"name": check, "state": state, "message": message, "lastTransitionTime": ltt},
        ]},
    }


def quota_reserved_at(wl: Obj) -> datetime | None:
    c = condition(wl, "QuotaReserved")
    if not c or not c.get("lastTransitionTime"):
        return None
    try:
        return datetime.fromisoformat(str(c["lastTransitionTime"]).replace("Z", "+00:00"))
    except ValueError:
        return None


# --- the I/O ------------------------------------------------------------------------------
class Readmission:
    """Runs the decisions for every Workload, as leader only."""

    def __init__(self, kube: Kube, elector: LeaderElector, *, workloads: Informer,
                 pods: Informer, admission_checks: Informer, cluster_queues: Informer,
                 metrics: Metrics, events: EventRecorder, workers: int = 2) -> None:
        self.kube = kube
        self.elector = elector
        self.workloads = workloads
        self.pods = pods
        self.admission_checks = admission_checks
        self.cluster_queues = cluster_queues
        self.metrics = metrics
        self.events = events
        self.workers = workers
        self.queue: WorkQueue[Key] = WorkQueue()
        # (namespace, jobset name) -> pod names; (namespace, trainjob) -> Workload names
        self._pods_by_job: dict[Key, set[str]] = {}
        self._wls_by_job: dict[Key, set[str]] = {}
        self._skipped: dict[Key, str] = {}
        workloads.subscribe(self._on_workload)
        pods.subscribe(self._on_pod)
        admission_checks.subscribe(lambda *_: self.enqueue_all())
        cluster_queues.subscribe(lambda *_: self.enqueue_all())
        elector.on_change(lambda leading: self.enqueue_all() if leading else None)

    # --- what is ours -----------------------------------------------------------------
    def check_names(self) -> frozenset[str]:
        return frozenset(
            str(ac["metadata"]["name"]) for ac in self.admission_checks.values()
            if (ac.get("spec") or {}).get("controllerName") == names.CONTROLLER_NAME)

    def cq_checks(self) -> dict[str, frozenset[str]]:
        out: dict[str, frozenset[str]] = {}
        for cq in self.cluster_queues.values():
            rules = ((cq.get("spec") or {}).get("admissionChecksStrategy") or {}).get(
                "admissionChecks") or []
            out[str(cq["metadata"]["name"])] = frozenset(str(r.get("name")) for r in rules)
        return out

    def pods_left(self, namespace: str, trainjob: str) -> int:
        return len(self._pods_by_job.get((namespace, trainjob), ()))

    # --- informer listeners (sync, cheap) ---------------------------------------------
    def _on_workload(self, typ: str, old: Obj | None, new: Obj | None) -> None:
        obj = new or old
        if obj is None:
            return
        ns, name = key_of(obj)
        for o, add in ((old, False), (new, True)):
            tj = trainjob_of(o) if o else None
            if tj:
                s = self._wls_by_job.setdefault((ns, tj), set())
                if add:
                    s.add(name)
                else:
                    s.discard(name)
                    if not s:
                        self._wls_by_job.pop((ns, tj), None)
        if new is None:
            self._skipped.pop((ns, name), None)
            return
        self.queue.add((ns, name))

    def _on_pod(self, typ: str, old: Obj | None, new: Obj | None) -> None:
        obj = new or old
        if obj is None:
            return
        ns, name = key_of(obj)
        for o, add in ((old, False), (new, True)):
            job = ((o or {}).get("metadata") or {}).get("labels", {}).get(names.JOBSET_NAME_LABEL)
            if not job:
                continue
            s = self._pods_by_job.setdefault((ns, job), set())
            if add:
                s.add(name)
            else:
                s.discard(name)
                if not s:
                    self._pods_by_job.pop((ns, job), None)
        if typ in ("DELETED", "ADDED"):
            job = ((obj.get("metadata") or {}).get("labels") or {}).get(names.JOBSET_NAME_LABEL)
            for wl in self._wls_by_job.get((ns, str(job)), ()):
                self.queue.add((ns, wl))

    def enqueue_all(self) -> None:
        for wl in self.workloads.values():
            self.queue.add(key_of(wl))

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

    async def reconcile(self, key: Key) -> None:
        if not self.elector.is_leader():
            return
        wl = self.workloads.get(*key)
        if wl is None:
            return
        d = decide(wl, check_names=self.check_names(), cluster_queues=self.cq_checks(),
                   pods_left=self.pods_left(key[0], trainjob_of(wl) or ""))
        if d.kind == "ignore" or d.kind == "idle":
            return
        if d.kind == "skip":
            self._skip(key, d.reason)
            return
        self._skipped.pop(key, None)
        if d.kind == "wait":
            if d.write:
                await self._write_wait(wl, d)
            return
        await self._approve(key, d)

    async def _write_wait(self, wl: Obj, d: Decision) -> None:
        ns, name = key_of(wl)
        body = check_apply(wl, d.check, PENDING, d.message, datetime.now(UTC))
        await self._apply_check(ns, name, body)
        self.metrics.decisions.labels("waiting").inc()
        log.info("workload %s/%s: %s", ns, name, d.message,
                 extra={"workload": f"{ns}/{name}", "trainjob": d.trainjob, "pods": d.pods})
        tj = await self.kube.get_or_none(TRAINJOB, d.trainjob, ns)
        if tj is not None:
            await self.events.record(tj, reason="WaitingForPreviousExecution", note=d.message,
                                     action="Wait")

    async def _apply_check(self, ns: str, name: str, body: Obj) -> None:
        await self.kube.patch(WORKLOAD, name, body, ns, kind="apply", subresource="status",
                              field_manager=names.FIELD_MANAGER, force=True)

    async def _approve(self, key: Key, cached: Decision) -> None:
        ns, name = key
        # Re-read what we are about to approve: the caches may lag the server.
        wl = await self.kube.get_or_none(WORKLOAD, name, ns)
        if wl is None:
            return
        tj_name = cached.trainjob
        live_pods, _ = await self.kube.list(
            POD, ns, label_selector=f"{names.JOBSET_NAME_LABEL}={tj_name}")
        d = decide(wl, check_names=self.check_names(), cluster_queues=self.cq_checks(),
                   pods_left=len(live_pods))
        if d.kind == "wait":
            if d.write:
                await self._write_wait(wl, d)
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
            await self.events.record(
                tj, reason="AdmissionCountRaised", action="RaiseAdmissionCount",
                note=f"admission count A raised to {plan.count} for admission {token}")
            if os.environ.get(FAULT_ENV) == "kill-after-raise":
                log.warning("fault injection: SIGKILL after raising A", extra=ctx)
                os.kill(os.getpid(), signal.SIGKILL)
        if not await self.elector.confirm():
            log.info("workload %s/%s: not the leader any more; not approving", ns, name)
            return
        started = time.monotonic()
        await self._apply_check(ns, name, check_apply(wl, d.check, READY,
                                                       ready_message(plan.count),
                                                       datetime.now(UTC)))
        self.metrics.decisions.labels("ready").inc()
        reserved = quota_reserved_at(wl)
        if reserved is not None:
            latency = (datetime.now(UTC) - reserved).total_seconds()
            self.metrics.ready_latency.observe(max(0.0, latency))
        log.info("workload %s/%s: check %s Ready", ns, name, d.check,
                 extra={**ctx, "write_ms": round((time.monotonic() - started) * 1000, 1)})
        await self.events.record(tj, reason="AdmissionCheckReady", action="Approve",
                                 note=f"check {d.check} Ready: {ready_message(plan.count)}")

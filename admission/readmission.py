"""Readmission: set a Workload's dispatch check Ready only once the previous execution is gone.

For a Workload whose ClusterQueue lists our check and whose check is Pending with quota
reserved: while any pod labelled ``jobset-name=<trainjob>`` exists (terminating included),
the check stays Pending with the message ``waiting for N pods of the previous execution to
go``; when none is left, the leader raises A on the TrainJob (once per admission: the token
rule of docs/design.md) and then server-side applies the check Ready.

The decision is a pure function (:func:`admission.decision.decide`, and the admission-count
rule :func:`dispatch_kubeflow.core.admission_count.plan_admission`) of the objects;
:class:`Readmission` does the I/O: kopf's event handlers feed a keyed work queue (a pod's
deletion re-queues its job's Workload, so readiness follows the last pod's deletion event,
with no polling); a worker judges from the indexes whether there may be something to do, and
then judges again with a live list of the job's pods before it writes anything.

An approval's critical path is three requests: the live LIST of the job's pods, the PATCH
that raises A (fenced by the TrainJob's resourceVersion) and the apply of the check Ready
(fenced by the Workload's resourceVersion). The Workload and the TrainJob come from the
indexes: a stale one makes its fenced write answer 409, and the key is judged again from
live reads (the writes and their refusals: :mod:`admission.gate_writes`). Leadership is
checked from the elector's own state (no request): the fences, not the Lease, keep a
deposed leader's writes out (the model's variants ``leaseconfirm`` and ``noleader``,
docs/readmission-model.md). Events are recorded in the background after the writes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from admission.decision import (
    READY,
    REMOTE_HERE,
    Decision,
    check_apply,
    check_entry,
    decide,
    no_jobset_message,
    quota_reserved_at,
    ready_message,
)
from admission.faults import Faults
from admission.gate_writes import GateWrites
from admission.intake import (
    Caches,
    Feed,
    Key,
    Obj,
    key_of,
)
from admission.lease import LeaderElector
from admission.observability import EventRecorder, Metrics
from admission.reads import Reads
from admission.triggers import Triggers
from admission.worker_proof import Proof, Workers
from admission.workqueue import WorkQueue, serve
from dispatch_kubeflow.core import errors, hold, names
from dispatch_kubeflow.core.admission_count import (
    AdmissionPlan,
    admission_token,
    plan_admission,
)
from dispatch_kubeflow.core.admission_count import admissions as admissions_of
from dispatch_kubeflow.core.execution import (
    alive,
    approval_annotations,
    jobset_uid_of,
    plan_rebind,
    raise_step,
)
from dispatch_kubeflow.core.kueue import (
    dispatched_by_multikueue,
    multikueue_remote,
    trainjob_of,
)
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import JOBSET, POD, WORKLOAD

log = logging.getLogger(__name__)

def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


@dataclass(frozen=True, slots=True)
class Left:
    """What is left of a job's previous executions: how much, and the check's message
    (None: the pods' count says it, :func:`admission.decision.waiting_message`)."""

    count: int
    message: str | None = None


class Readmission:
    """Runs the decisions for every Workload, as leader only."""

    def __init__(self, kube: KubeAPI, elector: LeaderElector, caches: Caches, *,
                 workloads: Feed, trainjobs: Feed, pods: Feed, jobsets: Feed,
                 admission_checks: Feed, cluster_queues: Feed, metrics: Metrics,
                 events: EventRecorder, workers: int = 2,
                 faults: Faults | None = None, clusters: Workers | None = None) -> None:
        self.kube = kube
        self.elector = elector
        self.caches = caches
        self.faults = faults or Faults()
        self.metrics = metrics
        self.events = events
        self.workers = workers
        self.clusters = clusters
        """In a MultiKueue manager, its worker clusters: a job MultiKueue runs there is
        approved only once each is proven free of its previous execution (None: not a
        manager; such a job is never approved)."""
        self.queue: WorkQueue[Key] = WorkQueue()
        self._skipped: dict[Key, str] = {}
        self._warned: set[str] = set()
        """Reservations (tokens) already reported as admitted without our check."""
        self.writes = GateWrites(kube, self.queue, caches, metrics=metrics, events=events,
                                 faults=self.faults, skip=self._skip)
        self.reads = Reads(kube, caches)
        self.triggers = Triggers(self.queue, caches, workloads=workloads, trainjobs=trainjobs,
                                 pods=pods, jobsets=jobsets,
                                 admission_checks=admission_checks,
                                 cluster_queues=cluster_queues, forget=self._forget)
        elector.on_change(lambda leading: self.triggers.enqueue_all() if leading else None)

    def _forget(self, key: Key) -> None:
        self._skipped.pop(key, None)

    def close(self) -> None:
        self.triggers.close()
        self.queue.close()

    async def aclose(self, timeout: float = 5.0) -> None:
        """Stop, giving the Events in flight ``timeout`` seconds to be recorded."""
        self.close()
        await self.writes.background.aclose(timeout)

    # --- Events, off the critical path ----------------------------------------------------
    async def settle(self) -> None:
        """Wait until no Event is being recorded (tests; the recorder never raises)."""
        await self.writes.background.settle()

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

    # --- workers ----------------------------------------------------------------------
    async def run(self) -> None:
        await asyncio.gather(*(
            serve(self.queue, self._reconciled, what="workload",
                  failed=self.metrics.decisions.labels("error").inc)
            for _ in range(self.workers)))

    async def _reconciled(self, key: Key) -> bool:
        await self.reconcile(key)
        return True

    def _skip(self, key: Key, why: str) -> None:
        if self._skipped.get(key) != why:  # one log line per reason, not per event
            self._skipped[key] = why
            self.metrics.decisions.labels("skipped").inc()
            log.info("skipping workload %s/%s: %s", *key, why,
                     extra={"workload": f"{key[0]}/{key[1]}"})

    def _decide(self, wl: Obj, pods_left: int, waiting: str | None = None) -> Decision:
        ns, _ = key_of(wl)
        tj = trainjob_of(wl) or ""
        return decide(wl, check_names=self.caches.check_names(),
                      cluster_queues=self.caches.cq_checks(), pods_left=pods_left,
                      jobset_uid=self.caches.jobset_uid(ns, tj),
                      trainjob=self.caches.trainjob(ns, tj), waiting=waiting)

    async def reconcile(self, key: Key) -> None:
        if not self.elector.is_leader():
            return
        wl = self.caches.workload(*key)
        if wl is None:
            return
        d = self._decide(wl, self.caches.pods_left(key[0], trainjob_of(wl) or ""))
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
        """Put the TrainJob's hold back on its Workload (re-made, or resumed, under it).
        The TrainJob is read live, after the Workload: Release clears the TrainJob's record
        before it reactivates the Workload, so a record still there when read live belongs
        to a hold whose Workload release has not happened yet, and the write carries the
        resourceVersion of the Workload judged (core.hold.keep_patch): a release that lands
        first makes it a 409, never a hold put back on a released job."""
        ns, name = key
        live = self.writes.judged_live(key)
        wl = await self.reads.workload(ns, name, live)
        if wl is None:
            return
        tj = await self.reads.trainjob(wl, ns, tj_name, True)
        if not hold.lacks_hold(tj, wl) or not self.elector.is_leader():
            return
        held = hold.record(tj) or {}
        try:
            await self.kube.patch(WORKLOAD, name, hold.keep_patch(wl, held), ns, kind="merge")
        except errors.KubeConflict:
            self.writes.stale(key, "the hold")
            return
        except errors.KubeNotFound:
            return  # the Workload went; Kueue makes another, judged when it comes
        self.faults.kill_if("kill-after-hold-copy", "after putting the hold back",
                 {"workload": f"{ns}/{name}"})
        self.metrics.decisions.labels("held").inc()
        instance = held.get(names.HOLD_INSTANCE, "")
        note = (f"TrainJob {tj_name} records hold instance {instance} and its Workload " + (
            "was resumed outside dispatch: deactivated it again; a dispatch hold ends with "
            "dispatch release or its expiry" if hold.instance(wl) else "carried none (made "
            "after the hold, or the hold not written there yet): deactivated it with the "
            "same record"))
        log.info("workload %s/%s: %s", ns, name, note,
                 extra={"workload": f"{ns}/{name}", "trainjob": tj_name,
                        "hold_instance": instance})
        self.writes.later("HoldKept", self.events.record(
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
        self.writes.later("AdmittedWithoutCheck", self.events.record(
            dict(wl), reason="AdmittedWithoutCheck", action="Warn", note=d.reason,
            type_="Warning", key=f"AdmittedWithoutCheck/{token}"))

    async def _act(self, key: Key, tj_name: str) -> None:
        """Judge again with a live list of the job's pods, then write: the check's wait
        message, or A and Ready.

        The pods are listed live: they are what the pod index may still be wrong about (a
        pod its watch has not brought yet, or after a watch gap one long gone), and no
        write's precondition covers them. The Workload and the TrainJob come from the
        indexes (after a 409, from live reads), because each write judged from them carries
        that object's resourceVersion.

        An approval reads the TrainJob (and its JobSet) first, from the indexes, and then
        sends the list and the live GET of the Workload (:meth:`Reads.workload_still`) side
        by side: one round trip less than one after the other (issue 28). The GET must come
        after the TrainJob's read, whose version fences the raise; the list's order against
        the two is free (the model's variants EARLYTJ and GETFIRST: either order verifies).
        """
        ns, name = key
        live = self.writes.judged_live(key)
        began = time.monotonic()
        wl = await self.reads.workload(ns, name, live)
        if wl is None:
            return
        pre = self._decide(wl, 0)  # what it is if no pod is left
        if pre.kind != "approve":
            # A rebind (which reads the pods), or nothing to do whatever the pods are.
            live_pods = await self._list_pods(ns, tj_name)
            d = self._decide(wl, len(alive(live_pods)))
            if d.kind == "rebind":
                await self._rebind(key, wl, tj_name, live_pods, live)
            return
        check = pre.check
        tj = await self.reads.trainjob(wl, ns, tj_name, live)
        if tj is None:
            self._skip(key, f"TrainJob {tj_name} is gone")
            return
        if hold.instance(tj):
            return  # held since the index showed it: its TrainJob event judges it again
        if multikueue_remote(tj):
            # Raising A here would give its pods an identity the manager never approved.
            await self._say(key, wl, check, tj_name, REMOTE_HERE)
            return
        token = admission_token(wl)
        across = dispatched_by_multikueue(tj)
        plan: AdmissionPlan | None
        if across:
            # It runs in a worker: no JobSet here to name (the workers' webhooks judge its
            # pods by the agent's live read, docs/multikueue-fence.md).
            plan = plan_admission(tj, token)
        else:
            # None yet: wait. Trainer applies the JobSet with the TrainJob, suspended or not
            # (Trainer v2.3.0 reconcileObjects), so the wait is short; recording none instead
            # would let the webhook skip the JobSet rule (the model's variant RECORDNONE).
            jobset_uid, jobset = await self.reads.jobset_to_approve(tj, ns, tj_name)
            plan = plan_admission(tj, token, approval_annotations(jobset_uid),
                                  raise_step(tj, jobset_uid, jobset)) if jobset_uid else None
        still = True
        if plan is not None and plan.ok and not plan.stale and plan.raise_a \
                and self.elector.is_leader():
            async with asyncio.TaskGroup() as reads:
                leaving = reads.create_task(self._left(ns, tj_name, across))
                confirming = reads.create_task(self.reads.workload_still(wl))
            left, still = leaving.result(), confirming.result()
        else:
            left = await self._left(ns, tj_name, across)
        listed = time.monotonic()
        d = self._decide(wl, left.count, left.message)
        if d.kind == "wait":  # old pods left: said first, whatever else is missing
            await self.writes.write_wait(key, wl, d)
            return
        if d.kind != "approve":
            return
        if plan is None:
            await self._say(key, wl, check, tj_name, no_jobset_message(tj_name))
            return
        if not plan.ok:
            self._skip(key, f"TrainJob {tj_name}: {plan.reason}")
            return
        if plan.stale:
            self.writes.stale(key, "A")
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
                if not still:
                    return
                raised_tj = await self.writes.raise_a(key, tj_name, plan.patch, "A")
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
                await self.writes.apply_check(ns, name, check_apply(
                    wl, d.check, READY, ready_message(plan.count), datetime.now(UTC),
                    fenced="no-fence" not in self.faults))
            except errors.KubeConflict:
                self.writes.stale(key, "Ready")
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
                self.writes.later("AdmissionCountRaised", self._record_admission(
                    tj, plan.count, token, d.check if ready else None))

    async def _say(self, key: Key, wl: Obj, check: str, tj_name: str, msg: str) -> None:
        """Keep the check Pending with ``msg`` (written only when it says something else)."""
        said = (check_entry(wl, frozenset({check})) or {}).get("message")
        await self.writes.write_wait(key, wl, Decision("wait", msg, check=check,
                                                       trainjob=tj_name, message=msg,
                                                       write=said != msg))

    async def _left(self, ns: str, tj_name: str, across: bool) -> Left:
        """What is left of the job's previous executions, read live: its alive pods here;
        or, when MultiKueue runs it in worker clusters, each worker not proven free of them
        (:mod:`admission.worker_proof`; without workers, nothing is proven)."""
        if not across:
            return Left(len(alive(await self._list_pods(ns, tj_name))))
        # No workers given proves nothing, as an empty set of them does (Proof.proven).
        proof = (await self.clusters.prove(ns, tj_name) if self.clusters is not None
                 else Proof(()))
        if proof.proven:
            return Left(0)
        return Left(max(1, sum(1 for w in proof.workers if not w.proven)), proof.message())

    async def _list_pods(self, ns: str, tj_name: str) -> list[Obj]:
        """The job's pods, listed live (every phase: :func:`alive` says which count)."""
        pods, _ = await self.kube.list(
            POD, ns, label_selector=names.pods_of(tj_name))
        return pods

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
        tj = await self.reads.trainjob(wl, ns, tj_name, live)
        if tj is None or jobset is None or not jobset_uid or hold.instance(tj):
            return
        others = sum(1 for p in alive(pods) if jobset_uid_of(p) != jobset_uid)
        plan = plan_rebind(tj, admissions_of(tj), jobset, others)
        ctx = {"workload": f"{ns}/{name}", "trainjob": tj_name, "jobset_uid": jobset_uid}
        if not plan.needed or plan.patch is None:
            log.info("workload %s/%s: %s", ns, name, plan.reason, extra=ctx)
            if others:
                self.writes.recheck(key)
            return
        if not self.elector.is_leader() or not await self.reads.workload_still(wl):
            return
        raised_tj = await self.writes.raise_a(key, tj_name, plan.patch, "A for the re-made JobSet")
        if raised_tj is None:
            return
        self.faults.kill_if("kill-after-rebind", "after the rebind raised A", ctx)
        tj = raised_tj
        self.metrics.decisions.labels("rebound").inc()
        log.info("workload %s/%s: %s; raised A to %d", ns, name, plan.reason, plan.count,
                 extra={**ctx, "admission_count": plan.count})
        self.writes.later("ExecutionRebound", self.events.record(
            tj, reason="AdmissionCountRaised", action="RaiseAdmissionCount",
            note=f"admission count A raised to {plan.count}: {plan.reason}, and no pod of "
                 "the previous execution is left",
            key=f"AdmissionCountRaised/{jobset_uid}"))

"""Lift dispatch's scheduling gate from each dispatch pod, so that it starts.

The webhook gates every dispatch pod it admits (:mod:`dispatch_kubeflow.core.scheduling_gate`)
and judges every lift of that gate after the pod is stored. This is the one who asks: the
leader sends the lift for each gated pod it sees, and the webhook (any replica) admits it or
refuses it with what the pod waits for. A refused pod is asked for again when another pod of
its job comes, goes or finishes (what a refusal waits on), and on a backoff meanwhile; a pod
of an execution that is over is refused for as long as it exists, until its Job deletes it.

The lift is a JSON patch that tests the gate is still there: idempotent, so a second replica
or a second try changes nothing, and a 422 (the test failed) means it is lifted already.
Only the leader asks: a standby asking too would be safe, only wasted requests.
"""

from __future__ import annotations

import asyncio
import logging

from admission.faults import Faults
from admission.intake import Feed, Key, Obj, key_of
from admission.lease import LeaderElector
from admission.observability import EventRecorder, Metrics
from admission.workqueue import WorkQueue, serve
from dispatch_kubeflow.core import errors, names
from dispatch_kubeflow.core.execution import is_alive
from dispatch_kubeflow.core.objects import labels_of, meta
from dispatch_kubeflow.core.scheduling_gate import gated, lift_patch
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import POD

log = logging.getLogger(__name__)

JobKey = tuple[str, str]
"""(namespace, TrainJob name): the pods the webhook judges a lift against."""


class GateLift:
    def __init__(self, kube: KubeAPI, elector: LeaderElector, pods: Feed, metrics: Metrics,
                 events: EventRecorder, *, workers: int = 2,
                 faults: Faults | None = None) -> None:
        self.kube = kube
        self.faults = faults or Faults()
        self.events = events
        self.elector = elector
        self.metrics = metrics
        self.workers = workers
        self.queue: WorkQueue[Key] = WorkQueue(base_delay=0.5, max_delay=10.0)
        self._gated: dict[Key, Obj] = {}
        """Gated dispatch pods not being deleted, as last seen."""
        self._by_job: dict[JobKey, set[Key]] = {}
        self._told: dict[Key, str] = {}
        """The last refusal each gated pod was told of (its Event), not to post it again."""
        pods.subscribe(self._on_pod)
        elector.on_change(self._on_leadership)

    @staticmethod
    def _job(pod: Obj) -> JobKey:
        return key_of(pod)[0], str(labels_of(pod).get(names.JOBSET_NAME_LABEL) or "")

    def _on_pod(self, typ: str, pod: Obj) -> None:
        if not labels_of(pod).get(names.JOB_ID_LABEL):
            return
        key, job = key_of(pod), self._job(pod)
        if typ != "DELETED" and gated(pod) and not meta(pod).get("deletionTimestamp"):
            self._gated[key] = pod
            self._by_job.setdefault(job, set()).add(key)
            self.queue.add(key)
            return
        self._gated.pop(key, None)
        self._told.pop(key, None)
        waiting = self._by_job.get(job)
        if waiting is not None:
            waiting.discard(key)
            if not waiting:
                del self._by_job[job]
        if typ == "DELETED" or not is_alive(pod):
            # A pod of the job went or finished: what a refused lift waits for.
            for other in list(self._by_job.get(job) or ()):
                self.queue.add(other)

    def _on_leadership(self, leading: bool) -> None:
        if leading:
            for key in list(self._gated):
                self.queue.add(key)

    async def run(self) -> None:
        await asyncio.gather(*(serve(self.queue, self.lift, what="pod gate lift of")
                               for _ in range(self.workers)))

    async def lift(self, key: Key) -> bool:
        """Ask for the lift of ``key``'s gate; False while the webhook refuses it."""
        pod = self._gated.get(key)
        if pod is None or not self.elector.is_leader() or "no-gate-lift" in self.faults:
            return True
        patch = lift_patch(pod)
        if patch is None:
            return True
        ns, name = key
        try:
            await self.kube.patch(POD, name, patch, ns, kind="json")
        except errors.KubeWebhookDenied as exc:
            if exc.webhook != names.WEBHOOK_NAME:
                raise
            self.metrics.webhook.labels("start-waiting").inc()
            log.info("pod %s/%s: not started yet: %s", ns, name, exc.denial,
                     extra={"namespace": ns, "pod": name})
            # On the pod, once per pod and reason: kubectl describe pod says why it waits.
            if self._told.get(key) == exc.denial:
                return False
            self._told[key] = exc.denial
            await self.events.record(
                {"apiVersion": "v1", "kind": "Pod", **pod}, reason="StartWaiting",
                action="LiftSchedulingGate", note=exc.denial,
                key=f"StartWaiting/{meta(pod).get('uid')}/{exc.denial}")
            return False
        except errors.KubeNotFound:
            return True  # gone: nothing to start
        except errors.KubeInvalid:
            return True  # the patch's test failed: the gate is lifted already
        self.metrics.webhook.labels("started").inc()
        log.debug("pod %s/%s: gate lifted", ns, name, extra={"namespace": ns, "pod": name})
        return True

    def close(self) -> None:
        self.queue.close()

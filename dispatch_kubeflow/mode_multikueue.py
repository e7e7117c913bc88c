"""MultiKueue mode: Kueue mode in a manager cluster whose MultiKueue runs the job in a worker.

Everything Kueue mode does happens in the manager (the backend's own cluster): the TrainJob
is made there closed by dispatch's gate, Kueue's Workload there is what dispatch's check
approves, held and released. What differs:

* the TrainJob is ``spec.managedBy: kueue.x-k8s.io/multikueue``, so Trainer makes nothing
  for it in the manager; MultiKueue copies it into the worker that admits it, once every
  other check on its Workload (dispatch's) is Ready;
* that copy names its runtime by name, so Start puts the job's runtime copy in every worker
  too (copied from the manager's, with no owner: StopJob removes it), and Open puts it back
  in any worker it is missing from before it removes the gate: MultiKueue may pick any
  worker, and a worker without the copy would refuse the job;
* the pods are in the worker the Workload names (``status.clusterName``): Inspect reads
  them there and reports that worker (``Observation.cluster``); with no worker named (not
  dispatched yet, or evicted) it reads every worker's. When the manager's MultiKueue has
  lost that worker (its MultiKueueCluster not ``Active``), Inspect's cause says so; and
  when an eviction can never end (kueue#15380: the manager's TrainJob still says a job
  active and no worker holds a copy to say otherwise), it says that and what to do.

The workers are the backend's (:mod:`dispatch_kubeflow.workers`); StopJob, find and Output
go through them as they go through the backend's own cluster. This is the only module that
reads the settings' ``kueue.multiKueue`` section beside the workers' connections.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.kueue import dispatched_by_multikueue
from dispatch_kubeflow.core.objects import condition, is_true, meta
from dispatch_kubeflow.core.times import parse_time
from dispatch_kubeflow.informer import Informers
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import MULTIKUEUE_CLUSTER, TRAINING_RUNTIME, TRAINJOB
from dispatch_kubeflow.mode_kueue import KueueMode
from dispatch_kubeflow.model import ObjectRef
from dispatch_kubeflow.preflight.mode import Proofs
from dispatch_kubeflow.settings import (
    ClusterSettings,
    KueueSettings,
    MultiKueueSettings,
    Settings,
)
from dispatch_kubeflow.state import dispatched_to, pods_where
from dispatch_kubeflow.workers import Workers

Obj = dict[str, Any]

STUCK_AFTER = timedelta(seconds=30)
"""How long an eviction may keep the job's quota before Inspect calls it stuck. When it
works, MultiKueue copies the stopped worker's status within seconds and Kueue then frees the
quota; the bound also absorbs skew between Kueue's clock (the condition's time) and ours."""


class MultiKueueMode(KueueMode):
    """MultiKueue mode (see the module docstring)."""

    name = "multikueue"

    def __init__(self, settings: Settings, kueue: KueueSettings, multi: MultiKueueSettings,
                 workers: Workers) -> None:
        super().__init__(settings, kueue)
        self.multi = multi
        self.workers = workers

    @classmethod
    def of(cls, settings: Settings, workers: Workers) -> MultiKueueMode | None:
        """MultiKueue mode, when the settings' ``kueue`` has a ``multiKueue`` section."""
        kueue = settings.kueue
        if kueue is None or kueue.multi_kueue is None:
            return None
        return cls(settings, kueue, kueue.multi_kueue, workers)

    # --- start and open -------------------------------------------------------------------
    def trainjob_spec(self) -> dict[str, Any]:
        # Kueue's webhook sets it too when the ClusterQueue lists MultiKueue's check; said
        # here so a TrainJob in a queue without it is never run by Trainer in the manager.
        return {"managedBy": names.MULTIKUEUE_CONTROLLER}

    async def started(self, kube: KubeAPI, trainjob: Mapping[str, Any],
                      shared: Informers | None = None) -> None:
        """Kueue's Workload in the manager, then the runtime copy in every worker."""
        await super().started(kube, trainjob, shared)
        m = meta(trainjob)
        await self.copy_runtime(kube, str(m["namespace"]), str(m["name"]))

    async def open(self, kube: KubeAPI, ref: ObjectRef) -> None:
        # Every worker has the copy before anything may be dispatched (a Start that could
        # not reach a worker is completed here).
        await self.copy_runtime(kube, ref.namespace, ref.name)
        await super().open(kube, ref)

    async def copy_runtime(self, kube: KubeAPI, namespace: str, name: str) -> None:
        """The manager's runtime copy of TrainJob ``name`` in every worker. Idempotent by
        name: a worker's copy of the same request (spec hash) is kept as it is."""
        source = await kube.get_or_none(TRAINING_RUNTIME, name, namespace)
        if source is None:
            raise errors.NotFound(f"TrainingRuntime {namespace}/{name} not found in the "
                                  "manager: the job is being stopped, or was never started")
        body = worker_copy(source)
        digest = (meta(source).get("annotations") or {}).get(names.SPEC_HASH, "")

        async def put(worker: str, wk: KubeAPI) -> None:
            try:
                await wk.create(TRAINING_RUNTIME, body, namespace)
                return
            except errors.KubeConflict:
                pass  # there already: whose?
            there = await wk.get_or_none(TRAINING_RUNTIME, name, namespace)
            if there is None:
                # Deleted between the two (a StopJob): the next Open puts it back.
                raise errors.ConflictError(
                    f"worker {worker}: TrainingRuntime {namespace}/{name} was removed while "
                    "Start copied it (a concurrent StopJob); start the job again")
            theirs = (meta(there).get("annotations") or {}).get(names.SPEC_HASH, "")
            if theirs != digest:
                raise errors.ConflictError(
                    f"worker {worker}: TrainingRuntime {namespace}/{name} is another "
                    f"request's (spec hash {theirs or 'none'}, this one {digest}): left by "
                    "a StopJob that could not reach the worker; StopJob the job again once "
                    "the worker answers")

        await self.workers.each(put)

    # --- what the preflight proves -------------------------------------------------------
    def proofs(self) -> Proofs:
        return replace(super().proofs(), workers=self.workers)

    # --- inspect --------------------------------------------------------------------------
    def pods_in(self, kube: KubeAPI, workload: Mapping[str, Any] | None
                ) -> Mapping[str, KubeAPI]:
        return pods_where(workload, self.workers)

    async def remark(self, kube: KubeAPI, trainjob: Mapping[str, Any] | None,
                     workload: Mapping[str, Any] | None) -> str:
        """Why nothing moves, where Kueue's objects do not say it themselves:

        * the worker the Workload names, when the manager's MultiKueue has lost it: the
          state stays what the Workload says (Kueue evicts the job only after its
          ``workerLostTimeout``). One GET of the worker's MultiKueueCluster in the manager;
          a role that may not read it (an optional permission) loses this remark alone,
          never the Inspect;
        * an eviction that cannot end (:func:`stuck_eviction`, kueue#15380). A GET of the
          TrainJob in each worker, only while the manager's objects look so."""
        cluster = dispatched_to(workload)
        if is_true(workload, "Finished"):
            return ""  # done: nothing for Kueue to dispatch again
        if not cluster:
            if trainjob is None or workload is None:
                return ""
            return await stuck_eviction(trainjob, workload, self.workers,
                                        datetime.now(UTC))
        try:
            mkc = await kube.get(MULTIKUEUE_CLUSTER, cluster)
        except errors.KubeNotFound:
            return f"worker {cluster} has no MultiKueueCluster in the manager"
        except errors.KubeForbidden:
            return ""
        return inactive(cluster, mkc)


def stale_active(trainjob: Mapping[str, Any], workload: Mapping[str, Any],
                 now: datetime) -> int:
    """How many jobs the manager's MultiKueue TrainJob still says active while its Workload,
    evicted at least :data:`STUCK_AFTER` ago, still reserves quota; 0 when that is not so.

    Kueue frees an evicted Workload's quota only once its job is not active (jobframework:
    ``!job.IsActive()``, which for a TrainJob reads ``status.jobsStatus``), and in the
    manager that status is the copy MultiKueue last took from the worker's TrainJob."""
    if not dispatched_by_multikueue(dict(trainjob)):
        return 0
    evicted = condition(dict(workload), "Evicted") or {}
    since = parse_time(evicted.get("lastTransitionTime"))
    if evicted.get("status") != "True" or since is None or now - since < STUCK_AFTER:
        return 0
    if not is_true(dict(workload), "QuotaReserved"):
        return 0
    jobs = (trainjob.get("status") or {}).get("jobsStatus") or []
    return sum(int(j.get("active") or 0) for j in jobs if isinstance(j, Mapping))


async def stuck_eviction(trainjob: Mapping[str, Any], workload: Mapping[str, Any],
                         workers: Mapping[str, KubeAPI], now: datetime) -> str:
    """What Inspect says of an eviction that cannot end, "" when it can: :func:`stale_active`
    holds and no worker has the job's TrainJob, so no status will ever be copied again
    (kueue#15380: after a hold, MultiKueue may delete the worker's copy before its status
    said the job stopped). A worker that holds a copy, or does not answer, may still send
    one: then nothing is said. The state table's state stays (Kueue's), the fix is the
    user's: StopJob, then a later attempt."""
    active = stale_active(trainjob, workload, now)
    if not active:
        return ""
    m = meta(dict(trainjob))
    for wk in workers.values():
        try:
            if await wk.get_or_none(TRAINJOB, m["name"], m["namespace"]) is not None:
                return ""
        except errors.KubeError:
            return ""  # unknown: it may hold a copy
    return ("Kueue keeps the job's quota, evicted, until the manager's TrainJob says its "
            f"job stopped, but that status is MultiKueue's last copy from a worker ({active} "
            "active) and no worker holds the job any more, so it never will (kueue#15380): "
            "StopJob the job and start a later attempt")


def worker_settings(settings: Settings) -> Mapping[str, ClusterSettings]:
    """How to reach each worker, by MultiKueueCluster name (none outside MultiKueue mode)."""
    kueue = settings.kueue
    return {} if kueue is None or kueue.multi_kueue is None else kueue.multi_kueue.workers


def inactive(cluster: str, mkc: Mapping[str, Any]) -> str:
    """What Inspect says of worker ``cluster`` whose MultiKueueCluster is ``mkc``: "" when
    Kueue has it Active, else that it is inactive and why, as Kueue says it."""
    cond = condition(mkc, "Active") or {}
    if cond.get("status") == "True":
        return ""
    why = ": ".join(str(cond[k]) for k in ("reason", "message") if cond.get(k)) or (
        f"Active is {cond['status']}" if cond.get("status") else "no Active condition")
    return (f"worker {cluster} is inactive in the manager's MultiKueue ({why}): Kueue "
            "evicts the job from it after its workerLostTimeout")


def worker_copy(source: Mapping[str, Any]) -> Obj:
    """The manager's runtime copy as a worker's: its name, labels, annotations and spec,
    with no owner (the worker's TrainJob is MultiKueue's, made later)."""
    m = meta(source)
    return {
        "apiVersion": source.get("apiVersion"),
        "kind": source.get("kind"),
        "metadata": {"name": m["name"], "namespace": m["namespace"],
                     "labels": dict(m.get("labels") or {}),
                     "annotations": dict(m.get("annotations") or {})},
        "spec": source.get("spec") or {},
    }

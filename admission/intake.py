"""What the watches bring in: in-memory indexes and change feeds, filled by kopf's handlers.

kopf (its own client: list, watch, re-list after 410) calls, for each watch event, first the
``@kopf.index`` functions below, whose results it keeps as in-memory indexes, then the
``@kopf.on.event`` handlers, which pass the event to a :class:`Feed` so the components
(readmission, Active condition, hold expiry) learn what changed. Registration is in
:mod:`admission.operator`; this module is plain functions and views, testable without kopf.

:class:`Caches` reads the indexes through ``Mapping[key, Collection[value]]``, which is what a
``kopf.Index`` is (a key maps to the values of every object that produced it), so tests use
plain dicts of lists.

A kopf re-list after a watch gap brings the objects that exist but no DELETED event for those
that went meanwhile, so an index may keep a vanished object until the next restart, and any
index lags the server. A decision may read the Workload and the TrainJob from here because
each write it makes from them carries that object's resourceVersion as its precondition (a
stale version answers 409 and the key is judged again from live reads); the job's pods, what
an index may still be wrong about, are always listed live (see :mod:`admission.readmission`
and docs/design.md). A 404 on a write drops the key.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.execution import is_alive
from dispatch_kubeflow.core.kueue import checks_listed, is_our_check, trainjob_of
from dispatch_kubeflow.core.objects import labels_of, meta
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import (
    ADMISSION_CHECK,
    CLUSTER_QUEUE,
    JOBSET,
    POD,
    TRAINJOB,
    WORKLOAD,
)

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str]
"""(namespace, name); namespace is "" for cluster-scoped objects."""
Listener = Callable[[str, Obj], None]
"""Called with (event type, object). The type is ADDED, MODIFIED, DELETED, or LISTED for an
object seen while kopf (re-)lists the resource."""
LISTED = "LISTED"


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


# --- what is kept of a Workload ---------------------------------------------------------
# A shared cluster's Workloads are mostly other teams' (batch Jobs, JobSets, bare Workloads):
# the watch selects Kueue's job Workloads (KUEUE_JOB_UID_LABEL, on every Workload Kueue makes
# for a job), the index keeps only those of TrainJobs, and of those only what decisions
# read. 10,000 foreign Workloads of 1.5 KB each took the controller from 135 MB to 226 MB
# when every Workload was kept whole (issue 28).
_WORKLOAD_META = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp",
                  "deletionTimestamp", "ownerReferences", "labels")
"""Metadata decisions read: the key, the fences' resourceVersion, the admission token's UID,
which TrainJob owns it, whether it is being deleted, which is the newest."""
_WORKLOAD_SPEC = ("active", "queueName")
_WORKLOAD_STATUS = ("conditions", "admissionChecks", "schedulingStats")
"""QuotaReserved, Admitted, Evicted; our check's entry; evictions (the admission token)."""


def is_trainjob_workload(wl: Mapping[str, Any]) -> bool:
    """Whether a Workload is a TrainJob's (a dispatch job's Workload always is)."""
    return trainjob_of(wl) is not None


def trim_workload(wl: Mapping[str, Any]) -> Obj:
    """The Workload as decisions read it (:mod:`admission.decision`, :mod:`admission.reads`,
    the hold rules of core.hold, the admission token and hold expiry): without its pod
    sets, which are most of its size. Annotations: only dispatch's (the hold's)."""
    m = meta(wl)
    metadata = {k: m[k] for k in _WORKLOAD_META if k in m}
    ours = {k: v for k, v in (m.get("annotations") or {}).items()
            if k.startswith(names.DOMAIN + "/")}
    if ours:
        metadata["annotations"] = ours
    spec = wl.get("spec") or {}
    status = wl.get("status") or {}
    kept_status: Obj = {k: status[k] for k in _WORKLOAD_STATUS if k in status}
    admission = status.get("admission")
    if isinstance(admission, Mapping):  # the ClusterQueue, not the pod set assignments
        kept_status["admission"] = {"clusterQueue": admission.get("clusterQueue")}
    return {"apiVersion": wl.get("apiVersion"), "kind": wl.get("kind"), "metadata": metadata,
            "spec": {k: spec[k] for k in _WORKLOAD_SPEC if k in spec}, "status": kept_status}


# --- index functions: object -> {key: value}; an empty dict takes the object out ----------
def index_workload(wl: Mapping[str, Any]) -> dict[Key, Obj]:
    """TrainJobs' Workloads by (namespace, name), trimmed to what decisions read."""
    return {key_of(wl): trim_workload(wl)} if is_trainjob_workload(wl) else {}


def index_workload_by_job(wl: Mapping[str, Any]) -> dict[Key, str]:
    """Workload names by (namespace, TrainJob): a pod's deletion re-queues its Workload."""
    tj = trainjob_of(wl)
    return {(key_of(wl)[0], tj): key_of(wl)[1]} if tj else {}


def index_trainjob(tj: Mapping[str, Any]) -> dict[Key, Obj]:
    """dispatch's TrainJobs (the watch selects the job-id label) by (namespace, name)."""
    return {key_of(tj): dict(tj)}


def index_pod_by_job(pod: Mapping[str, Any]) -> dict[Key, str]:
    """Alive pod names by (namespace, jobset-name): the pods of a job's executions that may
    still run. A finished pod (Succeeded, Failed) leaves the index: a rank that ended before
    a hold is kept by its suspended Job, and must not hold readmission back forever."""
    job = labels_of(pod).get(names.JOBSET_NAME_LABEL)
    return {(key_of(pod)[0], str(job)): key_of(pod)[1]} if job and is_alive(pod) else {}


def index_jobset(js: Mapping[str, Any]) -> dict[Key, str]:
    """dispatch's JobSets (the watch selects the job-id label): UID by (namespace, name),
    the JobSet an approval names (core.execution)."""
    uid = str(meta(js).get("uid") or "")
    return {key_of(js): uid} if uid else {}


def index_admission_check(ac: Mapping[str, Any]) -> dict[str, Obj]:
    """Our AdmissionChecks (controllerName) by name."""
    return {key_of(ac)[1]: dict(ac)} if is_our_check(ac) else {}


def index_cluster_queue(cq: Mapping[str, Any]) -> dict[str, frozenset[str]]:
    """The checks each ClusterQueue lists, by ClusterQueue name."""
    return {key_of(cq)[1]: checks_listed(cq)}


class Feed:
    """Change notifications for one resource, from its ``@kopf.on.event`` handler."""

    def __init__(self, plural: str) -> None:
        self.plural = plural
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def notify(self, typ: str | None, obj: Obj) -> None:
        """kopf's type None (an object of a listing) becomes LISTED."""
        for listener in self._listeners:
            try:
                listener(typ or LISTED, obj)
            except Exception:  # a listener bug must not stop kopf's processing of the event
                log.exception("listener of %s failed", self.plural)


def _last(values: Collection[Any] | None) -> Any:
    """The newest value under a key (a name reused by a new object lands last)."""
    return list(values)[-1] if values else None


class Caches:
    """Read-only views over the indexes; bound to kopf's indexes when the operator starts."""

    INDEXES = ("workloads", "workloads_by_job", "trainjobs", "pods_by_job", "jobsets",
               "admission_checks", "cluster_queues")

    def __init__(self) -> None:
        self._workloads: Mapping[Key, Collection[Obj]] = {}
        self._workloads_by_job: Mapping[Key, Collection[str]] = {}
        self._trainjobs: Mapping[Key, Collection[Obj]] = {}
        self._pods_by_job: Mapping[Key, Collection[str]] = {}
        self._jobsets: Mapping[Key, Collection[str]] = {}
        self._admission_checks: Mapping[str, Collection[Obj]] = {}
        self._cluster_queues: Mapping[str, Collection[frozenset[str]]] = {}

    def bind(self, indexes: Mapping[str, Any]) -> None:
        """Take the indexes by name (kopf passes them to every handler as keyword args)."""
        missing = [n for n in self.INDEXES if n not in indexes]
        if missing:
            raise KeyError(f"indexes not registered: {', '.join(missing)}")
        self._workloads = indexes["workloads"]
        self._workloads_by_job = indexes["workloads_by_job"]
        self._trainjobs = indexes["trainjobs"]
        self._pods_by_job = indexes["pods_by_job"]
        self._jobsets = indexes["jobsets"]
        self._admission_checks = indexes["admission_checks"]
        self._cluster_queues = indexes["cluster_queues"]

    # --- reads --------------------------------------------------------------------------
    def workload(self, namespace: str, name: str) -> Obj | None:
        wl: Obj | None = _last(self._workloads.get((namespace, name)))
        return wl

    def workloads(self) -> list[Obj]:
        return [wl for key in list(self._workloads) if (wl := self.workload(*key)) is not None]

    def workloads_of_job(self, namespace: str, trainjob: str) -> set[str]:
        return set(self._workloads_by_job.get((namespace, trainjob)) or ())

    def trainjob(self, namespace: str, name: str) -> Obj | None:
        tj: Obj | None = _last(self._trainjobs.get((namespace, name)))
        return tj

    def pods_left(self, namespace: str, job: str) -> int:
        """The job's alive pods, as indexed."""
        return len(set(self._pods_by_job.get((namespace, job)) or ()))

    def jobset_uid(self, namespace: str, name: str) -> str | None:
        """The UID of the JobSet of that name, as indexed (None: none indexed)."""
        uid: str | None = _last(self._jobsets.get((namespace, name)))
        return uid

    def admission_checks(self) -> list[Obj]:
        """Our AdmissionChecks."""
        return [ac for name in list(self._admission_checks)
                if (ac := _last(self._admission_checks.get(name))) is not None]

    def check_names(self) -> frozenset[str]:
        return frozenset(str(ac["metadata"]["name"]) for ac in self.admission_checks())

    def cq_checks(self) -> dict[str, frozenset[str]]:
        """ClusterQueue name -> the checks it lists."""
        out: dict[str, frozenset[str]] = {}
        for name in list(self._cluster_queues):
            listed = _last(self._cluster_queues.get(name))
            if listed is not None:
                out[name] = listed
        return out

    # --- warm-up --------------------------------------------------------------------------
    def missing(self, live: Mapping[str, Iterable[Obj]]) -> dict[str, set[Key]]:
        """What a live list has that the indexes lack, by resource plural.

        ``live`` maps ``workloads``, ``trainjobs``, ``jobsets``, ``pods``,
        ``admissionchecks``, ``clusterqueues`` to the objects the API server lists now
        (TrainJobs and JobSets: those with the job-id label; pods: those with the
        jobset-name label, of which only alive ones are indexed).
        """
        out: dict[str, set[Key]] = {}
        for wl in live.get(WORKLOAD.plural, ()):
            if is_trainjob_workload(wl) and key_of(wl) not in self._workloads:
                out.setdefault(WORKLOAD.plural, set()).add(key_of(wl))
        for tj in live.get(TRAINJOB.plural, ()):
            if key_of(tj) not in self._trainjobs:
                out.setdefault(TRAINJOB.plural, set()).add(key_of(tj))
        for js in live.get(JOBSET.plural, ()):
            if key_of(js) not in self._jobsets:
                out.setdefault(JOBSET.plural, set()).add(key_of(js))
        for pod in live.get(POD.plural, ()):
            for job_key, name in index_pod_by_job(pod).items():
                if name not in (self._pods_by_job.get(job_key) or ()):
                    out.setdefault(POD.plural, set()).add(key_of(pod))
        for ac in live.get(ADMISSION_CHECK.plural, ()):
            if is_our_check(ac) and key_of(ac)[1] not in self._admission_checks:
                out.setdefault(ADMISSION_CHECK.plural, set()).add(key_of(ac))
        for cq in live.get(CLUSTER_QUEUE.plural, ()):
            if key_of(cq)[1] not in self._cluster_queues:
                out.setdefault(CLUSTER_QUEUE.plural, set()).add(key_of(cq))
        return out


async def list_live(kube: KubeAPI) -> dict[str, list[Obj]]:
    """What the indexes should hold, listed through ``Kube`` (for the warm-up check)."""
    out: dict[str, list[Obj]] = {}
    for res, selector in ((WORKLOAD, names.KUEUE_JOB_UID_LABEL), (TRAINJOB, names.JOB_ID_LABEL),
                          (JOBSET, names.JOB_ID_LABEL), (POD, names.JOBSET_NAME_LABEL),
                          (ADMISSION_CHECK, None), (CLUSTER_QUEUE, None)):
        out[res.plural], _ = await kube.list(res, label_selector=selector)
    return out

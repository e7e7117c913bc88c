"""Find: what exists of a job, orphans included.

``find(job)`` lists what exists of a job in the namespace: TrainJobs, runtime copies,
JobSets, Jobs and pods by the ``dispatch.phpboyscout.uk/job-id`` label (the runtime copy
puts it on the JobSet's own metadata and on the Job and pod templates, and Trainer copies the
JobSet template's labels onto the JobSet), and Workloads (Kueue mode: the mode names the
kinds) by ``kueue.x-k8s.io/job-uid``, by an ownerReference to one of the job's TrainJobs, or
by the job-id label on their pod sets' templates (an orphaned Workload has neither owner nor
a TrainJob to match, and Kueue copies none of the job's labels onto it: Workloads are the
one kind listed whole). StopJob (:mod:`dispatch_kubeflow.stop`) reads the same kinds by the
same rules, more cheaply.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.objects import labels_of, meta
from dispatch_kubeflow.kube import KubeAPI, Resource
from dispatch_kubeflow.kube.resources import (
    JOB,
    JOBSET,
    POD,
    TRAINING_RUNTIME,
    TRAINJOB,
    WORKLOAD,
)
from dispatch_kubeflow.model import JobID, ObjectRef

log = logging.getLogger(__name__)

KINDS: tuple[Resource, ...] = (TRAINJOB, WORKLOAD, JOBSET, JOB, TRAINING_RUNTIME, POD)
"""Every kind a job may have, owners first. A mode without Workloads leaves WORKLOAD out."""

MADE_BY: Mapping[Resource, tuple[Resource, ...]] = {
    JOBSET: (TRAINJOB,),  # Trainer makes a TrainJob's JobSet
    WORKLOAD: (TRAINJOB,),  # Kueue makes a TrainJob's Workload
    JOB: (JOBSET,),  # the JobSet controller makes its Jobs
    POD: (JOB,),  # the Job controller makes its pods
}
"""Which kinds' objects make objects of a kind (a controller acting on them). A kind not
named here (TrainJobs, runtime copies) is made only by Start, never by the cluster."""


@dataclass(frozen=True, slots=True)
class Found:
    """One object of the job, as listed."""

    res: Resource
    obj: dict[str, Any]

    @property
    def uid(self) -> str:
        return str(meta(self.obj).get("uid", ""))

    @property
    def ref(self) -> ObjectRef:
        m = meta(self.obj)
        return ObjectRef(namespace=str(m.get("namespace", "")), name=str(m["name"]),
                         kind=self.res.kind, api_version=self.res.api_version, uid=self.uid)


@dataclass
class Findings:
    found: list[Found]
    unreadable: list[Resource]
    """Kinds whose list failed (not counting a kind the cluster does not serve)."""
    versions: dict[Resource, str] = field(default_factory=dict)
    """The resourceVersion of each kind's list (a watch from it misses nothing)."""
    failures: dict[Resource, errors.KubeError] = field(default_factory=dict)
    """Why each unreadable kind could not be listed."""


def selector(res: Resource, job: JobID) -> str | None:
    """The label selector ``find`` lists ``res`` with (None: the whole namespace)."""
    # Workloads carry Kueue's labels only (the job's UID): list them all, match by owner.
    return None if res is WORKLOAD else f"{names.JOB_ID_LABEL}={job}"


def uid_selector(uids: Iterable[str]) -> str:
    """The Workloads of the TrainJobs with these UIDs (Kueue labels each with its job's)."""
    return f"{names.KUEUE_JOB_UID_LABEL} in ({','.join(sorted(uids))})"


def trainjob_name_pattern(job: JobID) -> re.Pattern[str]:
    return re.compile(rf"^{re.escape(names.trainjob_name(job, 0)[:-1])}\d+$")


WORKLOAD_READS = ("spec.podSets[].template.metadata.labels",)
"""What :func:`belongs` reads of a Workload besides its metadata: a cache of Workloads that
StopJob scans for orphans keeps it."""


def belongs(res: Resource, obj: Mapping[str, Any], job: JobID, owners: set[str],
            pattern: re.Pattern[str]) -> bool:
    """Whether ``obj`` (of kind ``res``) is the job's: its job-id label, its name (a JobSet),
    Kueue's job-uid label or an owner among ``owners`` (TrainJob UIDs), its pod sets' job-id
    label (a Workload), or an owner named like one of the job's TrainJobs."""
    if labels_of(obj).get(names.JOB_ID_LABEL) == str(job):
        return True
    if res is JOBSET and pattern.match(str(meta(obj).get("name", ""))):
        return True
    if res is WORKLOAD and (labels_of(obj).get(names.KUEUE_JOB_UID_LABEL) in owners
                            or _workload_of_job(obj, job)):
        return True
    for owner in meta(obj).get("ownerReferences") or []:
        if owner.get("uid") in owners:
            return True
        if owner.get("kind") == "TrainJob" and pattern.match(str(owner.get("name", ""))):
            return True
    return False


def _workload_of_job(workload: Mapping[str, Any], job: JobID) -> bool:
    """A Workload whose pod sets carry the job's label (copied by Kueue from the runtime
    copy's pod template): found even when its TrainJob is gone and it lost its owner."""
    for pod_set in (workload.get("spec") or {}).get("podSets") or []:
        if labels_of(pod_set.get("template")).get(names.JOB_ID_LABEL) == str(job):
            return True
    return False


async def find(kube: KubeAPI, namespace: str, job: JobID, kinds: Sequence[Resource], *,
               known_uids: Iterable[str] = ()) -> Findings:
    """Everything of ``job`` of the ``kinds`` in ``namespace``; see the module docstring."""
    pattern = trainjob_name_pattern(job)
    versions: dict[Resource, str] = {}
    failures: dict[Resource, errors.KubeError] = {}

    async def one(res: Resource) -> tuple[Resource, list[dict[str, Any]] | None]:
        try:
            items, rv = await kube.list(res, namespace, label_selector=selector(res, job))
        except errors.KubeNotFound:
            return res, []  # the cluster does not serve this kind: nothing of it exists
        except errors.KubeError as exc:
            log.warning("find %s: cannot list %s: %s", job, res.plural, exc)
            failures[res] = exc
            return res, None
        versions[res] = rv
        return res, items

    listed = await asyncio.gather(*(one(k) for k in kinds))
    owners = set(known_uids)
    for res, items in listed:
        if res is TRAINJOB and items:
            owners.update(str(meta(o).get("uid")) for o in items)
    found: list[Found] = []
    unreadable: list[Resource] = []
    for res, items in listed:
        if items is None:
            unreadable.append(res)
            continue
        found += [Found(res, o) for o in items if belongs(res, o, job, owners, pattern)]
    return Findings(found, unreadable, versions, failures)


async def find_refs(kube: KubeAPI, namespace: str, job: JobID,
                    kinds: Sequence[Resource]) -> tuple[ObjectRef, ...]:
    """Every object of the job that exists; a KubeError when a kind could not be listed."""
    found = await find(kube, namespace, job, kinds)
    if found.unreadable:
        # The first failure's status and reason carry over, so a caller can tell an
        # unreachable server from a refusal.
        first = found.failures.get(found.unreadable[0])
        message = ("find: cannot list " + ", ".join(r.plural for r in found.unreadable)
                   + (f": {first}" if first else ""))
        if isinstance(first, errors.KubeNoAnswer):
            # No answer keeps its class: it says whether asking again may help, and the
            # CLI tells an unreachable cluster by it.
            raise first.restated(message) from first
        raise errors.KubeError(
            message, status=first.status if first else 0,
            reason=first.reason if first else "", body=first.body if first else None
        ) from first
    return tuple(f.ref for f in found.found)

"""StopJob and find: delete everything of a job, and prove it is gone.

``find(job)`` lists what exists of a job in the namespace, orphans included: TrainJobs,
runtime copies, JobSets, Jobs and pods by the ``dispatch.phpboyscout.uk/job-id`` label
(the runtime copy puts it on the JobSet, Job and pod templates), JobSets also by name
(a JobSet is named as its TrainJob), and Workloads by ``kueue.x-k8s.io/job-uid``, by
an ownerReference to one of the job's TrainJobs, or by the job-id label on their pod
sets' templates (an orphaned Workload has neither owner nor a TrainJob to match).

``stop_job`` records the reason as an Event on each TrainJob, deletes the TrainJobs with
background propagation (so the TrainJob is gone at once and the garbage collector removes
the rest), then finds what is left and deletes each object under its own UID
precondition, pass after pass, until nothing remains or ``timeouts.stopJob`` passes.
Between passes it does not poll: it watches each kind from the resourceVersion of the
pass's list until every object the pass found is deleted (or the time is up), then lists
again to catch anything created meanwhile.
Foreground deletion is not used: it keeps the TrainJob until every dependant is gone and
a stuck pod would then hide the whole job behind a deletionTimestamp.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.objects import labels_of, meta
from dispatch_kubeflow.core.times import format_microtime
from dispatch_kubeflow.kube import Kube, Resource
from dispatch_kubeflow.kube.resources import (
    EVENT,
    JOB,
    JOBSET,
    POD,
    TRAINING_RUNTIME,
    TRAINJOB,
    WORKLOAD,
)
from dispatch_kubeflow.model import JobID, ObjectRef, StopReport

log = logging.getLogger(__name__)

# The order objects are deleted in a pass: owners first, so the GC does most of the work.
KINDS: tuple[Resource, ...] = (TRAINJOB, WORKLOAD, JOBSET, JOB, TRAINING_RUNTIME, POD)
_PASS_WAIT = 1.0
REPORTING_CONTROLLER = f"{names.DOMAIN}/kubeflow"


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


def _selector(res: Resource, job: JobID) -> str | None:
    """The label selector ``find`` lists ``res`` with (None: the whole namespace)."""
    # JobSets and Workloads may lack the label: list them all and match by name/owner.
    return None if res in (JOBSET, WORKLOAD) else f"{names.JOB_ID_LABEL}={job}"


def trainjob_name_pattern(job: JobID) -> re.Pattern[str]:
    return re.compile(rf"^{re.escape(names.trainjob_name(job, 0)[:-1])}\d+$")


def _belongs(res: Resource, obj: Mapping[str, Any], job: JobID, owners: set[str],
             pattern: re.Pattern[str]) -> bool:
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


async def find(kube: Kube, namespace: str, job: JobID, *, kueue: bool,
               known_uids: Iterable[str] = ()) -> Findings:
    """Everything of ``job`` in ``namespace``; see the module docstring."""
    pattern = trainjob_name_pattern(job)
    kinds = [k for k in KINDS if kueue or k is not WORKLOAD]
    versions: dict[Resource, str] = {}
    failures: dict[Resource, errors.KubeError] = {}

    async def one(res: Resource) -> tuple[Resource, list[dict[str, Any]] | None]:
        try:
            items, rv = await kube.list(res, namespace, label_selector=_selector(res, job))
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
        found += [Found(res, o) for o in items if _belongs(res, o, job, owners, pattern)]
    return Findings(found, unreadable, versions, failures)


async def record_reason(kube: Kube, trainjob: Mapping[str, Any], reason: str) -> None:
    """An Event on the TrainJob saying why it is stopped (best effort)."""
    m = meta(trainjob)
    now = format_microtime(datetime.now(UTC))
    body = {
        "metadata": {"generateName": f"{m['name']}.stop-", "namespace": m["namespace"]},
        "eventTime": now,
        "type": "Normal",
        "reason": "StopJob",
        "action": "Stop",
        "note": reason[:1024],
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": f"{REPORTING_CONTROLLER}-{socket.gethostname()}"[:128],
        "regarding": {"apiVersion": f"{names.TRAINER_GROUP}/{names.TRAINER_VERSION}",
                      "kind": "TrainJob", "name": m["name"], "namespace": m["namespace"],
                      "uid": m.get("uid")},
    }
    try:
        await kube.create(EVENT, body, m["namespace"])
    except errors.KubeError as exc:
        log.warning("StopJob: could not record the reason on TrainJob %s: %s", m["name"], exc)


async def _delete(kube: Kube, f: Found) -> None:
    m = meta(f.obj)
    if m.get("deletionTimestamp") and f.res is not POD:
        return  # already going; deleting again changes nothing
    # A conflict means the UID differs: a newer object of that name, judged next pass.
    with contextlib.suppress(errors.KubeConflict):
        await kube.delete(f.res, str(m["name"]), str(m.get("namespace") or ""),
                          uid=f.uid or None, propagation="Background")


async def stop_job(kube: Kube, namespace: str, job: JobID, reason: str, *, kueue: bool,
                   limit: timedelta) -> StopReport:
    """Delete everything of ``job``; see the module docstring."""
    loop = asyncio.get_running_loop()
    until = loop.time() + limit.total_seconds()
    seen: dict[str, Found] = {}
    first = await find(kube, namespace, job, kueue=kueue)
    # Everything there at the start is reported, whoever removes it (we or the garbage
    # collector): the report does not depend on which of the two got there first.
    for f in first.found:
        seen[f.uid] = f
    trainjobs = [f for f in first.found if f.res is TRAINJOB]
    await asyncio.gather(*(record_reason(kube, f.obj, reason) for f in trainjobs))
    for f in trainjobs:
        await _delete(kube, f)
    findings = first
    while True:
        findings = await find(kube, namespace, job, kueue=kueue, known_uids=seen)
        for f in findings.found:
            seen.setdefault(f.uid, f)
        if not findings.found and not findings.unreadable:
            break
        if loop.time() >= until:
            break
        for f in findings.found:
            await _delete(kube, f)
        await wait_gone(kube, namespace, job, findings, max(0.0, until - loop.time()))
    return _report(seen, findings)


async def wait_gone(kube: Kube, namespace: str, job: JobID, findings: Findings,
                    seconds: float) -> None:
    """Watch until every object ``findings`` found is deleted, or ``seconds`` pass.

    Each kind is watched from its list's resourceVersion, so no deletion is missed. When a
    kind could not be listed (or its watch expired) there is nothing to watch from: wait
    a moment and let the next pass list again.
    """
    if findings.unreadable:
        await asyncio.sleep(min(_PASS_WAIT, seconds))
        return
    by_kind: dict[Resource, set[str]] = {}
    for f in findings.found:
        by_kind.setdefault(f.res, set()).add(f.uid)

    async def gone(res: Resource, uids: set[str]) -> None:
        rv = findings.versions.get(res, "")
        while uids:
            try:
                async for ev in kube.watch(res, namespace, resource_version=rv,
                                           label_selector=_selector(res, job),
                                           timeout_seconds=60):
                    rv = str(meta(ev.object).get("resourceVersion", rv))
                    if ev.type == "DELETED":
                        uids.discard(str(meta(ev.object).get("uid", "")))
                        if not uids:
                            return
            except errors.KubeGone:
                return  # expired: the next pass lists again
            except errors.KubeError as exc:
                log.warning("StopJob %s: watch of %s failed: %s", job, res.plural, exc)
                await asyncio.sleep(_PASS_WAIT)
                return

    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await asyncio.gather(*(gone(res, uids) for res, uids in by_kind.items()))


def _report(seen: Mapping[str, Found], last: Findings) -> StopReport:
    present = {f.uid for f in last.found}
    pods_left = [f for f in last.found if f.res is POD]
    unreadable = set(last.unreadable)
    stopped: list[ObjectRef] = []
    alive: list[ObjectRef] = []
    unproven: list[ObjectRef] = []
    for uid, f in seen.items():
        if uid in present or (f.res is not POD and _has_pods_beneath(f, pods_left)):
            alive.append(f.ref)
        elif f.res in unreadable or (f.res is not POD and POD in unreadable):
            unproven.append(f.ref)
        else:
            stopped.append(f.ref)
    return StopReport(tuple(sorted(stopped, key=_key)), tuple(sorted(alive, key=_key)),
                      tuple(sorted(unproven, key=_key)))


def _has_pods_beneath(f: Found, pods: list[Found]) -> bool:
    if f.res is TRAINING_RUNTIME:
        return False
    sub = labels_of(f.obj).get(names.SUBMISSION_LABEL)
    name = str(meta(f.obj).get("name", ""))
    for pod in pods:
        pl = labels_of(pod.obj)
        if pl.get(names.JOBSET_NAME_LABEL) == name or (
                sub and pl.get(names.SUBMISSION_LABEL) == sub):
            return True
    return False


def _key(ref: ObjectRef) -> tuple[str, str]:
    return ref.kind, ref.name


"""StopJob: delete everything of a job, and prove it is gone.

What belongs to a job is :mod:`dispatch_kubeflow.find`'s to say, among the kinds the mode
names (Kueue mode: Workloads too).

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
import socket
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.objects import labels_of, meta
from dispatch_kubeflow.core.times import format_microtime
from dispatch_kubeflow.find import Findings, Found, find, selector
from dispatch_kubeflow.kube import KubeAPI, Resource
from dispatch_kubeflow.kube.resources import EVENT, POD, TRAINING_RUNTIME, TRAINJOB
from dispatch_kubeflow.model import JobID, ObjectRef, StopReport

log = logging.getLogger(__name__)

_PASS_WAIT = 1.0
REPORTING_CONTROLLER = f"{names.DOMAIN}/kubeflow"


async def record_reason(kube: KubeAPI, trainjob: Mapping[str, Any], reason: str) -> None:
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


async def _delete(kube: KubeAPI, f: Found) -> None:
    m = meta(f.obj)
    if m.get("deletionTimestamp") and f.res is not POD:
        return  # already going; deleting again changes nothing
    # A conflict means the UID differs: a newer object of that name, judged next pass.
    with contextlib.suppress(errors.KubeConflict):
        await kube.delete(f.res, str(m["name"]), str(m.get("namespace") or ""),
                          uid=f.uid or None, propagation="Background")


async def stop_job(kube: KubeAPI, namespace: str, job: JobID, reason: str, *,
                   kinds: Sequence[Resource], limit: timedelta) -> StopReport:
    """Delete everything of ``job`` of the ``kinds`` (the mode's); see the module docstring."""
    loop = asyncio.get_running_loop()
    until = loop.time() + limit.total_seconds()
    seen: dict[str, Found] = {}
    first = await find(kube, namespace, job, kinds)
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
        findings = await find(kube, namespace, job, kinds, known_uids=seen)
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


async def wait_gone(kube: KubeAPI, namespace: str, job: JobID, findings: Findings,
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
                                           label_selector=selector(res, job),
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


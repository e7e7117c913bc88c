"""Listing: the dispatch jobs of a namespace, each with what Inspect would say of it.

A dispatch job's submission is one TrainJob (``dj-<job id>-s<submission>``) labelled with
``dispatch.phpboyscout.uk/job-id``, ``/submission`` and ``/attempt``. :func:`list_jobs`
lists the namespace once per kind — the TrainJobs by that label, the pods by
``jobset.sigs.k8s.io/jobset-name``, and in Kueue mode the Workloads by
``kueue.x-k8s.io/job-uid`` — and applies Inspect's table
(`dispatch_kubeflow.state.observe_listed`) to each TrainJob, so listing costs three
requests however many jobs there are. `watch_jobs` keeps the same three lists
current with one watch each and yields a new listing whenever one changes.

Listing only reads. In plain mode `Backend.wait` releases an expired hold on the
way; a listing does not, so it may show such a job ``held`` until the next Inspect.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.objects import labels_of, meta
from dispatch_kubeflow.core.times import parse_time
from dispatch_kubeflow.kube import KubeAPI, Resource
from dispatch_kubeflow.kube.resources import POD, TRAINJOB
from dispatch_kubeflow.model import JobID, ObjectRef, Observation
from dispatch_kubeflow.state import observe_listed
from dispatch_kubeflow.waits import Owned
from dispatch_kubeflow.workers import NONE, Workers, named

log = logging.getLogger(__name__)
Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class JobInfo:
    """One submission of a dispatch job, as listed: who it is, and its state.

    What [Backend.jobs][dispatch_kubeflow.Backend.jobs] lists.

    Attributes:
        job: The job's id.
        submission: The submission (the TrainJob's).
        attempt: The attempt the TrainJob was started for.
        observation: What [Backend.inspect][dispatch_kubeflow.Backend.inspect] would return.
        ref: The TrainJob's reference (what Start returned).
        created: The TrainJob's creation time (None when the server gave none).
    """

    job: JobID
    submission: int
    attempt: int
    observation: Observation
    ref: ObjectRef
    created: datetime | None = None


Listed = Sequence[tuple[Resource, str]]
"""Kinds listed beyond TrainJobs and pods, each with the label that must be present: the
mode's (Kueue mode: Workloads, by ``kueue.x-k8s.io/job-uid``)."""


def _selectors(workloads: Listed) -> list[tuple[Resource, str]]:
    return [(TRAINJOB, names.JOB_ID_LABEL), (POD, names.JOBSET_NAME_LABEL), *workloads]


def _count(raw: str | None) -> int:
    return int(raw) if raw and raw.isdigit() else 0


def listing(trainjobs: Iterable[Obj], workloads: Iterable[Obj],
            pods: Iterable[Obj], worker_pods: Mapping[str, Iterable[Obj]] | None = None
            ) -> list[JobInfo]:
    """The jobs among ``trainjobs``, each observed with its Workload and pods (pure);
    ``worker_pods``: each MultiKueue worker's pods (see `dispatch_kubeflow.state.observe_listed`).

    TrainJobs whose job-id label is not a job id are left out (they are not dispatch's).
    Sorted by job id (that is, by creation time), then submission.
    """
    trainjobs = list(trainjobs)
    observed = observe_listed(trainjobs, workloads, pods, worker_pods)
    out: list[JobInfo] = []
    for tj in trainjobs:
        m, labels = meta(tj), labels_of(tj)
        try:
            job = JobID(labels.get(names.JOB_ID_LABEL, ""))
        except errors.SpecError:
            log.debug("TrainJob %s: job-id label is not a job id; not listed", m.get("name"))
            continue
        name = str(m.get("name", ""))
        ref = ObjectRef(namespace=str(m.get("namespace", "")), name=name, kind="TrainJob",
                        api_version=TRAINJOB.api_version, uid=str(m.get("uid", "")))
        out.append(JobInfo(job, _count(labels.get(names.SUBMISSION_LABEL)),
                           _count(labels.get(names.ATTEMPT_LABEL)), observed[name], ref,
                           parse_time(m.get("creationTimestamp"))))
    return sorted(out, key=lambda j: (j.job, j.submission, j.ref.name))


async def list_jobs(kube: KubeAPI, namespace: str, workloads: Listed,
                    workers: Workers = NONE) -> list[JobInfo]:
    """Every dispatch job of ``namespace``: one LIST per kind (see the module docstring),
    and one of the pods in each of ``workers`` (MultiKueue mode)."""
    lists = await asyncio.gather(*(kube.list(res, namespace, label_selector=sel)
                                   for res, sel in _selectors(workloads)))
    items = [found for found, _ in lists]

    async def pods_of(name: str, wk: KubeAPI) -> list[Obj]:
        found, _ = await wk.list(POD, namespace, label_selector=names.JOBSET_NAME_LABEL)
        return found

    there = await workers.each(pods_of)
    return listing(items[0], items[2] if len(items) > 2 else [], items[1], there)


async def watch_jobs(kube: KubeAPI, namespace: str, workloads: Listed,
                     workers: Workers = NONE) -> AsyncIterator[list[JobInfo]]:
    """The listing, then a new one every time it changes; never ends (cancel it).

    One watch per kind (:meth:`KubeAPI.observe`, which lists again after expiry or a broken
    stream), and one of the pods in each of ``workers`` (MultiKueue mode). Events that
    arrive together are taken together, so a burst of pod updates yields one listing, and a
    listing equal to the last one is not yielded again.
    """
    kinds = [(kube, "", res, sel) for res, sel in _selectors(workloads)]
    kinds += [(wk, name, POD, names.JOBSET_NAME_LABEL) for name, wk in workers.items()]
    current: list[dict[str, Obj]] = [{} for _ in kinds]
    synced = [False] * len(kinds)
    changed = asyncio.Event()
    failure: list[BaseException] = []

    async def follow(i: int, where: KubeAPI, cluster: str, res: Resource,
                     selector: str) -> None:
        stream = where.observe(res, namespace, label_selector=selector, timeout_seconds=60)
        try:
            async for ev in stream:
                if ev.type == "SYNC":
                    current[i] = {_key(o): o for o in ev.items}
                    synced[i] = True
                elif ev.type == "DELETED":
                    current[i].pop(_key(ev.object), None)
                else:
                    current[i][_key(ev.object)] = ev.object
                changed.set()
        except Exception as exc:  # handed to the consumer, who raises it
            failure.append(named(cluster, exc)
                           if cluster and isinstance(exc, errors.KubeError) else exc)
            changed.set()
        finally:
            await stream.aclose()  # type: ignore[attr-defined]

    # Owned by the generator, not by a TaskGroup: a group's scope may not span a yield (its
    # error would cancel the consumer's task wherever it is). Cancelled and awaited when
    # the generator ends, and what they ended with other than that is raised then.
    tasks = Owned()
    for i, kind in enumerate(kinds):
        tasks.start(follow(i, *kind))
    own = len(kinds) - len(workers)  # the backend's own kinds come first
    last: list[JobInfo] | None = None
    try:
        while True:
            await changed.wait()
            changed.clear()
            if failure:
                raise failure[0]
            if not all(synced):
                continue
            await asyncio.sleep(0)  # let events already read land in this listing
            there = {name: current[own + i].values() for i, name in enumerate(workers)}
            now = listing(current[0].values(), current[2].values() if own > 2 else (),
                          current[1].values(), there)
            if now != last:
                last = now
                yield now
    finally:
        await tasks.close()


def _key(obj: Mapping[str, Any]) -> str:
    m = meta(obj)
    return str(m.get("uid") or m.get("name"))

"""Inspect and wait: read a job's objects and apply the state table to them.

What is read beyond the TrainJob and its pods is the mode's (:class:`ObserveMode`): Kueue
mode also reads the TrainJob's Workload, and MultiKueue mode, for Inspect alone, the
MultiKueueCluster of the worker the Workload names, or the job's TrainJob in each worker
when an eviction looks stuck (:meth:`ObserveMode.remark`). Inspect
only reads. A wait is a watch, not a poll, and it is where plain mode's library acts on a
hold that expired (plain mode has no controller to do it): see :func:`wait`. Concurrent
waits share the watches, one per kind of the namespace (:mod:`dispatch_kubeflow.informer`),
each judging its own job.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Protocol

from dispatch_kubeflow import errors, state
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.admission_count import newest_workload
from dispatch_kubeflow.core.objects import meta
from dispatch_kubeflow.informer import Feed, Informers
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import POD, TRAINJOB
from dispatch_kubeflow.model import ObjectRef, ObjectState, Observation
from dispatch_kubeflow.workers import named

Obj = dict[str, Any]

WORKER_POLL = 1.0
"""Seconds between reads of a worker's pods by a wait (MultiKueue mode): the watches are
the manager's."""


class ObserveMode(Protocol):
    """What inspect and wait need of the mode."""

    async def workload(self, kube: KubeAPI, trainjob: Mapping[str, Any]) -> Obj | None:
        """The TrainJob's Workload, if the mode has one."""
        ...

    def watched(self, namespace: str) -> list[Feed]:
        """What a wait watches beyond the TrainJob and its pods (the Workloads), each feed
        keyed by the TrainJob's UID."""
        ...

    def hold_expiry(self, trainjob: Mapping[str, Any] | None,
                    pods: Sequence[Mapping[str, Any]]) -> datetime | None:
        """When the library must release the job's hold itself (None: never, or not now)."""
        ...

    async def release_expired(self, kube: KubeAPI, ref: ObjectRef) -> None:
        """Release the job's hold if it expired and the library is the one to release it."""
        ...

    def pods_in(self, kube: KubeAPI, workload: Mapping[str, Any] | None
                ) -> Mapping[str, KubeAPI]:
        """Where the job's pods may be: each cluster ("" the backend's own, ``kube``) and
        its connection (MultiKueue: the worker the Workload names, else every worker)."""
        ...

    async def remark(self, kube: KubeAPI, trainjob: Mapping[str, Any] | None,
                     workload: Mapping[str, Any] | None) -> str:
        """What Inspect adds to the state table's ``cause.detail`` from beyond the job's
        objects ("": nothing). MultiKueue: the worker the Workload names, when the manager's
        MultiKueue lost it, or an eviction that cannot end (kueue#15380); the state stays
        the table's."""
        ...


async def read(kube: KubeAPI, mode: ObserveMode, ref: ObjectRef
               ) -> tuple[Obj | None, Obj | None, list[Obj]]:
    """The job's TrainJob, Workload (the mode's) and pods, as they are now (the pods where
    the mode says they are: a MultiKueue worker's)."""
    trainjob = await kube.get_or_none(TRAINJOB, ref.name, ref.namespace)
    selector = names.pods_of(ref.name)
    if pods_here(kube, mode):
        pods, _ = await kube.list(POD, ref.namespace, label_selector=selector)
        workload = await mode.workload(kube, trainjob) if trainjob is not None else None
        return trainjob, workload, pods
    # MultiKueue: the Workload says which worker's pods to read.
    workload = await mode.workload(kube, trainjob) if trainjob is not None else None
    pods = []
    for cluster, wk in mode.pods_in(kube, workload).items():
        try:
            found, _ = await wk.list(POD, ref.namespace, label_selector=selector)
        except errors.KubeError as exc:
            raise named(cluster, exc) from None
        pods += found
    return trainjob, workload, pods


def pods_here(kube: KubeAPI, mode: ObserveMode) -> bool:
    """Whether the job's pods are in the backend's own cluster (every mode but MultiKueue),
    where the waits' watches see them."""
    return set(mode.pods_in(kube, None)) == {""}


async def inspect(kube: KubeAPI, mode: ObserveMode, ref: ObjectRef) -> Observation:
    """The job's state (see :mod:`dispatch_kubeflow.state`) and the mode's remark on it,
    appended to the cause's detail. Reads only, in every mode."""
    trainjob, workload, pods = await read(kube, mode, ref)
    obs = state.observe(trainjob, workload, pods)
    remark = await mode.remark(kube, trainjob, workload)
    if not remark:
        return obs
    detail = f"{obs.cause.detail}; {remark}" if obs.cause.detail else remark
    return replace(obs, cause=replace(obs.cause, detail=detail))


async def _observed(kube: KubeAPI, mode: ObserveMode, ref: ObjectRef) -> Observation:
    """The job's state alone, without the mode's remark: what a wait judges. The remark
    changes no state, and a wait that polls a worker's pods (MultiKueue) would read it
    again every WORKER_POLL seconds for nothing."""
    return state.observe(*await read(kube, mode, ref))


def subscriptions(mode: ObserveMode, namespace: str, name: str, uid: str
                  ) -> list[tuple[Feed, str]]:
    """What the wait of TrainJob ``name`` watches, as (feed, key): the namespace's
    TrainJobs (keyed by name), its JobSet pods (by their JobSet's name, the TrainJob's) and
    the mode's feeds (by the TrainJob's UID).

    Each feed covers every job, so concurrent waits share it; the key picks this job's
    objects, the very ones its own watch by name, by label or by UID used to select. No
    selector on TrainJobs, so the wait of any TrainJob of the namespace sees what it did.
    """
    return [(Feed(TRAINJOB, namespace, keep=state.TRAINJOB_READS), name),
            (Feed(POD, namespace, label_selector=names.JOBSET_NAME_LABEL,
                  key_label=names.JOBSET_NAME_LABEL, keep=state.POD_READS), name),
            *((feed, uid) for feed in mode.watched(namespace))]


async def wait(kube: KubeAPI, mode: ObserveMode, ref: ObjectRef,
               want: frozenset[ObjectState], *, shared: Informers | None = None
               ) -> Observation:
    """Watch until the job is in a state of ``want``; the caller bounds the wait.

    The watches are ``shared``'s (the Backend's, for every wait it runs), or this wait's
    own.

    When the mode says a hold is the library's to release once expired (plain mode), the
    wait releases it at its expiry and goes on watching: a caller waiting for RUNNING sees
    the job run again as it would in Kueue mode, where the admission controller releases
    it. The release reads the job live and writes with a precondition, as Release does.
    """
    if shared is None:
        own = Informers(kube)
        try:
            return await wait(kube, mode, ref, want, shared=own)
        finally:
            await own.close()
    while True:
        found = await _watch_state(kube, shared, mode, ref, want)
        if found is not None and pods_here(kube, mode):
            return found
        if found is not None:
            # The pods are in the workers (MultiKueue), out of the watches' sight: read them
            # there, every WORKER_POLL seconds while they alone keep the state from ``want``
            # (a hold's pods still going).
            obs = await _observed(kube, mode, ref)
            if obs.state in want:
                return obs
            await asyncio.sleep(WORKER_POLL)
            continue
        await mode.release_expired(kube, ref)
        obs = await _observed(kube, mode, ref)
        if obs.state in want:
            return obs


async def _watch_state(kube: KubeAPI, shared: Informers, mode: ObserveMode, ref: ObjectRef,
                       want: frozenset[ObjectState]) -> Observation | None:
    """Watch until a state in ``want`` (an Observation), or until a hold the library must
    release expired (None)."""
    ns, name = ref.namespace, ref.name
    uid = ref.uid
    if not uid:
        trainjob = await kube.get_or_none(TRAINJOB, name, ns)
        if trainjob is None:
            obs = state.observe(None, None, [])
            if obs.state in want:
                return obs
            raise errors.NotFound(f"TrainJob {ref.id} not found")
        uid = str(meta(trainjob)["uid"])
    loop = asyncio.get_running_loop()
    expiry = asyncio.timeout(None)  # rescheduled to the expiry of a hold seen while watching
    expired: list[bool] = []

    def judge(current: Sequence[Mapping[str, Obj]]) -> Observation | None:
        trainjob = current[0].get(name)
        if trainjob is not None and str(meta(trainjob).get("uid")) != uid:
            trainjob = None  # a newer TrainJob of the same name is not this job
        pods = list(current[1].values())
        workload = newest_workload(current[2].values()) if len(current) > 2 else None
        obs = state.observe(trainjob, workload, pods)
        until = mode.hold_expiry(trainjob, pods)
        if until is not None:
            left = (until - datetime.now(UTC)).total_seconds()
            if left <= 0:
                expired.append(True)
                return obs
            # No event marks the moment a hold expires: wake up then.
            expiry.reschedule(loop.time() + left)
        else:
            expiry.reschedule(None)
        return obs if obs.state in want else None

    try:
        async with expiry, shared.watching(subscriptions(mode, ns, name, uid)) as view:
            found = None
            while found is None:
                found = judge(await view.changed())
    except TimeoutError:
        if not expiry.expired():
            raise  # the caller's deadline, not the hold's expiry
        return None
    return None if expired else found

"""Waiting by watches, as the library waits: nothing is read again on a timer.

Every wait lists once and then follows the server's events (``waits.wait_for_all``, or a
watch from the resourceVersion of a list), bounded by a deadline (``waits.within``). Past
it, the check fails naming what it waited for, how long, and what it saw last.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from dispatch_kubeflow import errors
from dispatch_kubeflow.backend import Backend
from dispatch_kubeflow.conformance.identity import Identity
from dispatch_kubeflow.conformance.registry import CheckFailed
from dispatch_kubeflow.conformance.suite import MARKER, Suite
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.admission_count import newest_workload
from dispatch_kubeflow.core.objects import is_true, meta
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube import resources as r
from dispatch_kubeflow.model import JobID, ObjectRef, ObjectState, Observation, OutputStream
from dispatch_kubeflow.state import observe
from dispatch_kubeflow.waits import Watched, deadline_after, wait_for, wait_for_all, within

T = TypeVar("T")
Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class JobView:
    """The job as its watches show it now, and the state Inspect would report for it."""

    trainjob: Obj | None
    workload: Obj | None
    pods: tuple[Obj, ...]
    obs: Observation

    def __str__(self) -> str:
        detail = f" ({self.obs.cause.detail})" if self.obs.cause.detail else ""
        return f"{self.obs.state}{detail}, {len(self.pods)} pods"


def pod_selector(ref: ObjectRef) -> str:
    return names.pods_of(ref.name)


def workload_selector(ref: ObjectRef) -> str:
    return f"{names.KUEUE_JOB_UID_LABEL}={ref.uid}"


async def watch_job(kube: KubeAPI, ref: ObjectRef, judge: Callable[[JobView], T | None],
                    seen: list[JobView]) -> T:
    """Watch the job's TrainJob, pods and Workload until ``judge`` of them is not None.

    ``seen`` holds the last view judged, for the message of a wait that ran out of time.
    """
    watched = [Watched(r.TRAINJOB, ref.namespace, field_selector=f"metadata.name={ref.name}"),
               Watched(r.POD, ref.namespace, label_selector=pod_selector(ref)),
               Watched(r.WORKLOAD, ref.namespace, label_selector=workload_selector(ref))]

    def look(current: Sequence[Mapping[str, Obj]]) -> T | None:
        trainjob = current[0].get(ref.name)
        if trainjob is not None and str(meta(trainjob).get("uid")) != ref.uid:
            trainjob = None  # a newer TrainJob of the same name is not this job
        workload = newest_workload(current[2].values())
        pods = tuple(current[1].values())
        seen[:] = [JobView(trainjob, workload, pods, observe(trainjob, workload, pods))]
        return judge(seen[0])

    return await wait_for_all(kube, watched, look)


async def until(suite: Suite, what: str, limit: float,
                judge: Callable[[JobView], T | None]) -> tuple[T, float]:
    """Watch the job until ``judge`` holds: what it returned and the seconds it took.

    CheckFailed after ``limit`` seconds, naming ``what`` and the state last seen.
    """
    _, _, ref = suite.need_job()
    seen: list[JobView] = []
    began = time.monotonic()
    try:
        async with within(deadline_after(limit), f"waiting for {what}"):
            found = await watch_job(suite.kube, ref, judge, seen)
    except errors.DeadlineExceeded:
        last = f"; last seen: {seen[0]}" if seen else "; the watches never listed"
        raise CheckFailed(f"never saw {what} within {limit:g}s{last}") from None
    return found, time.monotonic() - began


def in_state(want: ObjectState) -> Callable[[JobView], JobView | None]:
    return lambda view: view if view.obs.state is want else None


async def quiet(suite: Suite, seconds: float, want: ObjectState) -> None:
    """For ``seconds``: the job stays ``want``, with no pod and no quota or admission."""
    _, _, ref = suite.need_job()

    def broken(view: JobView) -> str | None:
        if view.obs.state is not want:
            return f"the job went {view.obs.state} ({view.obs.cause.detail})"
        if view.pods:
            return f"pod {meta(view.pods[0]).get('name')} was created"
        for kind in ("QuotaReserved", "Admitted"):
            if view.workload is not None and is_true(view.workload, kind):
                return f"Workload {meta(view.workload).get('name')} got {kind}"
        return None

    seen: list[JobView] = []
    try:
        async with within(deadline_after(seconds), f"watching {ref.id} stay {want}"):
            problem = await watch_job(suite.kube, ref, broken, seen)
    except errors.DeadlineExceeded:
        if not seen:  # nothing was watched: no evidence of quiet
            raise CheckFailed(f"the watches of {ref.id} never listed within {seconds:g}s "
                              f"(to see it stay {want})") from None
        return  # the whole time passed with nothing forbidden seen
    raise CheckFailed(problem)


async def read_identity(suite: Suite, want_admissions: int, limit: float = 120) -> Identity:
    """Rank 0's identity, read through the library's Output, once it shows A >= ``want``.

    The log is followed as it is written, up to the marker the command prints after its
    identity. When there is no such log yet (no pod, a container not started, a log that
    ended early) or it shows an earlier execution, the next change to the job's pods is
    awaited (a watch from before the read, so no change is missed) and the log read again.
    """
    backend, job, ref = suite.need_job()
    what = f"rank 0's log of execution A={want_admissions}"
    seen: Identity | None = None
    problem = ""
    try:
        async with within(deadline_after(limit), f"reading {what}"):
            while True:
                _, rv = await suite.kube.list(r.POD, ref.namespace,
                                              label_selector=pod_selector(ref))
                try:
                    text = await _read_to_marker(backend, job)
                except errors.DispatchError as exc:
                    problem = f"{type(exc).__name__}: {exc}"
                else:
                    if text is None:
                        problem = f"the log ended before {MARKER}"
                    else:
                        seen = Identity.parse(text, job)
                        if seen.admissions >= want_admissions:
                            return seen
                await _pods_change(suite.kube, ref, rv)
    except errors.DeadlineExceeded:
        if seen is not None:
            raise CheckFailed(f"rank 0's log shows {seen}, not A={want_admissions} within "
                              f"{limit:g}s") from None
        raise CheckFailed(f"never saw {what} within {limit:g}s"
                          + (f"; the last read: {problem}" if problem else "")) from None


async def _read_to_marker(backend: Backend, job: JobID) -> str | None:
    """Rank 0's log up to the marker line; None when the log ends before it."""
    got = b""
    async with backend.output(job, 0, OutputStream.STDOUT, follow=True) as log:
        async for chunk in log:
            got += chunk
            if MARKER.encode() in got:
                return got.decode(errors="replace")
    return None


async def _pods_change(kube: KubeAPI, ref: ObjectRef, rv: str) -> None:
    """Return at the first change to the job's pods after resourceVersion ``rv``.

    Also when the watch cannot say: ``rv`` too old to watch from (410), a broken stream, or
    the server ending the watch. Reading again is then the safe way on.
    """
    events = kube.watch(r.POD, ref.namespace, resource_version=rv,
                        label_selector=pod_selector(ref))
    try:
        async for _ in events:
            return
    except errors.KubeGone:
        return
    except errors.KubeError as exc:
        if not isinstance(exc, errors.KubeNoAnswer):  # an error status is the server's
            raise
    finally:
        await events.aclose()  # type: ignore[attr-defined]


async def delete_and_wait(kube: KubeAPI, res: r.Resource, name: str, limit: float) -> str | None:
    """Delete a cluster-scoped object and watch until it is gone; the problem, or None."""
    try:
        await kube.delete(res, name, propagation="Background")
        async with within(deadline_after(limit), f"waiting for {res.kind} {name} to go"):
            await wait_for(kube, res, None, lambda objs: True if not objs else None,
                           field_selector=f"metadata.name={name}")
    except errors.DeadlineExceeded:
        return f"{res.kind} {name} was still there {limit:g}s after its deletion"
    except errors.KubeError as exc:
        return f"could not delete {res.kind} {name}: {exc}"
    return None

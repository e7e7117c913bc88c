"""No overlap: the AdmissionCheck never lets a job in while its previous execution's pods exist.

The job is held and released while its pods are still terminating (its command traps
SIGTERM and sleeps). Two watches, of its pods and of its Workload, record in one order when
each old pod went and when the check let the Workload in (``Ready`` with quota reserved).
The order is judged by resourceVersion (one etcd revision sequence), or by the order the
watch events arrived when resourceVersions are not numbers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dispatch_kubeflow.conformance.failed import CheckFailed
from dispatch_kubeflow.conformance.registry import check
from dispatch_kubeflow.conformance.suite import Suite
from dispatch_kubeflow.conformance.watching import (
    JobView,
    in_state,
    pod_selector,
    read_identity,
    until,
    workload_selector,
)
from dispatch_kubeflow.core.objects import is_true, meta
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube import resources as r
from dispatch_kubeflow.model import ObjectState
from dispatch_kubeflow.waits import cancel_all, task_group

Sink = Callable[[str, Mapping[str, Any], tuple[dict[str, Any], ...]], None]


def _rv(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("resourceVersion") or "")


def _check_state(workload: Mapping[str, Any], check: str) -> tuple[str, str]:
    for entry in (workload.get("status") or {}).get("admissionChecks") or []:
        if entry.get("name") == check:
            return str(entry.get("state") or ""), str(entry.get("message") or "")
    return "", ""


@dataclass(frozen=True, slots=True)
class Mark:
    """Where in the event order something happened: resourceVersion and arrival number."""

    rv: str
    seq: int

    def after(self, other: Mark) -> bool:
        if self.rv.isdigit() and other.rv.isdigit():
            return int(self.rv) > int(other.rv)
        return self.seq > other.seq


@dataclass
class ReleaseWatch:
    """Pods of the previous execution and the Workload's check, watched across a release."""

    check: str
    seq: int = 0
    old: dict[str, str] = field(default_factory=dict)
    """uid -> name of the pods that existed when the watch began (the old execution)."""
    gone: dict[str, Mark] = field(default_factory=dict)
    approval: Mark | None = None
    early_pods: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    released: bool = False
    pods_synced: asyncio.Event = field(default_factory=asyncio.Event)
    workload_synced: asyncio.Event = field(default_factory=asyncio.Event)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def _next(self, obj: Mapping[str, Any]) -> Mark:
        self.seq += 1
        return Mark(_rv(obj), self.seq)

    def on_pods(self, typ: str, obj: Mapping[str, Any], items: tuple[dict[str, Any], ...]) -> None:
        if typ == "SYNC":
            present = {str(meta(p).get("uid")) for p in items}
            if not self.pods_synced.is_set():
                self.old = {str(meta(p).get("uid")): str(meta(p).get("name")) for p in items}
                self.pods_synced.set()
            else:  # a re-list after the watch expired: what is missing went meanwhile
                for uid in self.old:
                    if uid not in present and uid not in self.gone:
                        self.gone[uid] = Mark("", self._next({}).seq)
            self.changed.set()
            return
        uid = str(meta(obj).get("uid"))
        mark = self._next(obj)
        if typ == "DELETED" and uid in self.old:
            self.gone.setdefault(uid, mark)
        elif typ == "ADDED" and uid not in self.old and self.approval is None:
            self.early_pods.append(str(meta(obj).get("name")))
        self.changed.set()

    def on_workload(self, typ: str, obj: Mapping[str, Any],
                    items: tuple[dict[str, Any], ...]) -> None:
        for wl in (items if typ == "SYNC" else (obj,)):
            mark = self._next(wl)
            if typ == "DELETED":
                continue
            state, message = _check_state(wl, self.check)
            if not self.released:
                continue
            if state != "Ready" and message and message not in self.messages:
                self.messages.append(message)
            if (state == "Ready" and is_true(wl, "QuotaReserved") and self.approval is None):
                self.approval = mark
        if typ == "SYNC":
            self.workload_synced.set()
        self.changed.set()

    @property
    def old_left(self) -> list[str]:
        return [name for uid, name in self.old.items() if uid not in self.gone]

    def overlap(self) -> list[str]:
        """Pods of the previous execution still there when the check let the Workload in."""
        if self.approval is None:
            return []
        return [self.old[uid] for uid, mark in self.gone.items() if mark.after(self.approval)]


async def _consume(kube: KubeAPI, res: r.Resource, ns: str, selector: str, sink: Sink) -> None:
    async for ev in kube.observe(res, ns, label_selector=selector):
        sink(ev.type, ev.object, ev.items)


async def _until_set(event: asyncio.Event, watches: list[asyncio.Task[None]]) -> None:
    """Wait for ``event``; a watch that ended meanwhile (it raised: observe never ends by
    itself) is the check's failure, not a silent stop of the events it waited for."""
    async with task_group() as group:
        waiter = group.create_task(event.wait())
        try:
            await asyncio.wait([waiter, *watches], return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
    for task in watches:
        if task.done():
            task.result()  # raises what ended the watch
            raise CheckFailed(f"a watch ended by itself ({task.get_name()})")


@check("no-overlap", "the controller never approves while a pod of the previous execution "
                     "exists")
async def no_overlap(suite: Suite) -> str:
    """Held and released with pods still terminating: approval only after the last is gone."""
    backend, _, ref = suite.need_job()
    second = suite.second
    if second is None:
        raise CheckFailed("not run: the second identity is unknown (see higher-identity)")
    previous = second.admissions
    await backend.hold(ref, suite.hold_meta(2))

    def ended_but_lingering(view: JobView) -> bool | None:
        if not view.pods:
            return True  # gone already: judged (inconclusive) below
        if view.workload is None or is_true(view.workload, "Admitted"):
            return None
        return True if all(meta(p).get("deletionTimestamp") for p in view.pods) else None

    await until(suite, "the execution ending", 60, ended_but_lingering)
    watch = ReleaseWatch(suite.o.admission_check)
    # Not a TaskGroup's: a watch's failure fails the check where it waits (_until_set), and
    # does not cut short the release or the reads between (as a group's cancellation would).
    tasks = [
        asyncio.create_task(_consume(suite.kube, r.POD, ref.namespace, pod_selector(ref),
                                     watch.on_pods), name="the watch of the job's pods"),
        asyncio.create_task(_consume(suite.kube, r.WORKLOAD, ref.namespace,
                                     workload_selector(ref), watch.on_workload),
                            name="the watch of the job's Workload"),
    ]
    try:
        async with asyncio.timeout(30):
            await _until_set(watch.pods_synced, tasks)
            await _until_set(watch.workload_synced, tasks)
        if not watch.old:
            raise CheckFailed(
                "inconclusive: every pod of the previous execution was gone before the "
                f"release (their command sleeps {suite.o.linger}s after SIGTERM); nothing "
                "was left to wait for")
        lingering = len(watch.old)
        watch.released = True
        released_at = time.monotonic()
        await backend.release(ref, suite.hold_meta(2))
        try:
            async with asyncio.timeout(180):
                while watch.approval is None or watch.old_left:
                    watch.changed.clear()
                    await _until_set(watch.changed, tasks)
        except TimeoutError:
            if watch.approval is None:
                raise CheckFailed("the AdmissionCheck never let the Workload in within "
                                  f"180s; messages: {watch.messages}") from None
            raise CheckFailed(f"pods {watch.old_left} of the previous execution were "
                              "still there 180s after the release") from None
    finally:
        await cancel_all(tasks)
    overlap = watch.overlap()
    if overlap:
        raise CheckFailed(f"the Workload was let in (check Ready, resourceVersion "
                          f"{watch.approval.rv if watch.approval else '?'}) while pods "
                          f"{overlap} of the previous execution still existed")
    if watch.early_pods:
        raise CheckFailed(f"pods {watch.early_pods} were created before the check let "
                          "the Workload in")
    waited = time.monotonic() - released_at
    await until(suite, "the job running again", 180, in_state(ObjectState.RUNNING))
    third = await read_identity(suite, previous + 1)
    if third.admissions != previous + 1 or third.epoch <= second.epoch:
        raise CheckFailed(f"the next execution shows {third}, not A={previous + 1} with a "
                          f"DISPATCH_EPOCH above {second.epoch}")
    theirs = [m for m in watch.messages if "previous execution" in m] or watch.messages
    said = f" (it said: {theirs[0]})" if theirs else ""
    return (f"released with {lingering} pods of the previous execution terminating; the "
            f"check let the Workload in only after the last was gone{said}; "
            f"approved {waited:.0f}s after the release; next execution A={third.admissions}")

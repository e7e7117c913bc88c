"""Events: what Kubernetes and the controllers said about a job's objects, in time order.

Every object of a job is named after its TrainJob ``dj-<job id>-s<submission>``: the
TrainJob, its runtime copy and JobSet carry the name itself, Kueue's Workload is
``trainjob-<name>-<hash>``, the Jobs ``<name>-<replicated job>-<index>`` and the pods
``<job>-<index>-<suffix>``. So `job_events` lists the namespace's Events once
(``events.k8s.io/v1``) and keeps those whose ``regarding`` object carries that name —
including Events of pods of earlier executions that are gone. That takes in what
Kubernetes itself reports (scheduling, pulls, starts, kills), Kueue (quota, admission,
eviction), JobSet and Trainer, dispatch-kubeflow's own ``StopJob``, and the admission
controller's ``WaitingForPreviousExecution``, ``AdmissionCountRaised`` and
``AdmissionCheckReady``.

An Event's time is when it was last seen: its series' last observation, else its
``deprecatedLastTimestamp`` (Events recorded through the core API), else its
``eventTime``, else when it was created. With ``follow`` the listing is followed by
every Event recorded, or seen again, later (one watch, which lists again after expiry;
an Event already yielded is yielded again only when it changed).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dispatch_kubeflow.core.objects import meta
from dispatch_kubeflow.core.times import parse_time
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import EVENT
from dispatch_kubeflow.model import JobID, ObjectRef

Obj = Mapping[str, Any]
_EPOCH = datetime.fromtimestamp(0, UTC)


@dataclass(frozen=True, slots=True)
class JobEvent:
    """One Kubernetes Event about an object of a job.

    ``type`` is ``Normal`` or ``Warning``; ``reason`` the machine-readable word
    (``Scheduled``, ``AdmissionCountRaised``, ``StopJob``, ...); ``note`` the message for
    people; ``regarding`` the object it is about; ``reporter`` who recorded it (a
    controller name or component); ``count`` how many times it was seen.

    What [Backend.events][dispatch_kubeflow.Backend.events] yields.

    Attributes:
        time: When it was last seen (timezone-aware).
        type: ``Normal`` or ``Warning``.
        reason: The machine-readable word.
        note: The message for people.
        regarding: The object it is about.
        reporter: Who recorded it ("" when the Event does not say).
        count: How many times it was seen.
    """

    time: datetime
    type: str
    reason: str
    note: str
    regarding: ObjectRef
    reporter: str = ""
    count: int = 1


def name_pattern(job: JobID) -> re.Pattern[str]:
    """Matches every object name of ``job``'s submissions (see the module docstring)."""
    return re.compile(rf"(^|-)dj-{re.escape(job.lower())}-s\d+(-|$)")


def _time(ev: Obj) -> datetime:
    series = ev.get("series") or {}
    for raw in (series.get("lastObservedTime"), ev.get("deprecatedLastTimestamp"),
                ev.get("eventTime"), ev.get("deprecatedFirstTimestamp"),
                meta(ev).get("creationTimestamp")):
        when = parse_time(raw)
        if when is not None:
            return when if when.tzinfo else when.replace(tzinfo=UTC)
    return _EPOCH


def job_event(ev: Obj) -> JobEvent:
    """A JobEvent from an ``events.k8s.io/v1`` Event (pure)."""
    reg = ev.get("regarding") or {}
    series = ev.get("series") or {}
    count = series.get("count") or ev.get("deprecatedCount") or 1
    reporter = (ev.get("reportingController")
                or (ev.get("deprecatedSource") or {}).get("component") or "")
    return JobEvent(
        time=_time(ev), type=str(ev.get("type") or ""), reason=str(ev.get("reason") or ""),
        note=str(ev.get("note") or ""),
        regarding=ObjectRef(namespace=str(reg.get("namespace") or ""),
                            name=str(reg.get("name") or ""), kind=str(reg.get("kind") or ""),
                            api_version=str(reg.get("apiVersion") or ""),
                            uid=str(reg.get("uid") or "")),
        reporter=str(reporter), count=int(count) if str(count).isdigit() else 1)


def of_job(items: Iterable[Obj], job: JobID) -> list[Obj]:
    """The Events among ``items`` about an object of ``job``, oldest first (pure)."""
    pattern = name_pattern(job)
    mine = [e for e in items if pattern.search(str((e.get("regarding") or {}).get("name", "")))]
    return sorted(mine, key=_order)


def _order(ev: Obj) -> tuple[datetime, str, str]:
    m = meta(ev)
    return _time(ev), str(m.get("creationTimestamp") or ""), str(m.get("name") or "")


async def job_events(kube: KubeAPI, namespace: str, job: JobID, *,
                     follow: bool = False) -> AsyncIterator[JobEvent]:
    """The job's Events in time order; with ``follow``, then every later one (see above)."""
    if not follow:
        items, _ = await kube.list(EVENT, namespace)
        for ev in of_job(items, job):
            yield job_event(ev)
        return
    seen: dict[str, str] = {}  # uid -> resourceVersion already yielded
    pattern = name_pattern(job)
    stream = kube.observe(EVENT, namespace, timeout_seconds=60)
    try:
        async for change in stream:
            if change.type == "SYNC":
                batch = of_job(change.items, job)
            elif change.type in ("ADDED", "MODIFIED") and pattern.search(
                    str((change.object.get("regarding") or {}).get("name", ""))):
                batch = [change.object]
            else:
                continue
            for ev in batch:
                m = meta(ev)
                uid, rv = str(m.get("uid") or m.get("name")), str(m.get("resourceVersion"))
                if seen.get(uid) == rv:
                    continue
                seen[uid] = rv
                yield job_event(ev)
    finally:
        await stream.aclose()  # type: ignore[attr-defined]

"""StopJob's passes: list what may be listed, delete and release what is due, then wait.

``stop_job`` lists the job's TrainJobs and runtime copies (what Start makes; the report
names them whoever removes them), records the reason as an Event on each TrainJob
(:mod:`.reason`) and deletes the TrainJobs with background propagation (:mod:`.deletes`).
Then each pass brings the kinds' views (:mod:`.views`) up to date, lists the kinds that may
be listed and are not current, deletes what is due, releases the finalizers that are due
(:mod:`.finalizers`), and otherwise waits for a view to change or the next thing to fall
due; it ends once every view is empty (the proof, :mod:`.views`) or its time is up, and
reports (:mod:`.report`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from datetime import timedelta

from dispatch_kubeflow.core import names
from dispatch_kubeflow.find import MADE_BY
from dispatch_kubeflow.informer import Feed
from dispatch_kubeflow.kube import KubeAPI, Resource
from dispatch_kubeflow.kube.resources import (
    JOB,
    JOBSET,
    POD,
    TRAINING_RUNTIME,
    TRAINJOB,
    WORKLOAD,
)
from dispatch_kubeflow.model import JobID, StopReport
from dispatch_kubeflow.state import POD_READS, TRAINJOB_READS
from dispatch_kubeflow.stop.deletes import Deletes
from dispatch_kubeflow.stop.finalizers import Releases
from dispatch_kubeflow.stop.limits import LIMITS, Limits
from dispatch_kubeflow.stop.reason import record_reason
from dispatch_kubeflow.stop.report import report
from dispatch_kubeflow.stop.rounds import Crowd
from dispatch_kubeflow.stop.sharing import Sharing
from dispatch_kubeflow.stop.views import Views
from dispatch_kubeflow.waits import task_group


class Stop:
    """One StopJob: its views, its deletes and its releases, run in passes (the module
    docstring)."""

    def __init__(self, views: Views, deletes: Deletes, releases: Releases) -> None:
        self.views, self.deletes, self.releases = views, deletes, releases

    @classmethod
    def of(cls, kube: KubeAPI, namespace: str, job: JobID, kinds: Sequence[Resource],
           limit: float, sharing: Sharing, changed: asyncio.Event | None = None) -> Stop:
        """A stop of ``job`` with ``limit`` seconds, its views kept as ``sharing`` picks."""
        views = Views(kube, namespace, job, kinds, sharing, changed)
        grace = min(sharing.limits.gc_grace, limit / 4)
        return cls(views, Deletes(views, grace, sharing.crowded), Releases(views, grace))

    def done(self) -> bool:
        return all(k.current and not k.live and not k.early
                   for k in self.views.kinds.values())

    def _forget_gone(self) -> None:
        """Drop the times of what no view holds (gone, or not seen by a list again): a past
        time left behind would wake the passes at once, again and again."""
        live = {uid for k in self.views.kinds.values() for uid in k.live}
        for times in (self.deletes.due, self.releases.release_at, self.deletes.retry):
            for uid in [u for u in times if u not in live]:
                del times[uid]

    async def run(self, reason: str, until: float) -> StopReport:
        views, kinds = self.views, self.views.kinds
        # The stop owns its kinds' watches and its reasons: none outlives it, and one that
        # fails by a bug (not a KubeError, which each handles) ends the stop with it at once.
        async with task_group() as tasks:
            views.tasks = tasks
            try:
                await self._passes(reason, until, tasks)
            finally:
                views.tasks = None
                for k in kinds.values():
                    if k.watch is not None:
                        k.watch.cancel()
        if not self.done():
            # Time is up: list what is not current, so the report names what is still there.
            await asyncio.gather(*(views.list_kind(k, watch=False)
                                   for k in kinds.values() if not k.current))
        return self.report()

    async def _passes(self, reason: str, until: float, tasks: asyncio.TaskGroup) -> None:
        views, deletes, releases = self.views, self.deletes, self.releases
        kinds = views.kinds
        roots = [k for k in kinds.values() if k.res not in MADE_BY]
        await asyncio.gather(*(views.list_kind(k) for k in roots))
        # The reasons are recorded alongside the deletes, not before them: a record, not a
        # step of the proof, and one round trip less for a job whose objects go promptly.
        reasons = [tasks.create_task(record_reason(views.kube, f.obj, reason))
                   for f in views.seen.values() if f.res is TRAINJOB]
        while True:
            for k in kinds.values():
                if k.feed is not None and k.current:
                    views.follow(k)
            now = views.loop.time()
            for k in kinds.values():
                if k.early and all(views.gone(m) for m in MADE_BY.get(k.res, ())):
                    k.current = False  # listed while its makers went: list it again
            todo = [k for k in kinds.values()
                    if not k.current and now >= k.retry_at and views.may_list(k)]
            if todo:
                await asyncio.gather(*(views.list_kind(k) for k in todo))
                continue
            due = deletes.due_deletes(now)
            if due:
                await deletes.delete_all(due)
                continue
            releasing = releases.due_releases(now)
            if releasing:
                await asyncio.gather(*(releases.release(f) for f in releasing))
                continue
            if self.done() or now >= until:
                break
            self._forget_gone()
            wake = min([until, *deletes.due.values(), *releases.release_at.values(),
                        *(t for t in deletes.retry.values() if t > now),
                        *(k.retry_at for k in kinds.values() if k.failure)])
            views.changed.clear()  # no await since the checks above: no wake-up is lost
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, wake - now)):
                    await views.changed.wait()
        # The watches go on while the reasons are recorded (as they did before the group
        # owned them); a reason's error, if any, is the group's to raise.
        if reasons:
            await asyncio.wait(reasons)

    def report(self) -> StopReport:
        return report(self.views)


def stop_feeds(namespace: str) -> dict[Resource, Feed]:
    """The informers a stop in ``namespace`` follows, by kind (the Workloads' is the mode's).

    TrainJobs and pods share the waits' informers (:func:`dispatch_kubeflow.observe.
    subscriptions`: one watch each, another index; so the same ``keep``, of which StopJob
    reads the metadata); JobSets, Jobs and runtime copies are watched for StopJob alone, and
    their metadata is all it reads."""
    by_job = names.JOB_ID_LABEL
    return {
        TRAINJOB: Feed(TRAINJOB, namespace, key_label=by_job, keep=TRAINJOB_READS),
        POD: Feed(POD, namespace, label_selector=names.JOBSET_NAME_LABEL, key_label=by_job,
                  keep=POD_READS),
        **{res: Feed(res, namespace, label_selector=by_job, key_label=by_job, keep=())
           for res in (JOBSET, JOB, TRAINING_RUNTIME)},
    }


async def stop_job(kube: KubeAPI, namespace: str, job: JobID, reason: str, *,
                   kinds: Sequence[Resource], limit: timedelta,
                   crowd: Crowd | None = None, feeds: Sequence[Feed] = (),
                   limits: Limits = LIMITS) -> StopReport:
    """Delete everything of ``job`` of the ``kinds`` (the mode's); see
    :mod:`dispatch_kubeflow.stop`.

    ``crowd`` (a Backend's stops, beside its informers): concurrent stops share their
    watches, and ``feeds`` (the mode's): a feed of Workloads there serves the orphan scan
    from its informer instead of a list of the whole namespace, and the Workloads' view.
    ``limits``: its waits and the crowd's size.
    """
    seconds = limit.total_seconds()
    until = asyncio.get_running_loop().time() + seconds
    if crowd is None:
        alone = Sharing(kube, namespace, limits)
        return await Stop.of(kube, namespace, job, kinds, seconds, alone).run(reason, until)
    scan = next((f for f in feeds if f.res is WORKLOAD and f.namespace == namespace
                 and WORKLOAD in kinds), None)
    by_kind = {res: f for res, f in stop_feeds(namespace).items() if res in kinds}
    if scan is not None:
        by_kind[WORKLOAD] = scan
    with crowd.joined():
        changed = asyncio.Event()
        async with crowd.informers.watching(woken=changed) as view:
            sharing = Sharing(kube, namespace, limits, crowd=crowd, view=view, feeds=by_kind,
                              scan=scan)
            stop = Stop.of(kube, namespace, job, kinds, seconds, sharing, changed)
            if scan is not None:
                # Subscribed for the whole stop, so concurrent stops share the feed's one
                # list and watch. The key matters not: the scan reads the whole cache.
                sharing.subscribe(scan, "")
            return await stop.run(reason, until)

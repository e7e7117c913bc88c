"""What StopJob deletes itself, and when.

What StopJob deletes itself, each under its UID precondition (idempotent: a second delete
of the same UID is a 404, and a newer object of that name is a 409 and stays): the
TrainJobs, at once; objects with no owner (orphans), at once; objects whose owners are gone,
once the garbage collector has had ``Limits.gc_grace`` (at most a quarter of the time) to
do it first, or at once in a crowd, whose deletions the collector works through too slowly
to wait for (:meth:`Deletes.gc_grace`). So a job whose objects go promptly costs one
delete, and the rest of its requests are one list and at most one watch per kind.

TrainJobs are deleted with background propagation (so the TrainJob is gone at once and the
garbage collector removes the rest). Foreground deletion is not used: it keeps the TrainJob
until every dependant is gone and a stuck pod would then hide the whole job behind a
deletionTimestamp.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence

from dispatch_kubeflow import errors
from dispatch_kubeflow.core.objects import meta
from dispatch_kubeflow.find import Found
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import TRAINJOB
from dispatch_kubeflow.stop.views import Views

log = logging.getLogger(__name__)


async def _delete(kube: KubeAPI, f: Found) -> None:
    m = meta(f.obj)
    # Under the UID StopJob saw: idempotent (gone already: None), and a conflict means the
    # name now holds a newer object, which its own view judges.
    with contextlib.suppress(errors.KubeConflict):
        await kube.delete(f.res, str(m["name"]), str(m.get("namespace") or ""),
                          uid=f.uid or None, propagation="Background")


def uncertain(exc: errors.KubeError) -> bool:
    """A failure after which a write may or may not have taken effect (no answer, a 5xx), or
    a server shedding load (429). StopJob's writes are idempotent under their preconditions
    (a UID, a resourceVersion), so it sends them again on a later pass rather than raise:
    under load a stop is still a report (issue 11: 1,000 stops at once, a DELETE timed out).
    A failure that will not mend by itself (a rejected certificate) is raised at once."""
    if isinstance(exc, errors.KubeNoAnswer):
        return exc.transient
    return exc.status == 429 or 500 <= exc.status <= 599


class Deletes:
    """One stop's deletes (see the module docstring)."""

    def __init__(self, views: Views, grace: float, crowded: Callable[[], bool]) -> None:
        self.views = views
        self.grace = grace
        """The garbage collector's grace: ``Limits.gc_grace``, at most a quarter of the
        stop's time."""
        self.crowded = crowded
        """Whether at least ``Limits.crowd`` stops of the Backend run now."""
        self.asked: set[str] = set()
        """The UIDs StopJob asked to delete (once each)."""
        self.due: dict[str, float] = {}
        """When StopJob deletes an object itself, by UID, if it is still there and not going."""
        self.retry: dict[str, float] = {}
        """When a delete that failed uncertainly (:func:`uncertain`) is sent again, by UID."""
        views.on_deleted.append(lambda uid: self.due.pop(uid, None))

    def due_deletes(self, now: float) -> list[Found]:
        """What StopJob deletes itself now (see the module docstring)."""
        kinds = self.views.kinds
        # An owner being deleted (a deletionTimestamp, held by a finalizer) does not hold
        # the garbage collector back for long, nor StopJob.
        live = {uid for k in kinds.values() for uid, f in k.live.items()
                if not meta(f.obj).get("deletionTimestamp")}
        out = []
        for k in kinds.values():
            for f in k.live.values():
                if f.uid in self.asked or meta(f.obj).get("deletionTimestamp"):
                    # Asked already, or going: asking again changes nothing, and nothing is
                    # due (a time left here would wake the passes at once, again and again).
                    self.due.pop(f.uid, None)
                    self.retry.pop(f.uid, None)
                    continue
                if now < self.retry.get(f.uid, now):
                    continue  # its last delete failed; sent again at self.retry[uid]
                owners = [str(o.get("uid")) for o in meta(f.obj).get("ownerReferences") or []]
                if f.res is TRAINJOB or not owners:
                    out.append(f)
                elif any(o in live for o in owners):
                    self.due.pop(f.uid, None)  # the garbage collector waits for its owner
                elif now >= self.due.setdefault(f.uid, now + self.gc_grace()):
                    out.append(f)  # the garbage collector had its chance
        return out

    def gc_grace(self) -> float:
        """How long the garbage collector gets before StopJob deletes what lost its owners:
        none in a crowd, whose many deletions it works through one by one (issue 11: of
        100 stops at once, 9 in 10 still found their JobSet there a second after its
        TrainJob had gone, and deleted it themselves after the wait)."""
        return 0.0 if self.crowded() else self.grace

    async def delete_all(self, deletes: Sequence[Found]) -> None:
        views = self.views
        # What these objects made goes with them, removed by the garbage collector perhaps
        # before its kind's turn: list each such kind once first, so the report names what
        # was there (an orphaned JobSet's Jobs). Not a view: listed again in turn.
        first = [k for k in views.kinds.values()
                 if k.res not in views.listed and not k.current
                 and any(k.res in views.makes.get(f.res, ()) for f in deletes
                         if f.res is not TRAINJOB)]
        await asyncio.gather(*(views.list_kind(k, watch=False) for k in first))
        for k in first:
            k.current = False
        # One after another, owners first (the kinds' order): at most one delete of each
        # stop in flight. 1,000 stops sending all theirs at once (7,000 DELETEs) timed out
        # in the client's connection pool and grew it by 50 MB (issue 11, 2026-12-04).
        for f in deletes:
            await self.delete(f)

    async def delete(self, f: Found) -> None:
        self.asked.add(f.uid)
        try:
            await _delete(self.views.kube, f)
        except errors.KubeError as exc:
            if not uncertain(exc):
                raise
            wait = self.views.pass_wait
            log.warning("StopJob %s: deleting %s %s failed (%s); again in %.1fs",
                        self.views.job, f.res.kind, meta(f.obj).get("name"), exc, wait)
            self.asked.discard(f.uid)
            self.retry[f.uid] = self.views.loop.time() + wait

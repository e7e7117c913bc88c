"""StopJob: delete everything of a job, and prove it is gone, with few requests.

What belongs to a job is :mod:`dispatch_kubeflow.find`'s to say, among the kinds the mode
names (Kueue mode: Workloads too). Every read is selector-scoped to the job, so concurrent
stops in one namespace do not read each other's objects; Workloads, which carry none of the
job's labels, are the one exception, scanned once per stop for orphans, from the Backend's
shared Workload informer when there is one (one list for every concurrent stop).

``stop_job`` lists the job's TrainJobs and runtime copies (what Start makes; the report
names them whoever removes them), records the reason as an Event on each TrainJob and
deletes the TrainJobs with background propagation (so the TrainJob is gone at once and the
garbage collector removes the rest). Then it keeps one view per kind: a list, and a watch
from that list's resourceVersion that keeps it current. A kind that the cluster makes
(:data:`~dispatch_kubeflow.find.MADE_BY`: JobSets and Workloads from TrainJobs, Jobs from
JobSets, pods from Jobs) is listed only once every kind that makes it is proven empty,
and listed again if one of its makers shows a new object meanwhile.

Why that proves the job gone: a list is a consistent read, so it holds every object created
before it was sent. An object of kind D is made by a live object of a kind that makes D;
D is listed after each of those kinds' views held nothing, i.e. after the last maker was
deleted, so every D ever made is in D's list or arrived on D's watch since. D's watch then
sees each of them deleted (a watch from a list's resourceVersion misses no event), and
nothing can make another unless a maker's view shows a new object, which lists D again.
(An object a controller creates from a stale cache after its maker is gone is not covered:
the garbage collector removes it.) So when every view is empty, nothing of the job exists,
as a direct list would say, and no
kind is listed twice unless something of the job was made again (or a watch expired, or a
list failed).

Concurrent stops of one Backend share their watches. A kind's view is then its own list
(the consistent read the proof needs, selector-scoped to the job) followed by the Backend's
informer of that kind (:mod:`dispatch_kubeflow.informer`: one watch of the namespace, keyed
by the job-id label, or the Workloads' by the job's UID) instead of a watch of its own.
resourceVersions of one kind are comparable integers (KEP-5504), and the informer's cache
is the namespace's state at the version it is at, R. So an object listed at version v is
gone once R >= v and the cache no longer holds its UID (it existed at v, and at R it does
not); a newer version of it in the cache replaces the listed one; and an object of the job
the cache holds at a version above the list's is one made since. That is exactly what a
watch from the list's version would have said, and the list stays the proof's read. A kind
follows the informer only when every object its list holds is among the informer's (its
selector), when its resourceVersions are integers, and when sharing pays: the informer runs
already (a wait's, another stop's) or at least ``_CROWD`` stops of the Backend are running
(a lone stop's own watch is one request, a new informer's list and watch two). An informer
whose watch ended by an error (401, 403, 404) sends the kind back to a list and a watch of
its own.

A crowd of stops (``_CROWD`` or more) shares its lists too. A kind's list is then a round of
that kind's shared list in the namespace: one list, selected by the label every job's
objects carry (the job-id label; a Workload's, Kueue's job-uid label), kept as metadata,
and filtered by each stop as its own selector would have been on the server. A round serves
exactly the stops that asked before it was sent; a stop asking while one is in flight joins
the next. So each stop's list is still a consistent read sent after its makers were proven
gone, which is all the proof asks of it, and N stops in one chain pass make a few lists of
each kind instead of N (issue 11: 1,000 stops at once were 1,000 lists per pass on a
saturated API server). A round that fails fails each of its stops as its own list would
have, and each lists again after ``_PASS_WAIT``.

A maker held by a finalizer does not hold the rest back: once all a kind holds is being
deleted, the kinds it makes are listed (what it made is deleted meanwhile), and listed
again once it has gone.

What StopJob deletes itself, each under its UID precondition (idempotent: a second delete
of the same UID is a 404, and a newer object of that name is a 409 and stays): the
TrainJobs, at once; objects with no owner (orphans), at once; objects whose owners are gone,
once the garbage collector has had ``_GC_GRACE`` (at most a quarter of the time) to do it
first, or at once in a crowd, whose deletions the collector works through too slowly to
wait for (:meth:`_Stop.gc_grace`). So a job whose objects go promptly costs one delete,
and the rest of its requests are one list and at most one watch per kind.

One thing of another controller's StopJob may release: the Job controller's
``batch.kubernetes.io/job-tracking`` finalizer, on a pod being deleted whose Job is gone
(a GET of the owner by name finds nothing, or another UID), once the Job controller has had
``_GC_GRACE`` to do it. The finalizer only lets the Job controller count the pod in its
Job's status; with the Job gone nothing is left to count, and the Job controller releases
such pods itself. When it does not (its informers stale after etcd compactions, seen in
the fault suite), the pod would otherwise stay, and the namespace with it, until someone
restarted the kube-controller-manager. The kubelet still ends the pod's containers as it
would; the finalizer does not hold them.

Foreground deletion is not used: it keeps the TrainJob until every dependant is gone and
a stuck pod would then hide the whole job behind a deletionTimestamp.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.objects import labels_of, meta, metadata_only
from dispatch_kubeflow.core.times import format_microtime
from dispatch_kubeflow.find import (
    MADE_BY,
    Found,
    belongs,
    selector,
    trainjob_name_pattern,
    uid_selector,
)
from dispatch_kubeflow.informer import Feed, Informers, View, revision
from dispatch_kubeflow.kube import KubeAPI, Resource, WatchEvent
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
from dispatch_kubeflow.state import POD_READS, TRAINJOB_READS
from dispatch_kubeflow.waits import cancel_all

log = logging.getLogger(__name__)

_PASS_WAIT = 1.0
"""How long a kind whose list or watch failed waits before it is listed again."""
_GC_GRACE = 1.0
"""How long the garbage collector gets to delete an object whose owners are gone before
StopJob deletes it itself (at most a quarter of ``timeouts.stopJob``)."""
_CROWD = 3
"""How many concurrent stops of one Backend start an informer for a kind (see above)."""
_RUNNING: weakref.WeakKeyDictionary[Informers, int] = weakref.WeakKeyDictionary()
"""How many stops each Backend's informers serve now."""
REPORTING_CONTROLLER = f"{names.DOMAIN}/kubeflow"
Obj = dict[str, Any]

_WIDE: Mapping[Resource, str] = {
    **{res: names.JOB_ID_LABEL for res in (TRAINJOB, TRAINING_RUNTIME, JOBSET, JOB, POD)},
    WORKLOAD: names.KUEUE_JOB_UID_LABEL,
}
"""The selector of a kind's shared list: the label a stop's own selector names, for every
job (a stop keeps those of its job, as its own selector would have)."""


class _Rounds:
    """One kind's shared list in a namespace, for a crowd of stops (the module docstring):
    a round is one list, and it serves every stop that asked for one before it was sent, so
    each stop's proof still rests on a consistent read sent after it asked."""

    def __init__(self, kube: KubeAPI, res: Resource, namespace: str, wide: str) -> None:
        self.kube, self.res, self.namespace, self.wide = kube, res, namespace, wide
        self.next: asyncio.Future[tuple[list[Obj], str]] | None = None
        """The round not sent yet, which every stop asking now joins."""
        self.sending: asyncio.Task[None] | None = None

    async def fresh(self) -> tuple[list[Obj], str]:
        if self.next is None:
            self.next = asyncio.get_running_loop().create_future()
            # Retrieved here should every stop of the round have been cancelled meanwhile.
            self.next.add_done_callback(lambda f: f.cancelled() or f.exception())
        joined = self.next
        if self.sending is None or self.sending.done():
            self.sending = asyncio.create_task(self._send())
        # Shielded: one stop cancelled does not cancel the round the others wait for.
        return await asyncio.shield(joined)

    async def _send(self) -> None:
        while self.next is not None:
            # Taken before the list is sent: whoever asks from now on joins the next round.
            round_, self.next = self.next, None
            try:
                # Metadata alone, sent and kept: all a stop reads (names, labels, owners,
                # versions), and a tenth of a pod's bytes on a busy API server.
                got = await self.kube.list(self.res, self.namespace, label_selector=self.wide,
                                           trim=metadata_only, metadata=True)
            except asyncio.CancelledError:
                round_.cancel()
                raise
            except Exception as exc:
                # Handed on, not handled: every stop of the round judges the failure as it
                # would its own list's, and a bug is raised in each of them.
                round_.set_exception(exc)
            else:
                round_.set_result(got)


_SHARED: weakref.WeakKeyDictionary[Informers, dict[tuple[Resource, str], _Rounds]] = (
    weakref.WeakKeyDictionary())
"""Each Backend's shared lists, by kind and namespace."""


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
        # A record, not a decision: a repeated StopJob records its reason again, by design.
        await kube.create(EVENT, body, m["namespace"])
    except errors.KubeError as exc:
        log.warning("StopJob: could not record the reason on TrainJob %s: %s", m["name"], exc)


async def _delete(kube: KubeAPI, f: Found) -> None:
    m = meta(f.obj)
    # Under the UID StopJob saw: idempotent (gone already: None), and a conflict means the
    # name now holds a newer object, which its own view judges.
    with contextlib.suppress(errors.KubeConflict):
        await kube.delete(f.res, str(m["name"]), str(m.get("namespace") or ""),
                          uid=f.uid or None, propagation="Background")


def _uncertain(exc: errors.KubeError) -> bool:
    """A failure after which a write may or may not have taken effect (no answer, a 5xx), or
    a server shedding load (429). StopJob's writes are idempotent under their preconditions
    (a UID, a resourceVersion), so it sends them again on a later pass rather than raise:
    under load a stop is still a report (issue 11: 1,000 stops at once, a DELETE timed out)."""
    return exc.status in (0, 429) or 500 <= exc.status <= 599


def _makes(kinds: Sequence[Resource]) -> dict[Resource, set[Resource]]:
    """Each kind -> every kind its objects make, directly or through others."""
    out: dict[Resource, set[Resource]] = {k: set() for k in kinds}
    changed = True
    while changed:
        changed = False
        for made, makers in MADE_BY.items():
            for maker in makers:
                if made in out and maker in out:
                    new = {made} | out[made]
                    if not new <= out[maker]:
                        out[maker] |= new
                        changed = True
    return out


@dataclass
class _Kind:
    """StopJob's view of one kind (see the module docstring)."""

    res: Resource
    live: dict[str, Found] = field(default_factory=dict)
    """What of the job exists, by UID, as the last list and the watch since say."""
    current: bool = False
    """Listed when its makers were proven gone, and kept current since by its watch."""
    rv: str = ""
    label_selector: str | None = None
    failure: errors.KubeError | None = None
    """Why the last list or watch failed (None: it did not)."""
    retry_at: float = 0.0
    early: bool = False
    """Listed while a maker was still there, being deleted: listed again once it is gone."""
    watch: asyncio.Task[None] | None = None
    feed: Feed | None = None
    """The informer this view follows instead of a watch of its own (see the module doc)."""
    since: int = 0
    """The resourceVersion of the list the informer is followed from."""
    keys: frozenset[str] = frozenset()
    """The keys of the job's objects in ``feed``."""


class _Stop:
    """One StopJob's state (see the module docstring)."""

    def __init__(self, kube: KubeAPI, namespace: str, job: JobID, kinds: Sequence[Resource],
                 limit: float, *, view: View | None = None, scan: Feed | None = None,
                 feeds: Mapping[Resource, Feed] | None = None,
                 changed: asyncio.Event | None = None,
                 crowd: Callable[[], bool] = lambda: False,
                 shared: Informers | None = None) -> None:
        self.kube = kube
        self.shared = shared
        """The Backend's informers, whose shared lists a crowd of stops uses (None: alone)."""
        self.namespace = namespace
        self.job = job
        self.kinds = {k: _Kind(k) for k in kinds}
        self.makes = _makes(kinds)
        self.view = view
        """The subscription to the Backend's informers (None: this stop watches alone)."""
        self.scan = scan
        """The informer of the namespace's Workloads, for the orphan scan (None: a list)."""
        self.feeds = dict(feeds or {})
        self.crowd = crowd
        """Whether at least ``_CROWD`` stops of the Backend run now (see the module doc)."""
        self.subscribed: set[tuple[Feed, str]] = set()
        self.broken: set[Feed] = set()
        """Informers whose watch ended by an error: this stop watches their kinds alone."""
        self.scanned = False
        self.grace = min(_GC_GRACE, limit / 4)
        self.pattern = trainjob_name_pattern(job)
        self.seen: dict[str, Found] = {}
        self.owner_uids: set[str] = set()
        """The UIDs of the job's TrainJobs, present or gone (the Workloads' selector)."""
        self.asked: set[str] = set()
        """The UIDs StopJob asked to delete (once each)."""
        self.listed: set[Resource] = set()
        """The kinds listed at least once."""
        self.due: dict[str, float] = {}
        self.retry: dict[str, float] = {}
        """When a delete that failed uncertainly (:func:`_uncertain`) is sent again, by UID."""
        """When StopJob deletes an object itself, by UID, if it is still there and not going."""
        self.release_at: dict[str, float] = {}
        """When StopJob releases a pod's job-tracking finalizer, by UID, if it still holds."""
        self.released: dict[str, str] = {}
        """The resourceVersion each pod's finalizer was last released at (once per version)."""
        self.changed = changed or asyncio.Event()
        self.loop = asyncio.get_running_loop()

    # --- the views ------------------------------------------------------------------------
    def gone(self, res: Resource) -> bool:
        k = self.kinds.get(res)
        return k is None or (k.current and not k.live)

    def going(self, res: Resource) -> bool:
        """Current, and all it holds is being deleted (held by a finalizer)."""
        k = self.kinds.get(res)
        return k is None or (k.current and all(meta(f.obj).get("deletionTimestamp")
                                               for f in k.live.values()))

    def may_list(self, k: _Kind) -> bool:
        """Whether ``k`` is listed now: its makers are gone, or going (held by a finalizer:
        what they made is deleted meanwhile; ``early`` lists it again once they are gone)."""
        makers = MADE_BY.get(k.res, ())
        if all(self.gone(m) for m in makers):
            k.early = False
            return True
        if all(self.going(m) for m in makers):
            k.early = True
            return True
        return False

    def _saw(self, k: _Kind, f: Found) -> None:
        # Kept as metadata alone: all a stop reads of what it saw (names, labels, owners,
        # finalizers, versions), and 1,000 concurrent stops would otherwise hold 1,000
        # TrainJobs, Workloads and pods whole.
        f = Found(f.res, metadata_only(f.obj))
        new = f.uid not in self.seen
        # Everything seen is reported, whoever removes it (StopJob or the garbage collector).
        self.seen.setdefault(f.uid, f)
        k.live[f.uid] = f
        if not new:
            return
        if f.res is TRAINJOB and f.uid not in self.owner_uids:
            self.owner_uids.add(f.uid)
            self._stale(WORKLOAD)  # its selector names the TrainJobs' UIDs
        for made in self.makes.get(k.res, ()):
            # A new maker: what it makes is listed again once it is gone.
            self._stale(made)

    def _stale(self, res: Resource) -> None:
        k = self.kinds.get(res)
        if k is not None:
            k.current = False

    async def list_kind(self, k: _Kind, *, watch: bool = True) -> None:
        try:
            if k.res is WORKLOAD:
                items, rv, sel = await self._list_workloads()
            else:
                sel = selector(k.res, self.job)
                items, rv = await self._list(k.res, sel)
        except errors.KubeNotFound:
            items, rv, sel = [], "", None  # the cluster does not serve it: none exists
        except errors.KubeError as exc:
            log.warning("StopJob %s: cannot list %s: %s", self.job, k.res.plural, exc)
            k.failure = exc
            k.retry_at = self.loop.time() + _PASS_WAIT
            return
        if k.watch is not None:
            # The new list replaces the view, and a new watch goes on from its version.
            await cancel_all([k.watch])
            k.watch = None
        k.failure, k.rv, k.label_selector, k.live, k.current = None, rv, sel, {}, True
        k.feed = None
        self.listed.add(k.res)
        for o in items:
            if belongs(k.res, o, self.job, self.owner_uids, self.pattern):
                self._saw(k, Found(k.res, o))
        # Nothing to watch go when the list holds nothing of the job: a kind the cluster
        # makes is listed only once its makers are gone (a maker seen again lists it again),
        # and a TrainJob or copy made after the list is a later Start's, not this stop's.
        # A Workload is watched by its job's UIDs only (no selector: no watch at all).
        if watch and k.live and rv and sel is not None:
            feed = self.feed_for(k)
            if feed is None:
                k.watch = asyncio.create_task(self._watch(k))
            else:
                self.follow_from(k, feed)

    # --- following an informer (see the module docstring) ---------------------------------
    def feed_for(self, k: _Kind) -> Feed | None:
        """The informer ``k`` follows from its list, or None: a watch of its own."""
        feed = self.feeds.get(k.res)
        if (self.view is None or feed is None or feed in self.broken
                or revision(k.rv) is None
                or not all(feed.covers(f.obj) for f in k.live.values())):
            return None
        if k.res is WORKLOAD or self.crowd() or self.view.running(feed):
            return feed
        return None

    def follow_from(self, k: _Kind, feed: Feed) -> None:
        assert self.view is not None
        k.feed, k.since = feed, revision(k.rv) or 0
        k.keys = frozenset(self.owner_uids if k.res is WORKLOAD else {str(self.job)})
        for key in k.keys:
            if (feed, key) not in self.subscribed:
                self.subscribed.add((feed, key))
                self.view.add(feed, key)

    def follow(self, k: _Kind) -> None:
        """Bring ``k``'s view up to what its informer says (see the module docstring)."""
        assert self.view is not None
        assert k.feed is not None
        held: dict[str, Obj] = {}
        at: int | None = None
        try:
            for key in k.keys:
                snap = self.view.snapshot(k.feed, key)
                if snap is None:
                    return  # not listed yet: the list's view stands
                at = snap.revision
                held.update((str(meta(o).get("uid")), o) for o in snap.objects.values())
        except errors.KubeError as exc:
            log.warning("StopJob %s: the informer of %s ended (%s); watching alone",
                        self.job, k.res.plural, exc)
            self.broken.add(k.feed)
            k.feed, k.current = None, False  # listed again, then watched alone
            return
        if at is None:
            return  # a version that is not an integer: nothing to conclude yet
        for uid, f in list(k.live.items()):
            o = held.get(uid)
            if o is not None:
                if (revision(meta(o).get("resourceVersion")) or 0) > (
                        revision(meta(f.obj).get("resourceVersion")) or 0):
                    self._apply(k, WatchEvent("MODIFIED", o))
            elif at >= (revision(meta(f.obj).get("resourceVersion")) or 0):
                self._apply(k, WatchEvent("DELETED", f.obj))  # gone by version at
        for uid, o in held.items():
            if uid not in k.live and (revision(meta(o).get("resourceVersion")) or 0) > k.since:
                self._apply(k, WatchEvent("ADDED", o))  # made since the list

    async def _list_workloads(self) -> tuple[list[Obj], str, str | None]:
        """The job's Workloads, by Kueue's job-uid label; the first time, also the orphans
        whose TrainJob StopJob never saw (a scan of the namespace, see below)."""
        if not self.scanned:
            if self.scan is None or self.view is None or self.scan in self.broken:
                # No informer to share: one unselected list. Its resourceVersion serves the
                # selector-scoped watch: that watch misses no change after it.
                items, rv = await self.kube.list(WORKLOAD, self.namespace)
                self._learn_owners(items)
                self.scanned = True
                return items, rv, uid_selector(self.owner_uids) if self.owner_uids else None
            # The shared informer's cache (one list for every concurrent stop), only to learn
            # the job-uid of orphans whose TrainJob went before this stop: the list that
            # proves anything is the direct, selector-scoped one below. An orphan's Workload
            # is older than its TrainJob's deletion; the cache misses it only if the watch
            # lags by more than that, and then the next StopJob finds it.
            try:
                self._learn_owners(await self.view.whole(self.scan))
            except errors.KubeError:
                # The informer's watch ended by an error: the next pass lists instead.
                self.broken.add(self.scan)
                raise
            self.scanned = True
        if not self.owner_uids:
            return [], "", None
        sel = uid_selector(self.owner_uids)
        items, rv = await self._list(WORKLOAD, sel)
        return items, rv, sel

    async def _list(self, res: Resource, sel: str | None) -> tuple[list[Obj], str]:
        """The job's objects of ``res`` by ``sel``, in one consistent read sent now: the
        stop's own list, or in a crowd the next round of the kind's shared list (see the
        module docstring), filtered here as ``sel`` would have been on the server."""
        feed = self.feeds.get(res)
        wide = _WIDE.get(res)
        if (self.shared is None or feed is None or feed in self.broken or wide is None
                or sel is None or not self.crowd()):
            return await self.kube.list(res, self.namespace, label_selector=sel)
        lists = _SHARED.setdefault(self.shared, {})
        key = (res, self.namespace)
        rounds = lists.get(key)
        if rounds is None:
            rounds = lists[key] = _Rounds(self.kube, res, self.namespace, wide)
        items, rv = await rounds.fresh()
        label = names.KUEUE_JOB_UID_LABEL if res is WORKLOAD else names.JOB_ID_LABEL
        mine = self.owner_uids if res is WORKLOAD else {str(self.job)}
        return [o for o in items if labels_of(o).get(label) in mine], rv

    def _learn_owners(self, workloads: Sequence[Obj]) -> None:
        for o in workloads:
            if belongs(WORKLOAD, o, self.job, self.owner_uids, self.pattern):
                uid = labels_of(o).get(names.KUEUE_JOB_UID_LABEL)
                if uid:
                    self.owner_uids.add(uid)

    async def _watch(self, k: _Kind) -> None:
        try:
            while True:
                async for ev in self.kube.watch(k.res, self.namespace, resource_version=k.rv,
                                                label_selector=k.label_selector,
                                                timeout_seconds=60):
                    k.rv = str(meta(ev.object).get("resourceVersion", k.rv))
                    self._apply(k, ev)
                    self.changed.set()
                # The server ended the watch (its timeout): go on from where it ended.
        except errors.KubeGone:
            k.current = False  # expired: list again
        except errors.KubeError as exc:
            log.warning("StopJob %s: watch of %s failed: %s", self.job, k.res.plural, exc)
            k.current, k.failure = False, exc
            k.retry_at = self.loop.time() + _PASS_WAIT
        self.changed.set()

    def _apply(self, k: _Kind, ev: WatchEvent) -> None:
        uid = str(meta(ev.object).get("uid", ""))
        if ev.type == "DELETED":
            k.live.pop(uid, None)
            self.due.pop(uid, None)
            self.release_at.pop(uid, None)
        elif ev.type in ("ADDED", "MODIFIED"):
            if belongs(k.res, ev.object, self.job, self.owner_uids, self.pattern):
                f = Found(k.res, ev.object)
                self._saw(k, f)
            else:
                k.live.pop(uid, None)

    # --- deleting -------------------------------------------------------------------------
    def due_deletes(self, now: float) -> list[Found]:
        """What StopJob deletes itself now (see the module docstring)."""
        # An owner being deleted (a deletionTimestamp, held by a finalizer) does not hold
        # the garbage collector back for long, nor StopJob.
        live = {uid for k in self.kinds.values() for uid, f in k.live.items()
                if not meta(f.obj).get("deletionTimestamp")}
        out = []
        for k in self.kinds.values():
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
        return 0.0 if self.crowd() else self.grace

    def due_releases(self, now: float) -> list[Found]:
        """The pods whose job-tracking finalizer StopJob releases now (the module docstring):
        being deleted, held by it, no owning Job in the Job view, and the grace passed."""
        pods, jobs = self.kinds.get(POD), self.kinds.get(JOB)
        if pods is None or jobs is None or not jobs.current:
            return []
        out = []
        for f in pods.live.values():
            m = meta(f.obj)
            if (not m.get("deletionTimestamp")
                    or names.JOB_TRACKING_FINALIZER not in (m.get("finalizers") or [])
                    or any(uid in jobs.live for _, uid in _job_owners(m))):
                self.release_at.pop(f.uid, None)
            elif self.released.get(f.uid) != str(m.get("resourceVersion")) and (
                    now >= self.release_at.setdefault(f.uid, now + self.grace)):
                out.append(f)
        return out

    def _forget_gone(self) -> None:
        """Drop the times of what no view holds (gone, or not seen by a list again): a past
        time left behind would wake the passes at once, again and again."""
        live = {uid for k in self.kinds.values() for uid in k.live}
        for times in (self.due, self.release_at, self.retry):
            for uid in [u for u in times if u not in live]:
                del times[uid]

    async def release(self, f: Found) -> None:
        try:
            await self._release(f)
        except errors.KubeError as exc:
            if not _uncertain(exc):
                raise
            log.warning("StopJob %s: releasing pod %s failed (%s); again in %.1fs", self.job,
                        meta(f.obj).get("name"), exc, _PASS_WAIT)
            self.released.pop(f.uid, None)
            self.release_at[f.uid] = self.loop.time() + _PASS_WAIT

    async def _release(self, f: Found) -> None:
        m = meta(f.obj)
        name, rv = str(m["name"]), str(m.get("resourceVersion"))
        self.release_at.pop(f.uid, None)
        self.released[f.uid] = rv
        for owner, uid in _job_owners(m):
            job = await self.kube.get_or_none(JOB, owner, self.namespace)
            if job is not None and meta(job).get("uid") == uid:
                # Its Job is there (not one of this job's, by its labels): the Job
                # controller's to release. Looked at again after a while.
                del self.released[f.uid]
                self.release_at[f.uid] = self.loop.time() + 4 * self.grace
                return
        rest = [x for x in m.get("finalizers") or [] if x != names.JOB_TRACKING_FINALIZER]
        log.info("StopJob %s: pod %s is held by the Job controller's finalizer of a Job "
                 "that is gone; releasing it", self.job, name)
        # Fenced by the resourceVersion judged above: any change since (the Job controller
        # released it, a finalizer was added) is a 409, and the watch brings the version to
        # judge again. Released already or gone: the watch says so.
        try:
            await self.kube.patch(POD, name, {"metadata": {"resourceVersion": rv,
                                                           "finalizers": rest}},
                                  self.namespace)
        except (errors.KubeConflict, errors.KubeNotFound):
            pass
        except errors.KubeForbidden as exc:
            log.warning("StopJob %s: may not release the finalizer of pod %s (%s); it stays "
                        "until the Job controller does", self.job, name, exc)

    async def delete_all(self, deletes: Sequence[Found]) -> None:
        # What these objects made goes with them, removed by the garbage collector perhaps
        # before its kind's turn: list each such kind once first, so the report names what
        # was there (an orphaned JobSet's Jobs). Not a view: listed again in turn.
        first = [k for k in self.kinds.values()
                 if k.res not in self.listed and not k.current
                 and any(k.res in self.makes.get(f.res, ()) for f in deletes
                         if f.res is not TRAINJOB)]
        await asyncio.gather(*(self.list_kind(k, watch=False) for k in first))
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
            await _delete(self.kube, f)
        except errors.KubeError as exc:
            if not _uncertain(exc):
                raise
            log.warning("StopJob %s: deleting %s %s failed (%s); again in %.1fs", self.job,
                        f.res.kind, meta(f.obj).get("name"), exc, _PASS_WAIT)
            self.asked.discard(f.uid)
            self.retry[f.uid] = self.loop.time() + _PASS_WAIT

    # --- the passes -----------------------------------------------------------------------
    def done(self) -> bool:
        return all(k.current and not k.live and not k.early for k in self.kinds.values())

    def raise_bugs(self) -> None:
        """A watch task that ended by anything but a KubeError is a bug: raise it here."""
        for k in self.kinds.values():
            if k.watch is not None and k.watch.done() and not k.watch.cancelled():
                k.watch.result()

    async def run(self, reason: str, until: float) -> StopReport:
        reasons: list[asyncio.Task[None]] = []
        try:
            roots = [k for k in self.kinds.values() if k.res not in MADE_BY]
            await asyncio.gather(*(self.list_kind(k) for k in roots))
            # The reasons are recorded alongside the deletes, not before them: a record, not a
            # step of the proof, and one round trip less for a job whose objects go promptly.
            reasons = [asyncio.create_task(record_reason(self.kube, f.obj, reason))
                       for f in self.seen.values() if f.res is TRAINJOB]
            while True:
                self.raise_bugs()
                for k in self.kinds.values():
                    if k.feed is not None and k.current:
                        self.follow(k)
                now = self.loop.time()
                for k in self.kinds.values():
                    if k.early and all(self.gone(m) for m in MADE_BY.get(k.res, ())):
                        k.current = False  # listed while its makers went: list it again
                todo = [k for k in self.kinds.values()
                        if not k.current and now >= k.retry_at and self.may_list(k)]
                if todo:
                    await asyncio.gather(*(self.list_kind(k) for k in todo))
                    continue
                deletes = self.due_deletes(now)
                if deletes:
                    await self.delete_all(deletes)
                    continue
                releases = self.due_releases(now)
                if releases:
                    await asyncio.gather(*(self.release(f) for f in releases))
                    continue
                if self.done() or now >= until:
                    break
                self._forget_gone()
                wake = min([until, *self.due.values(), *self.release_at.values(),
                            *(t for t in self.retry.values() if t > now),
                            *(k.retry_at for k in self.kinds.values() if k.failure)])
                self.changed.clear()  # no await since the checks above: no wake-up is lost
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.0, wake - now)):
                        await self.changed.wait()
            await asyncio.gather(*reasons)  # record_reason raises nothing of the API's
        finally:
            await cancel_all([*(k.watch for k in self.kinds.values() if k.watch is not None),
                              *(t for t in reasons if not t.done())])
        if not self.done():
            # Time is up: list what is not current, so the report names what is still there.
            await asyncio.gather(*(self.list_kind(k, watch=False)
                                   for k in self.kinds.values() if not k.current))
        return self.report()

    def report(self) -> StopReport:
        present = {uid for k in self.kinds.values() for uid in k.live}
        pods_left = list(self.kinds[POD].live.values()) if POD in self.kinds else []
        unreadable = {k.res for k in self.kinds.values() if not k.current}
        stopped: list[ObjectRef] = []
        alive: list[ObjectRef] = []
        unproven: list[ObjectRef] = []
        for uid, f in self.seen.items():
            if uid in present or (f.res is not POD and _has_pods_beneath(f, pods_left)):
                alive.append(f.ref)
            elif f.res in unreadable or (f.res is not POD and POD in unreadable):
                unproven.append(f.ref)
            else:
                stopped.append(f.ref)
        return StopReport(tuple(sorted(stopped, key=_key)), tuple(sorted(alive, key=_key)),
                          tuple(sorted(unproven, key=_key)))


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
                   shared: Informers | None = None,
                   feeds: Sequence[Feed] = ()) -> StopReport:
    """Delete everything of ``job`` of the ``kinds`` (the mode's); see the module docstring.

    ``shared`` (a Backend's informers): concurrent stops share their watches, and ``feeds``
    (the mode's): a feed of Workloads there serves the orphan scan from its informer instead
    of a list of the whole namespace, and the Workloads' view.
    """
    seconds = limit.total_seconds()
    until = asyncio.get_running_loop().time() + seconds
    if shared is None:
        return await _Stop(kube, namespace, job, kinds, seconds).run(reason, until)
    scan = next((f for f in feeds if f.res is WORKLOAD and f.namespace == namespace
                 and WORKLOAD in kinds), None)
    by_kind = {res: f for res, f in stop_feeds(namespace).items() if res in kinds}
    if scan is not None:
        by_kind[WORKLOAD] = scan
    _RUNNING[shared] = _RUNNING.get(shared, 0) + 1
    changed = asyncio.Event()
    try:
        async with shared.watching(woken=changed) as view:
            stop = _Stop(kube, namespace, job, kinds, seconds, view=view, scan=scan,
                         feeds=by_kind, changed=changed,
                         crowd=lambda: _RUNNING.get(shared, 0) >= _CROWD, shared=shared)
            if scan is not None:
                # Subscribed for the whole stop, so concurrent stops share the feed's one
                # list and watch. The key matters not: the scan reads the whole cache.
                stop.subscribed.add((scan, ""))
                view.add(scan, "")
            return await stop.run(reason, until)
    finally:
        _RUNNING[shared] -= 1


def _job_owners(m: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A pod's owning Jobs: (name, UID) of each ownerReference of kind Job."""
    return [(str(o.get("name")), str(o.get("uid"))) for o in m.get("ownerReferences") or []
            if o.get("kind") == "Job" and str(o.get("apiVersion", "")).startswith("batch/")]


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

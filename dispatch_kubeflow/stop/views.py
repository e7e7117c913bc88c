"""StopJob's view of each kind: what of the job exists, and the proof that it is gone.

StopJob keeps one view per kind: a list, and a watch from that list's resourceVersion that
keeps it current (or the Backend's informer, :mod:`dispatch_kubeflow.stop.sharing`). A kind
that the cluster makes (:data:`~dispatch_kubeflow.find.MADE_BY`: JobSets and Workloads from
TrainJobs, Jobs from JobSets, pods from Jobs) is listed only once every kind that makes it
is proven empty, and listed again if one of its makers shows a new object meanwhile.

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

Every read is selector-scoped to the job, so concurrent stops in one namespace do not read
each other's objects; Workloads, which carry none of the job's labels, are the one
exception, scanned once per stop for orphans, from the Backend's shared Workload informer
when there is one (one list for every concurrent stop).

A maker held by a finalizer does not hold the rest back: once all a kind holds is being
deleted, the kinds it makes are listed (what it made is deleted meanwhile), and listed
again once it has gone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.objects import labels_of, meta, metadata_only
from dispatch_kubeflow.find import (
    MADE_BY,
    Found,
    belongs,
    selector,
    trainjob_name_pattern,
    uid_selector,
)
from dispatch_kubeflow.informer import Feed, revision
from dispatch_kubeflow.kube import KubeAPI, Resource, WatchEvent
from dispatch_kubeflow.kube.resources import TRAINJOB, WORKLOAD
from dispatch_kubeflow.model import JobID
from dispatch_kubeflow.stop.sharing import Sharing

log = logging.getLogger(__name__)

Obj = dict[str, Any]


def makes(kinds: Sequence[Resource]) -> dict[Resource, set[Resource]]:
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
class Kind:
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
    """The informer this view follows instead of a watch of its own (see
    :mod:`dispatch_kubeflow.stop.sharing`)."""
    since: int = 0
    """The resourceVersion of the list the informer is followed from."""
    keys: frozenset[str] = frozenset()
    """The keys of the job's objects in ``feed``."""


class Views:
    """One stop's views of the job's kinds (see the module docstring)."""

    def __init__(self, kube: KubeAPI, namespace: str, job: JobID, kinds: Sequence[Resource],
                 sharing: Sharing, changed: asyncio.Event | None = None) -> None:
        self.kube = kube
        self.namespace = namespace
        self.job = job
        self.sharing = sharing
        """Which view each kind keeps: its own list and watch, or shared ones."""
        self.pass_wait = sharing.limits.pass_wait
        self.kinds = {k: Kind(k) for k in kinds}
        self.makes = makes(kinds)
        self.scanned = False
        self.pattern = trainjob_name_pattern(job)
        self.seen: dict[str, Found] = {}
        self.owner_uids: set[str] = set()
        """The UIDs of the job's TrainJobs, present or gone (the Workloads' selector)."""
        self.listed: set[Resource] = set()
        """The kinds listed at least once."""
        self.on_deleted: list[Callable[[str], object]] = []
        """Called with the UID of each object a view sees deleted (its times are dropped)."""
        self.changed = changed or asyncio.Event()
        self.loop = asyncio.get_running_loop()
        self.tasks: asyncio.TaskGroup | None = None
        """The stop's task group while its passes run: it owns the kinds' watches."""

    def gone(self, res: Resource) -> bool:
        k = self.kinds.get(res)
        return k is None or (k.current and not k.live)

    def going(self, res: Resource) -> bool:
        """Current, and all it holds is being deleted (held by a finalizer)."""
        k = self.kinds.get(res)
        return k is None or (k.current and all(meta(f.obj).get("deletionTimestamp")
                                               for f in k.live.values()))

    def may_list(self, k: Kind) -> bool:
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

    def _saw(self, k: Kind, f: Found) -> None:
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

    async def list_kind(self, k: Kind, *, watch: bool = True) -> None:
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
            k.retry_at = self.loop.time() + self.pass_wait
            return
        if k.watch is not None:
            # The new list replaces the view, and a new watch goes on from its version. (Had
            # the old one failed, the stop's task group raises its error: it is not lost.)
            k.watch.cancel()
            await asyncio.wait([k.watch])
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
            feed = self.sharing.feed_for(k.res, k.rv, (f.obj for f in k.live.values()))
            if feed is None:
                assert self.tasks is not None, "a watch outside the stop's passes"
                k.watch = self.tasks.create_task(self._watch(k))
            else:
                self.follow_from(k, feed)

    # --- following an informer (see dispatch_kubeflow.stop.sharing) -----------------------
    def follow_from(self, k: Kind, feed: Feed) -> None:
        k.feed, k.since = feed, revision(k.rv) or 0
        k.keys = frozenset(self.owner_uids if k.res is WORKLOAD else {str(self.job)})
        for key in k.keys:
            self.sharing.subscribe(feed, key)

    def follow(self, k: Kind) -> None:
        """Bring ``k``'s view up to what its informer says (see
        :mod:`dispatch_kubeflow.stop.sharing`)."""
        view = self.sharing.view
        assert view is not None
        assert k.feed is not None
        held: dict[str, Obj] = {}
        at: int | None = None
        try:
            for key in k.keys:
                snap = view.snapshot(k.feed, key)
                if snap is None:
                    return  # not listed yet: the list's view stands
                at = snap.revision
                held.update((str(meta(o).get("uid")), o) for o in snap.objects.values())
        except errors.KubeError as exc:
            log.warning("StopJob %s: the informer of %s ended (%s); watching alone",
                        self.job, k.res.plural, exc)
            self.sharing.broken.add(k.feed)
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

    # --- listing --------------------------------------------------------------------------
    async def _list_workloads(self) -> tuple[list[Obj], str, str | None]:
        """The job's Workloads, by Kueue's job-uid label; the first time, also the orphans
        whose TrainJob StopJob never saw (a scan of the namespace, see below)."""
        if not self.scanned:
            scan = self.sharing.scanner()
            if scan is None:
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
            assert self.sharing.view is not None
            try:
                # Bounded: an informer whose lists fail retries them without end, and its
                # first sync would hold the stop past its deadline.
                async with asyncio.timeout(self.pass_wait):
                    self._learn_owners(await self.sharing.view.whole(scan))
            except TimeoutError:
                self.sharing.broken.add(scan)  # the next pass lists instead
                raise errors.KubeUnreachable(
                    f"the Workloads of {self.namespace} were not listed within "
                    f"{self.pass_wait:g}s") from None
            except errors.KubeError:
                # The informer's watch ended by an error: the next pass lists instead.
                self.sharing.broken.add(scan)
                raise
            self.scanned = True
        if not self.owner_uids:
            return [], "", None
        sel = uid_selector(self.owner_uids)
        items, rv = await self._list(WORKLOAD, sel)
        return items, rv, sel

    async def _list(self, res: Resource, sel: str | None) -> tuple[list[Obj], str]:
        """The job's objects of ``res`` by ``sel``, in one consistent read sent now: the
        stop's own list, or in a crowd the next round of the kind's shared list (see
        :mod:`dispatch_kubeflow.stop.rounds`), filtered here as ``sel`` would have been on
        the server."""
        rounds = self.sharing.rounds(res, sel)
        if rounds is None:
            return await self.kube.list(res, self.namespace, label_selector=sel)
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

    # --- watching -------------------------------------------------------------------------
    async def _watch(self, k: Kind) -> None:
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
            k.retry_at = self.loop.time() + self.pass_wait
        self.changed.set()

    def _apply(self, k: Kind, ev: WatchEvent) -> None:
        uid = str(meta(ev.object).get("uid", ""))
        if ev.type == "DELETED":
            k.live.pop(uid, None)
            for forget in self.on_deleted:
                forget(uid)
        elif ev.type in ("ADDED", "MODIFIED"):
            if belongs(k.res, ev.object, self.job, self.owner_uids, self.pattern):
                f = Found(k.res, ev.object)
                self._saw(k, f)
            else:
                k.live.pop(uid, None)

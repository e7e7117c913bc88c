"""A shared, re-listing informer: one watch per kind, namespace and selector, many waiters.

A :class:`Backend <dispatch_kubeflow.backend.Backend>` owns one :class:`Informers`. Each
:class:`Feed` (a kind in a namespace, with a selector covering every job) is one
:meth:`KubeAPI.observe <dispatch_kubeflow.kube.KubeAPI.observe>` stream, so it lists,
watches, lists again after a 410 and backs off after failures, whatever the number of
waiters. Its objects are kept in a cache, indexed by a key (an object's name, or one of its
labels' value): a waiter subscribes to a key per feed, is woken after every change of its
keys' objects and after every list, and judges the cache itself (:meth:`View.changed`).

Feeds of one kind, namespace and selector that differ only in their key share one informer:
one watch and one cache, indexed by each key in use (the waits' TrainJobs by name and
StopJob's by the job-id label are one watch). A feed says what its cache keeps of each object
(``keep``): the metadata, without ``managedFields``, and the fields its readers judge (the
waits' TrainJobs, Workloads and pods: what :mod:`dispatch_kubeflow.state` reads), or the
metadata alone (StopJob's JobSets, Jobs and runtime copies). A pod or a Workload is mostly
spec, a pod template, that no reader here looks at: 1,000 jobs' worth would cost the
process over 100 MB (issue 11).
The informer also keeps the resourceVersion its cache is at (:attr:`Snapshot.revision`):
resourceVersions of one kind are comparable integers (KEP-5504, stable since Kubernetes
1.35), so a reader that listed the kind itself at version X can tell whether the cache is
past X. StopJob's proof rests on that (:mod:`dispatch_kubeflow.stop`).

A feed's watch starts with its first subscriber and stops ``LINGER_SECONDS`` after its last
one left, unless another subscribes meanwhile: a wait followed by a StopJob or by the next
wait in the same namespace finds the watch running and its cache current, and lists nothing
again. An error that ends the watch (401, 403, 404) is raised in every subscriber, and the
next subscriber starts the watch afresh. Waits only observe: nothing here writes.
"""

from __future__ import annotations

import asyncio
import contextvars
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from dispatch_kubeflow.core.objects import metadata_only, project
from dispatch_kubeflow.errors import DispatchError
from dispatch_kubeflow.kube import KubeAPI, Resource, WatchEvent
from dispatch_kubeflow.kube.slots import AHEAD, CALL_BEGAN
from dispatch_kubeflow.waits import Owned

Obj = dict[str, Any]

WATCH_SECONDS = 60
"""Each watch request's ``timeoutSeconds`` (observe watches again after it)."""
LINGER_SECONDS = 30.0
"""How long a feed's watch goes on after its last subscriber left (see the module doc)."""


@dataclass(frozen=True, slots=True)
class Feed:
    """What one informer keeps current: a kind in one namespace, which objects, and the key
    its subscribers look them up by (the value of ``key_label``; None: the object's name).
    ``keep``: what the cache keeps of each object besides its metadata, as dotted paths
    (``()``: the metadata alone; None: the whole object), always without ``managedFields``.
    A reader of the cache may read nothing else."""

    res: Resource
    namespace: str
    label_selector: str | None = None
    key_label: str | None = None
    keep: tuple[str, ...] | None = None

    @property
    def source(self) -> tuple[Resource, str, str | None, tuple[str, ...] | None]:
        """What one informer serves: feeds alike but for their key share it."""
        return self.res, self.namespace, self.label_selector, self.keep

    def key(self, obj: Mapping[str, Any]) -> str | None:
        return _key(self.key_label, obj)

    def covers(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` is among the feed's objects by its selector, when the selector is
        one this can judge (none, or labels that must exist: ``a,b``); False otherwise."""
        if self.label_selector is None:
            return True
        wanted = self.label_selector.split(",")
        if not all(re.fullmatch(r"[A-Za-z0-9./_-]+", w) for w in wanted):
            return False
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(w in labels for w in wanted)


def _key(key_label: str | None, obj: Mapping[str, Any]) -> str | None:
    m = obj.get("metadata") or {}
    if key_label is None:
        return m.get("name")
    return (m.get("labels") or {}).get(key_label)


def revision(resource_version: object) -> int | None:
    """A resourceVersion as the integer it compares as (KEP-5504: a positive integer with no
    leading zero); None when it is not one, and then nothing may be concluded from it."""
    rv = str(resource_version or "")
    if not rv.isdigit() or rv.startswith("0") or not rv.isascii():
        return None
    return int(rv)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What one feed holds of one key now (see :meth:`View.snapshot`)."""

    revision: int | None
    """The resourceVersion the cache is at: of its last list or of the last event applied
    since (None: one was not an integer)."""
    objects: dict[str, Obj]
    """The key's objects, by name: the cache's own, read them and do not keep them."""


class View:
    """One waiter's subscription: one key in each of some feeds (see :meth:`changed`).

    ``woken``: the event set after every change of the view's keys' objects and after every
    list (the view's own, by default; a caller that waits on more than this view passes its
    own)."""

    def __init__(self, informers: Informers, woken: asyncio.Event | None = None) -> None:
        self._informers = informers
        self._wanted: list[tuple[_Informer, Feed, str]] = []
        self._woken = woken or asyncio.Event()
        self._woken.set()  # the first call judges what the cache holds already

    def wake(self) -> None:
        self._woken.set()

    def add(self, feed: Feed, key: str) -> None:
        """Subscribe to ``key`` of ``feed`` too (starting its watch if it is not running)."""
        self._wanted.append((self._informers.join(self, feed, key), feed, key))

    def running(self, feed: Feed) -> bool:
        """Whether ``feed``'s informer is running already (synced, its watch not ended)."""
        return self._informers.running(feed)

    def snapshot(self, feed: Feed, key: str) -> Snapshot | None:
        """The cache of a feed subscribed to, for ``key``; None until the feed has been
        listed. Raises the error that ended the feed's watch."""
        for inf, f, _ in self._wanted:
            if f.source == feed.source:
                inf.raise_error()
                if not inf.synced:
                    return None
                return Snapshot(inf.revision,
                                inf.indexes.get(feed.key_label, {}).get(key, {}))
        raise KeyError(f"not subscribed to {feed}")

    async def changed(self) -> list[dict[str, Obj]]:
        """Once every feed has been listed and something of this view changed since the last
        call: the objects of each (feed, key), by name, in the order subscribed.

        Raises the error that ended a feed's watch.
        """
        while True:
            await self._woken.wait()
            self._woken.clear()
            for inf, _, _ in self._wanted:
                inf.raise_error()
            if all(inf.synced for inf, _, _ in self._wanted):
                # Copies: the cache goes on changing under the caller.
                return [dict(inf.indexes.get(f.key_label, {}).get(key, {}))
                        for inf, f, key in self._wanted]

    async def whole(self, feed: Feed) -> list[Obj]:
        """Once ``feed`` (subscribed to) has been listed: every object it holds, whatever its
        key (for a scan a key cannot answer). The cache's own objects: read them, do not
        change them, and do not keep them past the next await. Raises the error that ended
        the feed's watch."""
        while True:
            for inf, f, _ in self._wanted:
                if f.source == feed.source:
                    inf.raise_error()
                    if inf.synced:
                        return list(inf.objects.values())
                    break
            else:
                raise KeyError(f"not subscribed to {feed}")
            await self._woken.wait()
            self._woken.clear()


class _Informer:
    """One source's watch, its cache, its indexes (one per key label in use) and its
    subscribers."""

    def __init__(self, kube: KubeAPI, feed: Feed, owner: Owned) -> None:
        self.feed = feed  # the first; any feed of the same source is served alike
        self.synced = False
        self.revision: int | None = None
        self.objects: dict[str, Obj] = {}
        # key label (None: the name) -> key -> name -> object
        self.indexes: dict[str | None, dict[str, dict[str, Obj]]] = {}
        self.subscribers: dict[tuple[str | None, str], set[View]] = {}
        self.idle: asyncio.TimerHandle | None = None
        """When no one subscribes: the watch's stop, LINGER_SECONDS after the last left."""
        self._error: tuple[BaseException, TracebackType | None] | None = None
        # A context of its own: the first waiter's deadline (retry.deadline) must not bound
        # the requests of a watch that outlives it. Owned by the Backend's Informers until
        # they close, not by the waiter that started it, which it outlives. Its lists go
        # ahead of every call's requests (kube.slots): each serves all its subscribers.
        context = contextvars.Context()
        context.run(CALL_BEGAN.set, AHEAD)
        self.task = owner.start(self._run(kube), context=context)

    def subscribe(self, key_label: str | None, key: str, view: View) -> None:
        if self.idle is not None:
            self.idle.cancel()
            self.idle = None
        if key_label not in self.indexes:
            self.indexes[key_label] = self._index_by(key_label)
        self.subscribers.setdefault((key_label, key), set()).add(view)

    def _index_by(self, key_label: str | None) -> dict[str, dict[str, Obj]]:
        """The cache's objects by their key (``key_label``'s value, or the name), by name."""
        index: dict[str, dict[str, Obj]] = {}
        for name, obj in self.objects.items():
            k = _key(key_label, obj)
            if k is not None:
                index.setdefault(k, {})[name] = obj
        return index

    def unsubscribe(self, key_label: str | None, key: str, view: View) -> None:
        views = self.subscribers.get((key_label, key))
        if views is not None:
            views.discard(view)
            if not views:
                del self.subscribers[(key_label, key)]

    def raise_error(self) -> None:
        if self._error is not None:
            exc, tb = self._error
            # As an asyncio future does: every subscriber raises it from the same traceback.
            raise exc.with_traceback(tb)

    def fail(self, exc: BaseException) -> None:
        """End every subscriber's wait with ``exc``."""
        if self._error is None:
            self._error = (exc, exc.__traceback__)
        self._wake_all()

    async def _run(self, kube: KubeAPI) -> None:
        f = self.feed
        # Trimmed by the stream too, as each page of a list arrives: a list of the whole
        # namespace is never held whole.
        stream = kube.observe(f.res, f.namespace, label_selector=f.label_selector,
                              timeout_seconds=WATCH_SECONDS, trim=self._trim)
        try:
            async for ev in stream:
                self._apply(ev)
        except Exception as exc:  # handed to every subscriber, which raises it
            self.fail(exc)
        finally:
            await stream.aclose()  # type: ignore[attr-defined]

    def _trim(self, obj: Obj) -> Obj:
        """What the cache keeps of ``obj``: applied by the stream as it lists and watches,
        and again as the cache takes it (a port may ignore ``trim``; trimming twice is
        trimming once)."""
        if self.feed.keep is not None:
            return project(obj, self.feed.keep)
        if "managedFields" in (obj.get("metadata") or {}):
            return {**obj, **metadata_only(obj)}
        return obj

    def _apply(self, ev: WatchEvent) -> None:
        if ev.type == "SYNC":
            self.objects = {o["metadata"]["name"]: self._trim(o) for o in ev.items}
            self.revision = revision((ev.object.get("metadata") or {}).get("resourceVersion"))
            for key_label in self.indexes:
                self.indexes[key_label] = self._index_by(key_label)
            self.synced = True
            self._wake_all()  # a fresh list may differ anywhere
            return
        name = ev.object["metadata"]["name"]
        # The cache is at this event's version now (one watch delivers them in order).
        self.revision = revision(ev.object["metadata"].get("resourceVersion"))
        old = self.objects.pop(name, None)
        new = self._trim(ev.object) if ev.type != "DELETED" else None
        if new is not None:
            self.objects[name] = new
        for key_label, index in self.indexes.items():
            keys = {_key(key_label, o) for o in (old, new) if o is not None}
            if old is not None:
                k = _key(key_label, old)
                if k is not None and k in index:
                    index[k].pop(name, None)
                    if not index[k]:
                        del index[k]
            if new is not None:
                k = _key(key_label, new)
                if k is not None:
                    index.setdefault(k, {})[name] = new
            # The views of the key it had and of the key it has (a label may have changed).
            for k in keys:
                for view in self.subscribers.get((key_label, k), ()) if k is not None else ():
                    view.wake()

    def _wake_all(self) -> None:
        for views in self.subscribers.values():
            for view in views:
                view.wake()


class Informers:
    """A Backend's informers, one per source of the :class:`Feed` s in use (see the module
    docstring)."""

    def __init__(self, kube: KubeAPI) -> None:
        self._kube = kube
        self._running: dict[tuple[Resource, str, str | None, tuple[str, ...] | None],
                            _Informer] = {}
        self._tasks = Owned()
        """Every informer's watch task, until :meth:`close`. Not a TaskGroup: the Backend
        is no block, and one informer's failure must not cancel the others' watches."""
        self._closed = False

    @property
    def feeds(self) -> int:
        """How many informers are watching now (lingering ones too)."""
        return len(self._running)

    def running(self, feed: Feed) -> bool:
        """Whether ``feed``'s informer is running and listed (a subscriber joins it at no
        cost)."""
        inf = self._running.get(feed.source)
        return inf is not None and inf.synced and not inf.task.done()

    @asynccontextmanager
    async def watching(self, wanted: Sequence[tuple[Feed, str]] = (), *,
                       woken: asyncio.Event | None = None) -> AsyncIterator[View]:
        """Subscribe to key ``key`` of each ``(feed, key)`` for the block (see :class:`View`;
        :meth:`View.add` subscribes to more).

        Starts the feeds' watches that are not running; the last subscriber to leave a feed
        stops its watch: at once if it ended, else after the linger.
        """
        if self._closed:
            raise DispatchError("the backend is closed")
        view = View(self, woken)
        try:
            for feed, key in wanted:
                view.add(feed, key)
            yield view
        finally:
            for inf, feed, key in view._wanted:
                inf.unsubscribe(feed.key_label, key, view)
                if inf.subscribers or inf.idle is not None:
                    continue
                if inf.task.done():
                    self._forget(inf)
                else:
                    inf.idle = asyncio.get_running_loop().call_later(
                        LINGER_SECONDS, self._expire, inf)

    def join(self, view: View, feed: Feed, key: str) -> _Informer:
        """``view`` subscribes to ``key`` of ``feed`` (see :meth:`View.add`)."""
        if self._closed:
            raise DispatchError("the backend is closed")
        inf = self._running.get(feed.source) or self._start(feed)
        inf.subscribe(feed.key_label, key, view)
        return inf

    def _expire(self, inf: _Informer) -> None:
        """The linger is over and no one subscribed again: stop the watch."""
        inf.idle = None
        if inf.subscribers:
            return
        self._forget(inf)
        inf.task.cancel()  # awaited by close(), its owner's, like every informer's task

    async def close(self) -> None:
        """Stop every watch; a wait still running raises DispatchError."""
        self._closed = True
        running = list(self._running.values())
        self._running.clear()
        for inf in running:
            if inf.idle is not None:
                inf.idle.cancel()
                inf.idle = None
            inf.fail(DispatchError("the backend was closed while waiting"))
        # Cancels what still runs, waits for every task, and raises what any ended with
        # other than its cancellation (a watch's own failure is its subscribers' already).
        await self._tasks.close()

    def _start(self, feed: Feed) -> _Informer:
        inf = self._running[feed.source] = _Informer(self._kube, feed, self._tasks)
        inf.task.add_done_callback(lambda _: self._forget(inf))
        return inf

    def _forget(self, inf: _Informer) -> None:
        """A source whose watch ended or is ending: the next subscriber starts a new one."""
        if self._running.get(inf.feed.source) is inf:
            del self._running[inf.feed.source]

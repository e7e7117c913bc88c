"""A shared, re-listing informer: one watch per kind, namespace and selector, many waiters.

A :class:`Backend <dispatch_kubeflow.backend.Backend>` owns one :class:`Informers`. Each
:class:`Feed` (a kind in a namespace, with a selector covering every job) is one
:meth:`KubeAPI.observe <dispatch_kubeflow.kube.KubeAPI.observe>` stream, so it lists,
watches, lists again after a 410 and backs off after failures, whatever the number of
waiters. Its objects are kept in a cache, indexed by a key (an object's name, or one of its
labels' value): a waiter subscribes to a key per feed, is woken after every change of its
keys' objects and after every list, and judges the cache itself (:meth:`View.changed`).

A feed's watch starts with its first subscriber and stops ``LINGER_SECONDS`` after its last
one left, unless another subscribes meanwhile: a wait followed by a StopJob or by the next
wait in the same namespace finds the watch running and its cache current, and lists nothing
again. An error that ends the watch (401, 403, 404) is raised in every subscriber, and the
next subscriber starts the watch afresh. Waits only observe: nothing here writes.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from dispatch_kubeflow.errors import DispatchError
from dispatch_kubeflow.kube import KubeAPI, Resource, WatchEvent
from dispatch_kubeflow.waits import cancel_all

Obj = dict[str, Any]

WATCH_SECONDS = 60
"""Each watch request's ``timeoutSeconds`` (observe watches again after it)."""
LINGER_SECONDS = 30.0
"""How long a feed's watch goes on after its last subscriber left (see the module doc)."""


@dataclass(frozen=True, slots=True)
class Feed:
    """What one informer keeps current: a kind in one namespace, which objects, and the key
    its subscribers look them up by (the value of ``key_label``; None: the object's name)."""

    res: Resource
    namespace: str
    label_selector: str | None = None
    key_label: str | None = None

    def key(self, obj: Mapping[str, Any]) -> str | None:
        m = obj.get("metadata") or {}
        if self.key_label is None:
            return m.get("name")
        return (m.get("labels") or {}).get(self.key_label)


class View:
    """One waiter's subscription: one key in each of some feeds (see :meth:`changed`)."""

    def __init__(self, wanted: Sequence[tuple[_Informer, str]]) -> None:
        self._wanted = wanted
        self._woken = asyncio.Event()
        self._woken.set()  # the first call judges what the cache holds already

    def wake(self) -> None:
        self._woken.set()

    async def changed(self) -> list[dict[str, Obj]]:
        """Once every feed has been listed and something of this view changed since the last
        call: the objects of each (feed, key), by name, in the order subscribed.

        Raises the error that ended a feed's watch.
        """
        while True:
            await self._woken.wait()
            self._woken.clear()
            for inf, _ in self._wanted:
                inf.raise_error()
            if all(inf.synced for inf, _ in self._wanted):
                # Copies: the cache goes on changing under the caller.
                return [dict(inf.index.get(key, {})) for inf, key in self._wanted]

    async def everything(self) -> list[list[Obj]]:
        """Once every feed has been listed: every object each feed holds, whatever its key
        (for a scan a key cannot answer), in the order subscribed.

        The objects are the cache's own (not copied): read them, do not change them, and do
        not keep them past the next await. Raises the error that ended a feed's watch.
        """
        while True:
            for inf, _ in self._wanted:
                inf.raise_error()
            if all(inf.synced for inf, _ in self._wanted):
                return [list(inf.objects.values()) for inf, _ in self._wanted]
            await self._woken.wait()
            self._woken.clear()


class _Informer:
    """One feed's watch, its cache and its subscribers."""

    def __init__(self, kube: KubeAPI, feed: Feed) -> None:
        self.feed = feed
        self.synced = False
        self.objects: dict[str, Obj] = {}
        self.index: dict[str, dict[str, Obj]] = {}  # key -> name -> object
        self.subscribers: dict[str, set[View]] = {}  # key -> views
        self.idle: asyncio.TimerHandle | None = None
        """When no one subscribes: the watch's stop, LINGER_SECONDS after the last left."""
        self._error: tuple[BaseException, TracebackType | None] | None = None
        # A context of its own: the first waiter's deadline (retry.deadline) must not bound
        # the requests of a watch that outlives it.
        self.task = asyncio.create_task(self._run(kube), context=contextvars.Context())

    def subscribe(self, key: str, view: View) -> None:
        if self.idle is not None:
            self.idle.cancel()
            self.idle = None
        self.subscribers.setdefault(key, set()).add(view)

    def unsubscribe(self, key: str, view: View) -> None:
        views = self.subscribers.get(key)
        if views is not None:
            views.discard(view)
            if not views:
                del self.subscribers[key]

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
        stream = kube.observe(f.res, f.namespace, label_selector=f.label_selector,
                              timeout_seconds=WATCH_SECONDS)
        try:
            async for ev in stream:
                self._apply(ev)
        except Exception as exc:  # handed to every subscriber, which raises it
            self.fail(exc)
        finally:
            await stream.aclose()  # type: ignore[attr-defined]

    def _apply(self, ev: WatchEvent) -> None:
        if ev.type == "SYNC":
            self.objects = {o["metadata"]["name"]: o for o in ev.items}
            self.index = {}
            for name, obj in self.objects.items():
                self._index(name, obj)
            self.synced = True
            self._wake_all()  # a fresh list may differ anywhere
            return
        name = ev.object["metadata"]["name"]
        old = self.objects.pop(name, None)
        if old is not None:
            self._unindex(name, old)
        new = ev.object if ev.type != "DELETED" else None
        if new is not None:
            self.objects[name] = new
            self._index(name, new)
        # The views of the key it had and of the key it has (a label may have changed).
        for key in {self.feed.key(o) for o in (old, new) if o is not None}:
            for view in self.subscribers.get(key, ()) if key is not None else ():
                view.wake()

    def _index(self, name: str, obj: Obj) -> None:
        key = self.feed.key(obj)
        if key is not None:
            self.index.setdefault(key, {})[name] = obj

    def _unindex(self, name: str, obj: Obj) -> None:
        key = self.feed.key(obj)
        if key is not None and key in self.index:
            self.index[key].pop(name, None)
            if not self.index[key]:
                del self.index[key]

    def _wake_all(self) -> None:
        for views in self.subscribers.values():
            for view in views:
                view.wake()


class Informers:
    """A Backend's informers, one per :class:`Feed` in use (see the module docstring)."""

    def __init__(self, kube: KubeAPI) -> None:
        self._kube = kube
        self._running: dict[Feed, _Informer] = {}
        self._stopping: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def feeds(self) -> int:
        """How many feeds are being watched now (lingering ones too)."""
        return len(self._running)

    @asynccontextmanager
    async def watching(self, wanted: Sequence[tuple[Feed, str]]) -> AsyncIterator[View]:
        """Subscribe to key ``key`` of each ``(feed, key)`` for the block (see :class:`View`).

        Starts the feeds' watches that are not running; the last subscriber to leave a feed
        stops its watch: at once if it ended, else after the linger.
        """
        if self._closed:
            raise DispatchError("the backend is closed")
        subscribed: list[tuple[_Informer, str]] = []
        view = View(subscribed)
        try:
            for feed, key in wanted:
                inf = self._running.get(feed) or self._start(feed)
                inf.subscribe(key, view)
                subscribed.append((inf, key))
            yield view
        finally:
            ended = []
            for inf, key in subscribed:
                inf.unsubscribe(key, view)
                if inf.subscribers or inf.idle is not None:
                    continue
                if inf.task.done():
                    self._forget(inf)
                    ended.append(inf.task)
                else:
                    inf.idle = asyncio.get_running_loop().call_later(
                        LINGER_SECONDS, self._expire, inf)
            await cancel_all(ended)

    def _expire(self, inf: _Informer) -> None:
        """The linger is over and no one subscribed again: stop the watch."""
        inf.idle = None
        if inf.subscribers:
            return
        self._forget(inf)
        inf.task.cancel()
        # Awaited by close(), so no task is left pending when the Backend closes.
        self._stopping.add(inf.task)
        inf.task.add_done_callback(self._stopping.discard)

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
        await cancel_all([inf.task for inf in running] + list(self._stopping))

    def _start(self, feed: Feed) -> _Informer:
        inf = self._running[feed] = _Informer(self._kube, feed)
        inf.task.add_done_callback(lambda _: self._forget(inf))
        return inf

    def _forget(self, inf: _Informer) -> None:
        """A feed whose watch ended or is ending: the next subscriber starts a new one."""
        if self._running.get(inf.feed) is inf:
            del self._running[inf.feed]

"""A watched, in-memory copy of one resource: ``Kube.observe`` plus change callbacks.

Every replica keeps its informers running whether it leads or not, so a new leader decides
from warm caches at once. Listeners are plain functions called on the event loop for each
change; they must not block (they enqueue work).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from typing import Any

from dispatch_kubeflow.kube import Kube, Resource

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str]
"""(namespace, name); namespace is "" for cluster-scoped objects."""
Listener = Callable[[str, Obj | None, Obj | None], None]
"""Called with (event type, old object or None, new object or None)."""


def key_of(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _rv(obj: Obj | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("resourceVersion") or "")


class Informer:
    """Keeps ``objects`` equal to the server's view of ``res`` (optionally label-selected)."""

    def __init__(self, kube: Kube, res: Resource, *, label_selector: str | None = None) -> None:
        self.kube = kube
        self.res = res
        self.label_selector = label_selector
        self.objects: dict[Key, Obj] = {}
        self.synced = asyncio.Event()
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def get(self, namespace: str, name: str) -> Obj | None:
        return self.objects.get((namespace, name))

    def values(self) -> Iterator[Obj]:
        return iter(list(self.objects.values()))

    def _notify(self, typ: str, old: Obj | None, new: Obj | None) -> None:
        for listener in self._listeners:
            try:
                listener(typ, old, new)
            except Exception:  # a listener bug must not stop the watch
                log.exception("listener of %s failed", self.res.plural)

    def apply(self, typ: str, obj: Obj, items: tuple[Obj, ...] = ()) -> None:
        """Fold one watch event into the cache and tell the listeners what changed."""
        if typ == "SYNC":
            fresh = {key_of(o): o for o in items}
            gone = [k for k in self.objects if k not in fresh]
            for k in gone:
                self._notify("DELETED", self.objects.pop(k), None)
            for k, o in fresh.items():
                old = self.objects.get(k)
                self.objects[k] = o
                if old is None:
                    self._notify("ADDED", None, o)
                elif _rv(old) != _rv(o):
                    self._notify("MODIFIED", old, o)
            self.synced.set()
            return
        k = key_of(obj)
        if typ == "DELETED":
            old = self.objects.pop(k, None)
            self._notify("DELETED", old, None)
            return
        old = self.objects.get(k)
        self.objects[k] = obj
        self._notify("ADDED" if old is None else "MODIFIED", old, obj)

    async def run(self) -> None:
        """Watch forever (``Kube.observe`` re-lists on 410 and retries errors)."""
        backoff = 1.0
        while True:
            try:
                async for ev in self.kube.observe(self.res, label_selector=self.label_selector):
                    self.apply(ev.type, ev.object, ev.items)
                    backoff = 1.0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # 401/403/404 end observe: keep trying, loudly
                log.error("watch of %s stopped: %s; retrying in %.0fs", self.res.plural, exc,
                          backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)

"""One object kept as the controller wants it: watched by name by every replica, written by
the leader.

The webhook configuration (:mod:`admission.webhook_config`) and the shared TLS Secret
(:mod:`admission.tls_keeper`) are each one named object that must stay as the controller
wants it: every replica watches it (a follower may need what it says), and the leader writes
it when the watch shows it changed or gone, when it starts leading, and again after a failed
write, waiting longer each time (doubling, at most ``RETRY[1]`` seconds).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from admission.lease import LeaderElector
from dispatch_kubeflow.core import errors
from dispatch_kubeflow.kube import KubeAPI, Resource, WatchEvent

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class Keeper:
    """Subclasses say what they saw (:meth:`observed`), whether a write is due
    (:meth:`due`) and how to write (:meth:`write`); this class watches and retries."""

    RETRY = (0.5, 30.0)
    """Seconds before another try after a failed write: first, and at most."""

    def __init__(self, kube: KubeAPI, elector: LeaderElector, resource: Resource, name: str,
                 namespace: str | None = None) -> None:
        self.kube = kube
        self.elector = elector
        self.resource, self.name, self.namespace = resource, name, namespace
        self._look = asyncio.Event()
        elector.on_change(self._on_leadership)

    @property
    def what(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.resource.kind} {where}{self.name}"

    # --- what a subclass says ------------------------------------------------------------------

    def observed(self, current: Obj | None) -> None:
        """The object as the watch shows it now (None: gone). Call :meth:`look` when a
        write may be due."""
        raise NotImplementedError

    def due(self) -> bool:
        """Whether the leader should write now."""
        return True

    async def write(self) -> None:
        """One write; a KubeError it raises is retried after the backoff."""
        raise NotImplementedError

    def cannot_watch(self, exc: errors.KubeError) -> None:
        """The watch was refused (RBAC older than this controller): say what that costs."""
        log.error("cannot watch %s (%s); apply deploy/admission's RBAC", self.what, exc)

    # --- the loops ---------------------------------------------------------------------------

    def look(self) -> None:
        """Judge again (the leader writes if :meth:`due`)."""
        self._look.set()

    def _on_leadership(self, leading: bool) -> None:
        if leading:
            self._look.set()

    def seen(self, ev: WatchEvent) -> None:
        if ev.type == "SYNC":
            current = next(iter(ev.items), None)
        else:
            current = None if ev.type == "DELETED" else ev.object
        self.observed(current)

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._watch())
            tg.create_task(self._keep())

    async def _watch(self) -> None:
        try:
            async for ev in self.kube.observe(self.resource, self.namespace,
                                              field_selector=f"metadata.name={self.name}"):
                self.seen(ev)
        except (errors.KubeForbidden, errors.KubeNotFound) as exc:
            self.cannot_watch(exc)

    async def _keep(self) -> None:
        delay = self.RETRY[0]
        while True:
            await self._look.wait()
            self._look.clear()
            if not self.due() or not self.elector.is_leader():
                continue
            try:
                await self.write()
                delay = self.RETRY[0]
            except errors.KubeError as exc:
                log.warning("cannot write %s: %s; again in %.1fs", self.what, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.RETRY[1])
                self._look.set()

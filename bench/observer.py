"""The observer: decisions as a bystander sees them."""

from __future__ import annotations

import asyncio

from queues import Obj, now

from dispatch_kubeflow.core.objects import is_true
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r


class Observer:
    """One watch on a namespace's Workloads: when each was first seen QuotaReserved, and when
    its check was first seen Ready."""

    def __init__(self, kube: Kube, namespace: str, check: str) -> None:
        self.kube, self.namespace, self.check = kube, namespace, check
        self.reserved: dict[str, float] = {}
        self.ready: dict[str, float] = {}
        self._listed = asyncio.Event()
        self._more_ready = asyncio.Event()
        self._task = asyncio.create_task(self._run())

    async def ready_to_watch(self) -> None:
        await asyncio.wait_for(self._listed.wait(), 60)

    def _see(self, wl: Obj, at: float) -> None:
        name = wl["metadata"]["name"]
        if is_true(wl, "QuotaReserved"):
            self.reserved.setdefault(name, at)
        for c in (wl.get("status") or {}).get("admissionChecks") or []:
            if c.get("name") == self.check and c.get("state") == "Ready" \
                    and name not in self.ready:
                self.ready[name] = at
                self._more_ready.set()

    async def _run(self) -> None:
        async for ev in self.kube.observe(r.WORKLOAD, self.namespace):
            at = now()
            if ev.type == "SYNC":
                for wl in ev.items:
                    self._see(wl, at)
                self._listed.set()
            elif ev.type != "DELETED":
                self._see(ev.object, at)

    async def until_ready(self, k: int) -> None:
        """Once ``k`` checks were seen Ready."""
        while len(self.ready) < k:
            self._more_ready.clear()
            await self._more_ready.wait()

    def latencies_ms(self) -> list[float]:
        return [(self.ready[n] - t) * 1000 for n, t in self.reserved.items() if n in self.ready]

    def close(self) -> None:
        self._task.cancel()

"""Keep condition ``Active`` on every AdmissionCheck whose controllerName is ours.

Kueue makes a ClusterQueue inactive while one of its checks is not Active, so the condition
is the check's heartbeat for Kueue as the Lease is for the adapter. Only the leader writes:
True (reason ``Active``) while it leads; False with a reason that says why otherwise
(``ParametersNotSupported``; ``ControllerStopped`` when the leader shuts down cleanly and no
other replica took the Lease it released within a retry period; a successor that takes it
later sees the change and writes True again). The write is a
server-side apply of that one condition on the status subresource.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import UTC, datetime

from admission.intake import Caches, Feed, Obj
from admission.lease import LeaderElector
from dispatch_kubeflow.core import errors, names
from dispatch_kubeflow.core.kueue import is_our_check
from dispatch_kubeflow.core.objects import condition
from dispatch_kubeflow.core.times import format_time
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import ADMISSION_CHECK

log = logging.getLogger(__name__)

ACTIVE = "Active"


@dataclass(frozen=True, slots=True)
class ActiveState:
    status: str
    reason: str
    message: str


def desired(ac: Obj, *, identity: str, lease: str, stopping: bool = False) -> ActiveState:
    """The Active condition a leader wants on ``ac``."""
    if (ac.get("spec") or {}).get("parameters"):
        return ActiveState("False", "ParametersNotSupported",
                           "dispatch-admission takes no parameters; remove spec.parameters")
    if stopping:
        return ActiveState("False", "ControllerStopped",
                           f"leader {identity} shut down; another replica takes over when it "
                           f"acquires Lease {lease}")
    return ActiveState("True", ACTIVE, f"leader {identity} holds Lease {lease}")


def current(ac: Obj) -> Obj | None:
    return condition(ac, ACTIVE)


def needs_write(ac: Obj, want: ActiveState) -> bool:
    cur = current(ac) or {}
    gen = (ac.get("metadata") or {}).get("generation")
    return (cur.get("status"), cur.get("reason"), cur.get("message"),
            cur.get("observedGeneration")) != (want.status, want.reason, want.message, gen)


def apply_body(ac: Obj, want: ActiveState, now: datetime) -> Obj:
    cur = current(ac) or {}
    ltt = cur.get("lastTransitionTime")
    if cur.get("status") != want.status or not ltt:
        ltt = format_time(now)
    meta = ac.get("metadata") or {}
    cond: Obj = {"type": ACTIVE, "status": want.status, "reason": want.reason,
                 "message": want.message, "lastTransitionTime": ltt}
    if meta.get("generation") is not None:
        cond["observedGeneration"] = meta["generation"]
    return {"apiVersion": ADMISSION_CHECK.api_version, "kind": ADMISSION_CHECK.kind,
            "metadata": {"name": meta.get("name")}, "status": {"conditions": [cond]}}


class ActiveConditions:
    """Reconciles the condition whenever a check changes or leadership starts."""

    def __init__(self, kube: KubeAPI, elector: LeaderElector, caches: Caches,
                 feed: Feed) -> None:
        self.kube = kube
        self.elector = elector
        self.caches = caches
        self.lease = f"{elector.namespace}/{elector.name}"
        self._dirty = asyncio.Event()
        feed.subscribe(lambda *_: self._dirty.set())
        elector.on_change(lambda leading: self._dirty.set() if leading else None)

    async def _write(self, ac: Obj, want: ActiveState) -> None:
        name = ac["metadata"]["name"]
        await self.kube.patch(ADMISSION_CHECK, name, apply_body(ac, want, datetime.now(UTC)),
                              kind="apply", subresource="status",
                              field_manager=names.FIELD_MANAGER, force=True)
        log.info("admission check %s: Active=%s (%s)", name, want.status, want.reason,
                 extra={"admission_check": name})

    async def sync(self, *, stopping: bool = False, last_leader: bool = False) -> bool:
        """One pass over our checks; True when every write succeeded. ``last_leader``: the
        leader shutting down with no successor writes, though it no longer leads."""
        ok = True
        for ac in self.caches.admission_checks():
            if not is_our_check(ac) or not (self.elector.is_leader() or last_leader):
                continue
            want = desired(ac, identity=self.elector.identity, lease=self.lease,
                           stopping=stopping)
            if not needs_write(ac, want):
                continue
            try:
                await self._write(ac, want)
            except errors.KubeNotFound:
                continue  # deleted meanwhile (its DELETED event may not have come yet)
            except errors.KubeError as exc:
                ok = False
                log.warning("cannot write Active on admission check %s: %s",
                            ac["metadata"].get("name"), exc)
        return ok

    async def run(self) -> None:
        backoff = 0.2
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            if await self.sync():
                backoff = 0.2
            else:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)
                self._dirty.set()

"""P4: a change to the waiter's return, beside the Kubeflow SDK's
``TrainerClient.wait_for_job_status`` (the optional ``bench`` extra)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from bare import terminal
from floor import watch_until
from queues import IMAGE, NODES, RUNTIME, Obj, drop_queue, make_queue, now, settings

from dispatch_kubeflow import (
    Backend,
    Image,
    JobID,
    JobSpec,
    ObjectRef,
    ObjectState,
    RuntimeRef,
    StartRequest,
)
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r

SDK_LIMIT = 60
"""Seconds the SDK may take to see a change before it is reported as never seeing it."""


@dataclass
class P4:
    change: str
    ours_ms: list[float] = field(default_factory=list)
    sdk_ms: list[float] = field(default_factory=list)
    sdk_never: list[str] = field(default_factory=list)


def sdk_wait(kubeconfig: str, ns: str, name: str, status: str, limit: float,
             out: dict[str, Any]) -> None:
    """TrainerClient.wait_for_job_status as a user calls it (its default 2 s polling)."""
    from kubeflow.common.types import KubernetesBackendConfig  # the optional bench extra
    from kubeflow.trainer import TrainerClient
    try:
        client = TrainerClient(backend_config=KubernetesBackendConfig(
            namespace=ns, config_file=kubeconfig))
        client.wait_for_job_status(name, status={status}, timeout=int(limit))
        out["at"] = now()
    except (TimeoutError, RuntimeError, ValueError) as exc:  # the SDK's documented errors
        cause = exc.__cause__
        out["error"] = (f"{type(exc).__name__}: {exc}" + (
            f" (from {type(cause).__name__}: {str(cause)[:200]})" if cause else "")
        ).replace(name, "<TrainJob>")


async def p4(kubeconfig: str, admin: Kube, jobs: int, tag: str) -> list[P4]:
    from dispatch_kubeflow import Actor, ActorKind, CallMeta, HoldMeta
    ns = f"bench-{tag}-p4"
    await make_queue(admin, ns, names.ADMISSION_CHECK, jobs)
    rows = {c: P4(c) for c in ("running", "held", "succeeded")}
    kube = await Kube.connect(kubeconfig=kubeconfig, request_timeout=30)
    limit = 180.0
    try:
        backend = await Backend.connect(settings(kubeconfig, ns), kube=kube)
        spec = JobSpec(["/bin/sh", "-c", "sleep 20; echo ok"], NODES, [
            Image(IMAGE, "IfNotPresent"), RuntimeRef(names.KIND_CLUSTER_TRAINING_RUNTIME,
                                                      RUNTIME)])

        async def seen(ref: ObjectRef, done: Callable[[Mapping[str, Obj]], bool],
                       res: Any = r.TRAINJOB, sel: str | None = None) -> float:
            field_sel = None if sel else f"metadata.name={ref.name}"
            await watch_until(admin, res, ns, done, label_selector=sel, field_selector=field_sel)
            return now()

        sdk_waits: list[asyncio.Future[None]] = []

        async def both(row: P4, ref: ObjectRef, state: ObjectState, sdk_status: str | None,
                       change: Awaitable[float], act: Callable[[], Awaitable[Any]]) -> None:
            out: dict[str, Any] = {}
            thread = None
            if sdk_status:
                thread = threading.Thread(target=sdk_wait, args=(
                    kubeconfig, ns, ref.name, sdk_status, SDK_LIMIT, out), daemon=True)
                thread.start()
            change_task = asyncio.ensure_future(change)
            await asyncio.sleep(0.5)  # every watcher listening before the action
            await act()
            await backend.wait(ref, state, deadline=datetime.now(UTC) + timedelta(seconds=limit))
            ours = now()
            at = await asyncio.wait_for(change_task, limit)
            row.ours_ms.append((ours - at) * 1000)
            if thread is not None:  # judged at the end: the job goes on meanwhile
                sdk_waits.append(asyncio.ensure_future(sdk_done(row, thread, out, at)))

        async def sdk_done(row: P4, thread: threading.Thread, out: dict[str, Any],
                           at: float) -> None:
            await asyncio.to_thread(thread.join, SDK_LIMIT + 10)
            if "at" in out:
                row.sdk_ms.append((out["at"] - at) * 1000)
            else:
                row.sdk_never.append(out.get("error", "no error, no return"))

        def unsuspended(name: str) -> Callable[[Mapping[str, Obj]], bool]:
            return lambda tjs: name in tjs and not (tjs[name].get("spec") or {}).get("suspend")

        for _ in range(jobs):
            job = JobID.new()
            ref = await backend.start(StartRequest(job, 1, 1, spec))
            await both(rows["running"], ref, ObjectState.RUNNING, "Running",
                       seen(ref, unsuspended(ref.name)), partial(backend.open, ref))
            pods = f"{names.JOBSET_NAME_LABEL}={ref.name}"
            await watch_until(admin, r.POD, ns, lambda ps: sum(
                (p.get("status") or {}).get("phase") == "Running" for p in ps.values()) >= NODES,
                label_selector=pods)
            t = datetime.now(UTC)
            meta = HoldMeta(1, Actor(ActorKind.SERVICE, "bench"), CallMeta(
                t + timedelta(minutes=2)), until=t + timedelta(hours=1), reason="bench")
            await both(rows["held"], ref, ObjectState.HELD, None,
                       seen(ref, lambda ps: not ps, r.POD, pods), partial(backend.hold, ref, meta))
            await both(rows["succeeded"], ref, ObjectState.SUCCEEDED, "Complete",
                       seen(ref, terminal(ref.name)), partial(backend.release, ref, meta))
            await asyncio.gather(*sdk_waits)  # the SDK's waits end before their job goes
            sdk_waits.clear()
            await backend.stop_job(job, "bench")
        await backend.close()
    finally:
        await kube.close()
        await drop_queue(admin, ns)
    return list(rows.values())

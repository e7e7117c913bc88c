"""The floor: a minimal approver and a bare script, each the least its part can do, every
request written out and counted."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from floor import gone, watch_until
from queues import COMMAND, IMAGE, NODES, RUNTIME, Obj, now

from dispatch_kubeflow import DispatchError
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.objects import is_true
from dispatch_kubeflow.errors import KubeInvalid
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r

FLOOR_CHECK = "bench-floor"
FLOOR_CONTROLLER = "bench.dispatch.phpboyscout.uk/floor"
FLOOR_MANAGER = "bench-floor"
FLOOR_GATE = "bench.dispatch.phpboyscout.uk/gate"


class MinimalApprover:
    """One watch on Workloads; for each whose quota is reserved and whose check is not Ready,
    one server-side apply of the check Ready. The least an approver can do."""

    check = FLOOR_CHECK
    """The AdmissionCheck it serves."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube, self.namespace = kube, namespace
        self.done: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._task = asyncio.create_task(self._run())

    async def _approve(self, wl: Obj) -> None:
        name = wl["metadata"]["name"]
        body = {"apiVersion": r.WORKLOAD.api_version, "kind": "Workload",
                "metadata": {"name": name, "namespace": self.namespace},
                "status": {"admissionChecks": [{
                    "name": FLOOR_CHECK, "state": "Ready", "message": "bench floor",
                    "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}]}}
        try:
            await self.kube.patch(r.WORKLOAD, name, body, self.namespace, kind="apply",
                                  subresource="status", field_manager=FLOOR_MANAGER, force=True)
        except DispatchError as exc:
            self.done.discard(name)  # seen again on its next event
            print(f"floor approver: {name}: {exc}", file=sys.stderr)

    def _consider(self, wl: Obj) -> None:
        name = wl["metadata"]["name"]
        checks = {c.get("name"): c.get("state")
                  for c in (wl.get("status") or {}).get("admissionChecks") or []}
        if (name not in self.done and is_true(wl, "QuotaReserved")
                and checks.get(self.check) == "Pending"):
            self.done.add(name)
            t = asyncio.create_task(self._approve(wl))
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)

    async def _run(self) -> None:
        async for ev in self.kube.observe(r.WORKLOAD, self.namespace):
            for wl in (ev.items if ev.type == "SYNC" else (ev.object,)):
                if ev.type != "DELETED":
                    self._consider(wl)

    def close(self) -> None:
        self._task.cancel()
        for t in self._tasks:
            t.cancel()


def terminal(name: str) -> Callable[[Mapping[str, Obj]], bool]:
    def done(tjs: Mapping[str, Obj]) -> bool:
        tj = tjs.get(name)
        return tj is not None and (is_true(tj, "Complete") or is_true(tj, "Failed"))
    return done


async def bare_job(kube: Kube, ns: str, i: int) -> tuple[dict[str, int], float, bool]:
    """:func:`bare_run`, then its stop at once, alone (:func:`bare_stop`): its requests by
    step, its stop's seconds, and whether it succeeded."""
    counts, tj, ok = await bare_run(kube, ns, i)
    began = now()
    counts["stop"] += await bare_stop(kube, ns, tj)
    return counts, now() - began, ok


async def bare_run(kube: Kube, ns: str, i: int) -> tuple[dict[str, int], Obj, bool]:
    """A job's lifecycle up to its end with the fewest requests for what the library does: a
    runtime copy owned by the TrainJob, a gated TrainJob, Start returning once the Workload
    exists, Open, a wait to the end. Its requests by step (each counted where it is made: the
    jobs run at once on one connection), its TrainJob, and whether it succeeded. No fence,
    no check of what it reads, no retry of what fails, and no dispatch labels (so no
    identity). Its stop (:func:`bare_stop`) proves what StopJob proves, that nothing of the
    job is left."""
    name = f"floor-{i}"
    counts = dict.fromkeys(("start", "open", "wait", "stop"), 0)
    source = await kube.get(r.CLUSTER_TRAINING_RUNTIME, RUNTIME)
    await kube.create(r.TRAINING_RUNTIME, {
        "apiVersion": r.TRAINING_RUNTIME.api_version, "kind": names.KIND_TRAINING_RUNTIME,
        "metadata": {"name": name, "labels": (source["metadata"].get("labels") or {})},
        "spec": source["spec"]}, ns)
    counts["start"] += 2
    body = {
        "apiVersion": r.TRAINJOB.api_version, "kind": "TrainJob",
        "metadata": {"name": name, "labels": {names.QUEUE_NAME_LABEL: "lq"},
                     "annotations": {names.ADMISSION_GATED_BY: FLOOR_GATE}},
        "spec": {"runtimeRef": {"apiGroup": names.TRAINER_GROUP,
                                "kind": names.KIND_TRAINING_RUNTIME, "name": name},
                 "trainer": {"numNodes": NODES, "image": IMAGE, "command": COMMAND}}}
    for attempt in range(20):
        counts["start"] += 1
        try:
            tj = await kube.create(r.TRAINJOB, body, ns)
            break
        except KubeInvalid:
            # Trainer's webhook may not have seen the copy yet (as the library knows too).
            if attempt == 19:
                raise
            await asyncio.sleep(0.25)
    await kube.patch(r.TRAINING_RUNTIME, name, {"metadata": {"ownerReferences": [{
        "apiVersion": r.TRAINJOB.api_version, "kind": "TrainJob", "name": name,
        "uid": tj["metadata"]["uid"], "controller": True}]}}, ns)
    counts["start"] += 1
    wl_sel = f"{names.KUEUE_JOB_UID_LABEL}={tj['metadata']['uid']}"
    await watch_until(kube, r.WORKLOAD, ns, bool, label_selector=wl_sel)
    counts["start"] += 1
    await kube.patch(r.TRAINJOB, name, [{"op": "remove", "path": "/metadata/annotations/"
                                         + names.ADMISSION_GATED_BY.replace("/", "~1")}],
                     ns, kind="json")
    counts["open"] += 1
    seen: dict[str, Obj] = {}

    def ended(tjs: Mapping[str, Obj]) -> bool:
        seen.update(tjs)
        return terminal(name)(tjs)
    await watch_until(kube, r.TRAINJOB, ns, ended, field_selector=f"metadata.name={name}")
    counts["wait"] += 1
    return counts, tj, is_true(seen.get(name) or {}, "Complete")


async def bare_stop(kube: Kube, ns: str, tj: Obj) -> int:
    """The bare minimum of a StopJob that proves what StopJob proves: the reason's Event,
    the TrainJob deleted (background: the garbage collector removes the rest), then every
    kind of the job seen empty (:func:`gone`, all at once). No UID preconditions, no pass
    for what a maker makes after its kind was listed, no deadline. Its requests."""
    name, uid = tj["metadata"]["name"], tj["metadata"]["uid"]
    await kube.create(r.EVENT, {
        "metadata": {"generateName": f"{name}.stop-"}, "type": "Normal",
        "eventTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "reason": "StopJob", "action": "Stop", "note": "bench",
        "reportingController": FLOOR_CONTROLLER, "reportingInstance": "bench",
        "regarding": {"apiVersion": tj["apiVersion"], "kind": "TrainJob", "name": name,
                      "namespace": ns, "uid": uid}}, ns)
    await kube.delete(r.TRAINJOB, name, ns)
    by_name = f"metadata.name={name}"
    of_jobset = f"{names.JOBSET_NAME_LABEL}={name}"
    views = await asyncio.gather(
        gone(kube, r.TRAINJOB, ns, field_selector=by_name),
        gone(kube, r.TRAINING_RUNTIME, ns, field_selector=by_name),
        gone(kube, r.JOBSET, ns, field_selector=by_name),
        gone(kube, r.JOB, ns, label_selector=of_jobset),
        gone(kube, r.POD, ns, label_selector=of_jobset),
        gone(kube, r.WORKLOAD, ns, label_selector=f"{names.KUEUE_JOB_UID_LABEL}={uid}"))
    return 2 + sum(views)


async def floor_check(kube: Kube, present: bool, check: str = FLOOR_CHECK,
                      controller: str = FLOOR_CONTROLLER) -> None:
    """The floor's AdmissionCheck, Active (its controller's duty, done here once)."""
    if not present:
        with contextlib.suppress(DispatchError):
            await kube.delete(r.ADMISSION_CHECK, check)
        return
    if await kube.get_or_none(r.ADMISSION_CHECK, check) is None:
        await kube.create(r.ADMISSION_CHECK, {"metadata": {"name": check},
                                              "spec": {"controllerName": controller}})
    await kube.patch(r.ADMISSION_CHECK, check, {
        "apiVersion": r.ADMISSION_CHECK.api_version, "kind": "AdmissionCheck",
        "metadata": {"name": check},
        "status": {"conditions": [{
            "type": "Active", "status": "True", "reason": "Active", "message": "bench floor",
            "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}]}},
        kind="apply", subresource="status", field_manager=FLOOR_MANAGER, force=True)

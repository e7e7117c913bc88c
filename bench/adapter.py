"""Benchmark of the adapter against the cluster named by ``$KUBECONFIG`` (Kueue mode).

Prints, side by side, in one run:

(a) for each Kubernetes change of a job's lifecycle, when the adapter observed it
    (``Backend.start`` returning once the Workload exists, ``Backend.wait`` returning the
    new state) against a bare watch on the same objects, started at the same moment;
(b) the API requests of one full lifecycle (start, open, running, hold, held, release,
    running, stop) made by the adapter, counted with ``Kube.requests``, against the
    minimum a bare script needs for the same lifecycle — that script is :func:`bare_lifecycle`
    below, every request written out, counted the same way.

Needs: Kueue, JobSet, Trainer, the ClusterTrainingRuntime ``dispatch-kind``, the
AdmissionCheck ``dispatch-admission`` and its controller running (``deploy/local/admission.sh
start $KUBECONFIG`` on the local cluster). It makes a namespace, ClusterQueue and LocalQueue
of its own and deletes them at the end.

    python bench/adapter.py
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from floor import gone, watch_until

from dispatch_kubeflow import (
    Actor,
    ActorKind,
    Backend,
    CallMeta,
    HoldMeta,
    Image,
    JobID,
    JobSpec,
    ObjectState,
    RuntimeRef,
    StartRequest,
)
from dispatch_kubeflow import start as start_mod
from dispatch_kubeflow.backend import select_mode
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.objects import is_true
from dispatch_kubeflow.hold import hold_annotations
from dispatch_kubeflow.kube import Kube, Resource
from dispatch_kubeflow.kube import resources as r
from dispatch_kubeflow.settings import Settings
from dispatch_kubeflow.stop import REPORTING_CONTROLLER

Obj = dict[str, Any]
IMAGE = "localhost/dispatch-busybox:kind"
COMMAND = ["/bin/sh", "-c", "echo bench-ready; trap 'exit 143' TERM; while :; do sleep 1; done"]
LIMIT = 180.0


def now() -> float:
    return time.monotonic()


def job_spec() -> JobSpec:
    return JobSpec(COMMAND, 2, [Image(IMAGE, "IfNotPresent"),
                                RuntimeRef("ClusterTrainingRuntime", "dispatch-kind")])


def settings(namespace: str) -> dict[str, Any]:
    return {
        "cluster": {"kubeconfig": os.environ["KUBECONFIG"]},
        "namespace": namespace,
        "probeRuntime": {"kind": "ClusterTrainingRuntime", "name": "dispatch-kind"},
        "kueue": {"localQueue": "lq", "admissionCheck": names.ADMISSION_CHECK},
        "timeouts": {"request": "10s", "stopJob": "3m", "preflightProbe": "10s"},
    }


def hold_meta() -> HoldMeta:
    t = datetime.now(UTC)
    return HoldMeta(1, Actor(ActorKind.SERVICE, "bench"), CallMeta(t + timedelta(minutes=2)),
                    until=t + timedelta(hours=1), reason="bench")


# --- bare watches: a raw list+watch and a predicate over the current objects -------------------


class BareWatch:
    """Watches one list from the moment :meth:`ready` returns; records when ``done`` held."""

    def __init__(self, kube: Kube, res: Resource, namespace: str,
                 done: Callable[[Mapping[str, Obj]], bool], *,
                 label_selector: str | None = None, field_selector: str | None = None) -> None:
        self.kube, self.res, self.namespace, self.done = kube, res, namespace, done
        self.label_selector, self.field_selector = label_selector, field_selector
        self.at: float | None = None
        self._listed = asyncio.Event()
        self._task = asyncio.create_task(self._run())

    async def ready(self) -> BareWatch:
        await self._listed.wait()
        return self

    async def _run(self) -> None:
        items, rv = await self.kube.list(self.res, self.namespace,
                                         label_selector=self.label_selector,
                                         field_selector=self.field_selector)
        current = {o["metadata"]["name"]: o for o in items}
        self._listed.set()
        if self.done(current):
            self.at = now()
            return
        while True:
            async for ev in self.kube.watch(self.res, self.namespace, resource_version=rv,
                                            label_selector=self.label_selector,
                                            field_selector=self.field_selector):
                rv = ev.object["metadata"]["resourceVersion"]
                if ev.type == "DELETED":
                    current.pop(ev.object["metadata"]["name"], None)
                else:
                    current[ev.object["metadata"]["name"]] = ev.object
                if self.done(current):
                    self.at = now()
                    return

    async def result(self) -> float:
        await asyncio.wait_for(self._task, LIMIT)
        assert self.at is not None
        return self.at


def unsuspended(name: str) -> Callable[[Mapping[str, Obj]], bool]:
    def done(tjs: Mapping[str, Obj]) -> bool:
        tj = tjs.get(name)
        return tj is not None and not (tj.get("spec") or {}).get("suspend")
    return done


def admitted(wls: Mapping[str, Obj]) -> bool:
    return any(is_true(w, "Admitted") and (w.get("spec") or {}).get("active") is not False
               for w in wls.values())


def named_like(name: str) -> Callable[[Mapping[str, Obj]], bool]:
    def done(objs: Mapping[str, Obj]) -> bool:
        return any(f"-{name}-" in n for n in objs)
    return done


def pods_running(n: int) -> Callable[[Mapping[str, Obj]], bool]:
    def done(pods: Mapping[str, Obj]) -> bool:
        running = [p for p in pods.values() if (p.get("status") or {}).get("phase") == "Running"]
        return len(running) >= n
    return done


def no_objects(objs: Mapping[str, Obj]) -> bool:
    return not objs


def some_object(objs: Mapping[str, Obj]) -> bool:
    return bool(objs)


# --- (a) and the adapter's side of (b) ----------------------------------------------------------


async def adapter_lifecycle(ns: str, watch_kube: Kube) -> tuple[list[tuple[str, float, float]],
                                                                 list[tuple[str, int]], int]:
    kube = await Kube.connect(kubeconfig=os.environ["KUBECONFIG"])
    latencies: list[tuple[str, float, float]] = []
    requests: list[tuple[str, int]] = []
    try:
        b = await Backend.connect(settings(ns), kube=kube)
        preflight_requests = kube.requests
        if b.observe_only:
            sys.exit("the adapter is observe-only: " + "; ".join(b.observe_only_reasons))
        last = kube.requests

        def count(step: str) -> None:
            nonlocal last
            requests.append((step, kube.requests - last))
            last = kube.requests

        job = JobID.new()
        name = names.trainjob_name(job, 1)
        jobset_pods = f"{names.JOBSET_NAME_LABEL}={name}"

        async def both(change: str, bare: list[BareWatch], t0: float, t_adapter: float) -> None:
            t_bare = max([await w.result() for w in bare])
            latencies.append((change, (t_bare - t0) * 1000, (t_adapter - t0) * 1000))

        # Start -> the Workload exists
        # (Kueue names a TrainJob's Workload trainjob-<name>-<hash>; the preflight probe's
        # Workload may still be in the namespace.)
        wl_watch = await BareWatch(watch_kube, r.WORKLOAD, ns, named_like(name)).ready()
        t0 = now()
        ref = await b.start(StartRequest(job, 1, 1, job_spec()))
        await both("Start -> Workload exists", [wl_watch], t0, now())
        count("start (until the Workload exists)")
        wl_sel = f"{names.KUEUE_JOB_UID_LABEL}={ref.uid}"

        async def to_running(change: str, act: Callable[[], Any], step: str) -> None:
            watches = [await BareWatch(watch_kube, r.TRAINJOB, ns, unsuspended(name),
                                       field_selector=f"metadata.name={name}").ready(),
                       await BareWatch(watch_kube, r.WORKLOAD, ns, admitted,
                                       label_selector=wl_sel).ready()]
            t0 = now()
            await act()
            count(step)
            await b.wait(ref, ObjectState.RUNNING,
                         deadline=datetime.now(UTC) + timedelta(seconds=LIMIT))
            await both(change, watches, t0, now())
            count("running (wait)")

        await to_running("Open -> running", lambda: b.open(ref), "open")

        # Hold -> held (no pod of the execution left), once the execution's pods are running
        # (not counted: the adapter has no call for it and needs none).
        await BareWatch(watch_kube, r.POD, ns, pods_running(2),
                        label_selector=jobset_pods).result()
        pods_watch = await BareWatch(watch_kube, r.POD, ns, no_objects,
                                     label_selector=jobset_pods).ready()
        t0 = now()
        await b.hold(ref, hold_meta())
        count("hold")
        await b.wait(ref, ObjectState.HELD, deadline=datetime.now(UTC) + timedelta(seconds=LIMIT))
        await both("Hold -> held (pods gone)", [pods_watch], t0, now())
        count("held (wait)")

        await to_running("Release -> running", lambda: b.release(ref, hold_meta()), "release")

        # StopJob -> nothing of the job remains
        watches = [await BareWatch(watch_kube, r.POD, ns, no_objects,
                                   label_selector=jobset_pods).ready(),
                   await BareWatch(watch_kube, r.TRAINJOB, ns, no_objects,
                                   field_selector=f"metadata.name={name}").ready(),
                   await BareWatch(watch_kube, r.JOBSET, ns, no_objects,
                                   field_selector=f"metadata.name={name}").ready(),
                   await BareWatch(watch_kube, r.WORKLOAD, ns, no_objects,
                                   label_selector=wl_sel).ready()]
        t0 = now()
        report = await b.stop_job(job, "bench")
        await both("StopJob -> nothing remains", watches, t0, now())
        count("stop (until nothing remains)")
        if report.alive or report.unproven:
            print(f"warning: StopJob left alive={report.alive} unproven={report.unproven}")
        await b.close()
    finally:
        await kube.close()
    return latencies, requests, preflight_requests


# --- the bare script: the fewest requests for the same lifecycle ---------------------------------


async def bare_lifecycle(ns: str) -> list[tuple[str, int]]:
    """Start, open, running, hold, held, release, running, stop — every request explicit."""
    kube = await Kube.connect(kubeconfig=os.environ["KUBECONFIG"])
    cfg = Settings.parse(settings(ns))
    counts: list[tuple[str, int]] = []
    last = 0

    def count(step: str) -> None:
        nonlocal last
        counts.append((step, kube.requests - last))
        last = kube.requests

    try:
        valid = start_mod.validate(StartRequest(JobID.new(), 1, 1, job_spec()))
        name = valid.name
        # start: read the runtime, create its copy, create the TrainJob, own the copy, and
        # watch for the Workload.
        source = await kube.get(r.CLUSTER_TRAINING_RUNTIME, "dispatch-kind")          # 1
        await kube.create(r.TRAINING_RUNTIME, start_mod.runtime_copy(                   # 2
            source, valid, ns), ns)
        tj = await kube.create(r.TRAINJOB, start_mod.trainjob_body(                     # 3
            valid, cfg, select_mode(cfg)), ns)
        await kube.patch(r.TRAINING_RUNTIME, name, {"metadata": {"ownerReferences": [  # 4
            start_mod.owner_reference(tj)]}}, ns)
        wl_sel = f"{names.KUEUE_JOB_UID_LABEL}={tj['metadata']['uid']}"
        wls = await watch_until(kube, r.WORKLOAD, ns, some_object, label_selector=wl_sel)  # 5
        wl_name = next(iter(wls))
        count("start (until the Workload exists)")
        # open: remove the gate (it is the only one).
        await kube.patch(r.TRAINJOB, name, [{"op": "remove", "path": "/metadata/annotations/"
                                             + names.ADMISSION_GATED_BY.replace("/", "~1")}],
                         ns, kind="json")                                               # 6
        count("open")
        await watch_until(kube, r.TRAINJOB, ns, unsuspended(name),
                          field_selector=f"metadata.name={name}")                       # 7
        count("running (wait)")
        await kube.patch(r.WORKLOAD, wl_name, {"metadata": {"annotations": hold_annotations(
            hold_meta())}, "spec": {"active": False}}, ns)                             # 8
        count("hold")
        pods_sel = f"{names.JOBSET_NAME_LABEL}={name}"
        seen_pod: list[bool] = []

        def gone_after_seen(pods: Mapping[str, Obj]) -> bool:
            seen_pod.append(bool(pods))
            return any(seen_pod) and not pods
        await watch_until(kube, r.POD, ns, gone_after_seen, label_selector=pods_sel)  # 9
        count("held (wait)")
        await kube.patch(r.WORKLOAD, wl_name, {"metadata": {"annotations": dict.fromkeys(
            names.HOLD_ANNOTATIONS)}, "spec": {"active": True}}, ns)                   # 10
        count("release")
        # Kueue suspended the TrainJob on eviction; wait until it is resumed.
        await watch_until(kube, r.TRAINJOB, ns, unsuspended(name),
                          field_selector=f"metadata.name={name}")                       # 11
        count("running (wait)")
        # stop: record the reason, delete, and see the pods go.
        await kube.create(r.EVENT, {                                                    # 12
            "metadata": {"generateName": f"{name}.stop-"}, "type": "Normal",
            "eventTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "reason": "StopJob", "action": "Stop", "note": "bench",
            "reportingController": REPORTING_CONTROLLER,
            "reportingInstance": f"{REPORTING_CONTROLLER}-bench",
            "regarding": {"apiVersion": tj["apiVersion"], "kind": "TrainJob", "name": name,
                          "namespace": ns, "uid": tj["metadata"]["uid"]}}, ns)
        await kube.delete(r.TRAINJOB, name, ns)                                         # 13
        # The pods may not have been created yet (the TrainJob was only resumed), so a watch
        # without a resourceVersion could wait for an event that never comes: list, then
        # watch from the list.
        await gone(kube, r.POD, ns, label_selector=pods_sel)                            # 14, 15
        count("stop (until nothing remains)")
    finally:
        await kube.close()
    return counts


# --- setup, and the table ----------------------------------------------------------------------


async def setup(kube: Kube, ns: str) -> None:
    lease = await kube.get_or_none(r.LEASE, names.LEASE_NAME, names.CONTROLLER_NAMESPACE)
    if not lease or not (lease.get("spec") or {}).get("holderIdentity"):
        sys.exit("the admission controller holds no Lease: start it first "
                 "(deploy/local/admission.sh start $KUBECONFIG)")
    await kube.create(r.NAMESPACE, {"metadata": {"name": ns}})
    await kube.create(r.CLUSTER_QUEUE, {"metadata": {"name": ns}, "spec": {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
        "admissionChecksStrategy": {"admissionChecks": [{"name": names.ADMISSION_CHECK}]},
        "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
            "name": "default-flavor", "resources": [
                {"name": "cpu", "nominalQuota": "1"}, {"name": "memory", "nominalQuota": "1Gi"}
            ]}]}]}})
    await kube.create(r.LOCAL_QUEUE, {"metadata": {"name": "lq"},
                                      "spec": {"clusterQueue": ns}}, ns)


PREFLIGHT_RUNS = 5


async def preflight_times(ns: str, kube: Kube) -> dict[str, list[float]]:
    """Seconds of ``Backend.connect`` (the whole preflight), ``probeWatch`` "proof" against
    the seed's "window", alternating so load drifts hit both alike."""
    took: dict[str, list[float]] = {"proof": [], "window": []}
    for _ in range(PREFLIGHT_RUNS):
        for how in took:
            began = time.monotonic()
            b = await Backend.connect({**settings(ns), "probeWatch": how}, kube=kube)
            took[how].append(time.monotonic() - began)
            assert not b.observe_only, b.observe_only_reasons
            await b.close()
    return took


async def main() -> None:
    if not os.environ.get("KUBECONFIG"):
        sys.exit("set KUBECONFIG to the cluster to measure")
    ns = f"bench-{uuid.uuid4().hex[:8]}"
    watch_kube = await Kube.connect(kubeconfig=os.environ["KUBECONFIG"])
    try:
        await setup(watch_kube, ns)
        latencies, adapter_requests, preflight = await adapter_lifecycle(ns, watch_kube)
        bare_requests = await bare_lifecycle(ns)
        preflights = await preflight_times(ns, watch_kube)
    finally:
        await watch_kube.delete(r.CLUSTER_QUEUE, ns)
        await watch_kube.delete(r.NAMESPACE, ns)
        await watch_kube.close()

    print("(a) time from the action to the change being observed, ms "
          "(the bare watch was listening before the action)")
    print(f"  {'change':<30}{'bare watch':>12}{'adapter':>10}{'adapter-bare':>14}")
    for change, bare_ms, adapter_ms in latencies:
        print(f"  {change:<30}{bare_ms:>12.0f}{adapter_ms:>10.0f}{adapter_ms - bare_ms:>+14.0f}")
    print()
    print("(b) API requests of one lifecycle (Kube.requests; a watch counts as one)")
    print(f"  {'step':<34}{'adapter':>9}{'bare':>7}")
    bare_iter = iter(bare_requests)
    for step, n in adapter_requests:  # the same steps, in the same order
        _, bare_n = next(bare_iter, (step, 0))
        print(f"  {step:<34}{n:>9}{bare_n:>7}")
    print(f"  {'total':<34}{sum(n for _, n in adapter_requests):>9}"
          f"{sum(n for _, n in bare_requests):>7}")
    print(f"  preflight, once per Backend.connect: {preflight} requests (not in the total)")
    print()
    print(f"(c) Backend.connect (the preflight), seconds, {PREFLIGHT_RUNS} runs each")
    proof, window = (statistics.median(preflights[k]) for k in ("proof", "window"))
    print(f"  {'probeWatch':<12}{'p50':>7}{'max':>7}")
    for how, times in preflights.items():
        print(f"  {how:<12}{statistics.median(times):>7.2f}{max(times):>7.2f}")
    print(f"  proof / window at p50: {proof / window:.2f}")


if __name__ == "__main__":
    asyncio.run(main())

"""Scale benchmark: N jobs through one Backend and the admission controller, each figure
beside its floor, in one table per run (issue 11).

For each N (``--jobs 50 200 1000``) two phases run on the same cluster, one after the other:

- **dispatch**: N two-node jobs (``echo ok``) through one :class:`~dispatch_kubeflow.Backend`
  in Kueue mode, behind a ClusterQueue that lists the AdmissionCheck ``dispatch-admission``
  (the controller deployed in the cluster decides), with quota for ``--quota`` jobs at once:
  Start all, Open all, ``Backend.wait`` all to their end, StopJob all, each batch at once.
- **floor**: the same N jobs, made by :func:`bare_job` (the fewest requests a script needs
  for the same lifecycle, every one written out and counted) behind a ClusterQueue whose
  AdmissionCheck is served by :class:`MinimalApprover` (one watch on Workloads, one
  server-side apply of the check per decision, nothing else: no fence, no pod check).

A separate observer (its own connection, one watch on the namespace's Workloads) times every
decision: from when it sees QuotaReserved to when it sees the check Ready. Requests are
counted by each phase's own :class:`~dispatch_kubeflow.kube.Kube` (``Kube.requests``; a watch
counts as one) and divided by N. A sampler thread reads ``/proc`` every 0.25 s for the peak
RSS and the CPU seconds of each phase's client (the library with its Backend, or the bare
script, each run alone in a process of its own), this process (the observer and the floor's
approver), the controller's replicas, kube-apiserver, etcd and Kueue (the local cluster's
processes; on another cluster those columns say n/a). The API
server's own metric ``apiserver_longrunning_requests{verb="WATCH"}`` is read during the waits.

Then StopJob of a job whose objects go promptly (``--prompt K``, default 5): K jobs one after
another, each stopped alone once it has ended, through the library and as the bare script,
requests and seconds side by side.

Then P4, with ``--sdk`` (the optional ``bench`` extra installs the Kubeflow SDK): for a few
jobs, the time from each change (running, held, succeeded), as the observer's watch saw it,
to ``Backend.wait`` returning, beside ``TrainerClient.wait_for_job_status`` on the same
TrainJob (in a thread, as it blocks), which polls every 2 s by default.

Needs the local cluster (or any with Kueue, JobSet, Trainer, the ClusterTrainingRuntime
``dispatch-kind`` and the controller running), ``KUBECONFIG`` set::

    python bench/scale.py --jobs 50 200 --cluster dk [--sdk]

It makes its namespaces, ClusterQueues, LocalQueues and the floor's AdmissionCheck, and
deletes them at the end, also when interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import multiprocessing
import os
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from floor import gone, watch_until

from dispatch_kubeflow import (
    Backend,
    DeadlineExceeded,
    DispatchError,
    Image,
    JobID,
    JobSpec,
    ObjectRef,
    ObjectState,
    RuntimeRef,
    StartRequest,
)
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.objects import is_true
from dispatch_kubeflow.errors import KubeInvalid
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r

Obj = dict[str, Any]
T = TypeVar("T")
IMAGE = "localhost/dispatch-busybox:kind"
RUNTIME = "dispatch-kind"
NODES = 2
COMMAND = ["/bin/sh", "-c", "echo ok"]
POD_CPU_M, POD_MEM_MI = 100, 32  # the runtime's requests per pod (deploy/base.yaml)
FLOOR_CHECK = "bench-floor"
FLOOR_CONTROLLER = "bench.dispatch.phpboyscout.uk/floor"
FLOOR_MANAGER = "bench-floor"
FLOOR_GATE = "bench.dispatch.phpboyscout.uk/gate"
STATE_ROOT = Path(os.environ.get("DISPATCH_STATE_ROOT", "/var/lib/dispatch-local"))
WAIT_LIMIT = timedelta(minutes=20)
DONE = (ObjectState.SUCCEEDED, ObjectState.FAILED)
SPEC = JobSpec(COMMAND, NODES, [Image(IMAGE, "IfNotPresent"),
                                RuntimeRef(names.KIND_CLUSTER_TRAINING_RUNTIME, RUNTIME)])
SDK_LIMIT = 60
"""Seconds the SDK may take to see a change before it is reported as never seeing it."""
WATCHED = ("trainjobs", "workloads", "pods", "jobsets")
"""The kinds whose watches the waits would multiply."""


def wait_limit(n: int) -> timedelta:
    """The waits' deadline for N jobs queued at once: with the quota at 10 the cluster runs
    about 25 jobs a minute, so at N = 1,000 a fixed 20 minutes ended 301 waits of jobs still
    queued (counted lost, though Kueue had simply not got to them). 6 s a job on top."""
    return WAIT_LIMIT + timedelta(seconds=6 * n)


def now() -> float:
    return time.monotonic()


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(p / 100 * len(s)) - 1))]


async def bounded(n: int, coros: Iterable[Awaitable[T]]) -> list[T | BaseException]:
    """Run ``coros`` at most ``n`` at a time; each result or its exception, in order."""
    sem = asyncio.Semaphore(n)

    async def one(c: Awaitable[T]) -> T:
        async with sem:
            return await c
    return await asyncio.gather(*(one(c) for c in coros), return_exceptions=True)


# --- processes --------------------------------------------------------------------------------


def peak_rss_mb() -> float:
    """This process's peak RSS so far, MB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cgroup(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return ""


def cluster_pids(cluster: str | None) -> dict[str, list[int]]:
    """name -> pids: this process (the observer and the floor's approver; the clients run in
    processes of their own, :func:`in_own_process`), the controller's replicas, and the local
    cluster's kube-apiserver, etcd and Kueue (from its pid files)."""
    out: dict[str, list[int]] = {"bench (observer, approver)": [os.getpid()]}
    ctl = subprocess.run(["pgrep", "-f", "bin/dispatch-admission --namespace"],
                         capture_output=True, text=True, check=False).stdout.split()
    # Both replicas (pods), on this cluster's nodes only: their cgroups name the node.
    out["controller (per replica)"] = [
        int(p) for p in ctl if not cluster or f"/dispatch-{cluster}-" in _cgroup(int(p))]
    if cluster:
        for name in ("kube-apiserver", "etcd", "kueue"):
            f = STATE_ROOT / cluster / "pids" / name
            with contextlib.suppress(OSError, ValueError):
                out[name] = [int(f.read_text())]
    return out


class Sampler:
    """Peak RSS (of the largest process of each name) and CPU seconds used (all of its
    processes), sampled from /proc on a thread so a busy event loop cannot skew it."""

    def __init__(self, pids: Mapping[str, list[int]]) -> None:
        self.pids = pids
        self.peak: dict[str, float] = dict.fromkeys(pids, 0.0)
        self._cpu0 = {n: self._cpu(ps) for n, ps in pids.items()}
        self.cpu: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _cpu(pids: list[int]) -> float:
        total = 0.0
        for p in pids:
            with contextlib.suppress(OSError):
                total += _cpu_s(p)
        return total

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            for name, pids in self.pids.items():
                for p in pids:
                    with contextlib.suppress(OSError):
                        self.peak[name] = max(self.peak[name], _rss_mb(p))

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.cpu = {n: self._cpu(ps) - self._cpu0[n] for n, ps in self.pids.items()}


def kubectl() -> str:
    found = os.environ.get("KUBECTL") or shutil.which("kubectl")
    if found:
        return found
    bins = sorted((Path.home() / ".cache/dispatch-kubeflow/bin").glob("kubectl-*"))
    if not bins:
        sys.exit("no kubectl: set KUBECTL")
    return str(bins[-1])


async def watch_count() -> dict[str, int]:
    """The API server's open watches by resource (its long-running WATCH requests)."""
    proc = await asyncio.create_subprocess_exec(
        kubectl(), "get", "--raw", "/metrics", stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL)
    out, _ = await proc.communicate()
    counts: dict[str, int] = {}
    for line in out.decode().splitlines():
        if line.startswith("apiserver_longrunning_requests{") and 'verb="WATCH"' in line:
            labels, value = line.rsplit(" ", 1)
            res = labels.split('resource="', 1)[1].split('"', 1)[0]
            counts[res] = counts.get(res, 0) + int(float(value))
    return counts


class WatchPeak:
    """Peak open watches, read from the metrics every second while running."""

    def __init__(self) -> None:
        self.peak: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            for res, n in (await watch_count()).items():
                self.peak[res] = max(self.peak.get(res, 0), n)
            await asyncio.sleep(1)

    def __enter__(self) -> WatchPeak:
        self._task = asyncio.create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


# --- the observer: decisions as a bystander sees them ----------------------------------------


class Observer:
    """One watch on a namespace's Workloads: when each was first seen QuotaReserved, and when
    its check was first seen Ready."""

    def __init__(self, kube: Kube, namespace: str, check: str) -> None:
        self.kube, self.namespace, self.check = kube, namespace, check
        self.reserved: dict[str, float] = {}
        self.ready: dict[str, float] = {}
        self._listed = asyncio.Event()
        self._task = asyncio.create_task(self._run())

    async def ready_to_watch(self) -> None:
        await asyncio.wait_for(self._listed.wait(), 60)

    def _see(self, wl: Obj, at: float) -> None:
        name = wl["metadata"]["name"]
        if is_true(wl, "QuotaReserved"):
            self.reserved.setdefault(name, at)
        for c in (wl.get("status") or {}).get("admissionChecks") or []:
            if c.get("name") == self.check and c.get("state") == "Ready":
                self.ready.setdefault(name, at)

    async def _run(self) -> None:
        async for ev in self.kube.observe(r.WORKLOAD, self.namespace):
            at = now()
            if ev.type == "SYNC":
                for wl in ev.items:
                    self._see(wl, at)
                self._listed.set()
            elif ev.type != "DELETED":
                self._see(ev.object, at)

    def latencies_ms(self) -> list[float]:
        return [(self.ready[n] - t) * 1000 for n, t in self.reserved.items() if n in self.ready]

    def close(self) -> None:
        self._task.cancel()


# --- the floor: a minimal approver and a bare script ------------------------------------------


class MinimalApprover:
    """One watch on Workloads; for each whose quota is reserved and whose check is not Ready,
    one server-side apply of the check Ready. The least an approver can do."""

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
                and checks.get(FLOOR_CHECK) == "Pending"):
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
    """A job's whole lifecycle with the fewest requests for what the library does: a runtime
    copy owned by the TrainJob, a gated TrainJob, Start returning once the Workload exists,
    Open, a wait to the end, StopJob recording its reason and seeing the pods go. Its
    requests by step (each counted where it is made: the jobs run at once on one connection),
    its stop's seconds, and whether it succeeded. No fence, no check of what it reads, no
    retry of what fails, and no dispatch labels (so no identity). Its stop proves what
    StopJob proves, that nothing of the job is left (:func:`bare_stop`)."""
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
    began = now()
    counts["stop"] += await bare_stop(kube, ns, tj)
    return counts, now() - began, is_true(seen.get(name) or {}, "Complete")


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


# --- phases -----------------------------------------------------------------------------------


@dataclass
class Phase:
    name: str
    n: int
    decisions_ms: list[float] = field(default_factory=list)
    requests: dict[str, float] = field(default_factory=dict)
    """Per job, by call (the phase's requests over N)."""
    stop_wall_s: float = 0.0
    stop_s: list[float] = field(default_factory=list)
    lost: int = 0
    failed: int = 0
    bad_a: int | None = None
    early_deadlines: int | None = None
    peak_rss: dict[str, float] = field(default_factory=dict)
    rss_by_call: dict[str, float] = field(default_factory=dict)
    """The client's own peak RSS (MB) when each call's batch had ended: which call grows it."""
    cpu: dict[str, float] = field(default_factory=dict)
    watches: dict[str, int] = field(default_factory=dict)
    idle_watches: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)


def settings(kubeconfig: str, namespace: str) -> dict[str, Any]:
    return {
        "cluster": {"kubeconfig": kubeconfig},
        "namespace": namespace,
        "probeRuntime": {"kind": names.KIND_CLUSTER_TRAINING_RUNTIME, "name": RUNTIME},
        "kueue": {"localQueue": "lq", "admissionCheck": names.ADMISSION_CHECK},
        # N concurrent Starts each wait for Kueue's Workload, which Kueue makes one after
        # another: at N = 1,000 on two cores some waited past the default 2 minutes.
        "timeouts": {"request": "30s", "start": "10m", "stopJob": "10m"},
    }


async def make_queue(kube: Kube, ns: str, check: str, quota_jobs: int) -> None:
    await kube.create(r.NAMESPACE, {"metadata": {"name": ns, "labels": {"bench": "scale"}}})
    await kube.create(r.CLUSTER_QUEUE, {"metadata": {"name": ns}, "spec": {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
        "admissionChecksStrategy": {"admissionChecks": [{"name": check}]},
        "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
            "name": "default-flavor", "resources": [
                {"name": "cpu", "nominalQuota": f"{quota_jobs * NODES * POD_CPU_M}m"},
                {"name": "memory", "nominalQuota": f"{quota_jobs * NODES * POD_MEM_MI}Mi"},
            ]}]}]}})
    await kube.create(r.LOCAL_QUEUE, {"metadata": {"name": "lq"},
                                      "spec": {"clusterQueue": ns}}, ns)
    # Pods need the namespace's default ServiceAccount, which a controller adds.
    async for ev in kube.watch(r.SERVICE_ACCOUNT, ns, field_selector="metadata.name=default"):
        if ev.type == "ADDED":
            break


async def drop_queue(kube: Kube, ns: str, *, limit: float = 600.0) -> None:
    """Delete the phase's queue and namespace, and wait until the namespace is gone, so the
    next phase starts on an API server no longer busy with this one's remains (at N = 1,000
    the floor, started at once, had 475 of its bare jobs time out on their first GET)."""
    for res, name, where in ((r.CLUSTER_QUEUE, ns, None), (r.NAMESPACE, ns, None)):
        with contextlib.suppress(DispatchError):
            await kube.delete(res, name, where)
    try:
        async with asyncio.timeout(limit):
            while True:
                try:
                    await gone(kube, r.NAMESPACE, None, field_selector=f"metadata.name={ns}")
                    return
                except DispatchError:  # refused or timed out on a busy server: look again
                    await asyncio.sleep(2)
    except TimeoutError:
        print(f"note: namespace {ns} still there {limit:.0f} s after its phase", file=sys.stderr)


async def floor_check(kube: Kube, present: bool) -> None:
    """The floor's AdmissionCheck, Active (its controller's duty, done here once)."""
    if not present:
        with contextlib.suppress(DispatchError):
            await kube.delete(r.ADMISSION_CHECK, FLOOR_CHECK)
        return
    if await kube.get_or_none(r.ADMISSION_CHECK, FLOOR_CHECK) is None:
        await kube.create(r.ADMISSION_CHECK, {"metadata": {"name": FLOOR_CHECK},
                                              "spec": {"controllerName": FLOOR_CONTROLLER}})
    await kube.patch(r.ADMISSION_CHECK, FLOOR_CHECK, {
        "apiVersion": r.ADMISSION_CHECK.api_version, "kind": "AdmissionCheck",
        "metadata": {"name": FLOOR_CHECK},
        "status": {"conditions": [{
            "type": "Active", "status": "True", "reason": "Active", "message": "bench floor",
            "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}]}},
        kind="apply", subresource="status", field_manager=FLOOR_MANAGER, force=True)


async def timed(c: Awaitable[T]) -> tuple[T, float]:
    began = now()
    result = await c
    return result, now() - began


# --- the client side in a process of its own -------------------------------------------------
CLIENT = "client (own process)"
"""The peak RSS and CPU row of the phase's client: the library and its Backend (dispatch), or
the bare script (floor), each alone in a process, so the figure is its own."""


def _client_main(conn: Any, fn_name: str, args: tuple[Any, ...]) -> None:
    """In the child: run ``fn_name(*args)`` (a coroutine function of this module) and send
    back its Phase as a dict (a class of the child's ``__mp_main__`` would not unpickle)."""
    try:
        ph = asyncio.run(globals()[fn_name](*args))
        conn.send(("ok", dataclasses.asdict(ph)))
    except BaseException as exc:  # reported by the parent, which ends the run
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        raise
    finally:
        conn.close()


async def in_own_process(pids: Mapping[str, list[int]], fn_name: str,
                         *args: Any) -> tuple[Phase, dict[str, float], dict[str, float]]:
    """The Phase ``fn_name(*args)`` returns, run in a spawned process, and the peak RSS and
    CPU seconds of that process (as :data:`CLIENT`) and of ``pids`` meanwhile. The CPU and
    RSS include the child's start and imports, on both sides alike."""
    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_client_main, args=(send, fn_name, args), daemon=True)
    proc.start()
    send.close()
    assert proc.pid is not None
    try:
        with Sampler({**pids, CLIENT: [proc.pid]}) as sampler:
            kind, value = await asyncio.to_thread(receive.recv)
    finally:
        await asyncio.to_thread(proc.join, 60)
        if proc.is_alive():
            proc.kill()
    if kind != "ok":
        sys.exit(f"{fn_name} failed in its process: {value}")
    return Phase(**value), sampler.peak, sampler.cpu


async def dispatch_client(kubeconfig: str, ns: str, n: int) -> Phase:
    """The dispatch phase's client: N jobs through one Backend, start to StopJob."""
    ph = Phase("dispatch", n)
    kube = await Kube.connect(kubeconfig=kubeconfig, request_timeout=30)
    try:
        backend = await Backend.connect(settings(kubeconfig, ns), kube=kube)
        if backend.observe_only:
            raise RuntimeError("the library is observe-only: "
                               + "; ".join(backend.observe_only_reasons))
        jobs = [JobID.new() for _ in range(n)]
        ph.idle_watches = await watch_count()
        began = now()
        last = kube.requests

        def count(call: str) -> None:
            nonlocal last
            ph.requests[call] = (kube.requests - last) / n
            last = kube.requests
            ph.rss_by_call[call] = peak_rss_mb()
        refs: list[ObjectRef] = list(await asyncio.gather(
            *(backend.start(StartRequest(j, 1, 1, SPEC)) for j in jobs)))
        count("start")
        await asyncio.gather(*(backend.open(ref) for ref in refs))
        count("open")
        deadline = datetime.now(UTC) + wait_limit(n)
        with WatchPeak() as wp:
            waited = await asyncio.gather(
                *(backend.wait(ref, *DONE, deadline=deadline) for ref in refs),
                return_exceptions=True)
        ph.watches = wp.peak
        count("wait")
        early = [w for w in waited if isinstance(w, DeadlineExceeded)
                 and datetime.now(UTC) < deadline]
        ph.early_deadlines = len(early)
        ph.lost = sum(1 for w in waited if isinstance(w, BaseException))
        ph.failed = sum(1 for w in waited if not isinstance(w, BaseException)
                        and w.state is ObjectState.FAILED)
        for w in waited:
            if isinstance(w, BaseException):
                ph.notes.append(f"wait: {type(w).__name__}: {w}")
        # The benchmark's own read, on a connection of its own (not counted).
        mine = await Kube.connect(kubeconfig=kubeconfig, request_timeout=30)
        try:
            tjs, _ = await mine.list(r.TRAINJOB, ns)
        finally:
            await mine.close()
        ph.bad_a = sum(1 for tj in tjs if (tj["metadata"].get("annotations") or {})
                       .get(names.ADMISSION_COUNT) != "1") + (n - len(tjs))
        t0 = now()
        stops = await asyncio.gather(*(timed(backend.stop_job(j, "bench")) for j in jobs))
        ph.stop_wall_s = now() - t0
        count("stop")
        ph.stop_s = [s for _, s in stops]
        for report, _ in stops:
            if report.alive or report.unproven:
                ph.notes.append(f"stop: alive {report.alive} unproven {report.unproven}")
        ph.wall_s = now() - began
        await backend.close()
    finally:
        await kube.close()
    return ph


async def dispatch_phase(kubeconfig: str, admin: Kube, n: int, quota: int,
                         pids: Mapping[str, list[int]], tag: str) -> Phase:
    ns = f"bench-{tag}-d{n}"
    await make_queue(admin, ns, names.ADMISSION_CHECK, quota)
    try:
        return await observed(admin, ns, names.ADMISSION_CHECK, pids, "dispatch_client",
                              kubeconfig, n)
    finally:
        await drop_queue(admin, ns)


async def observed(admin: Kube, ns: str, check: str, pids: Mapping[str, list[int]],
                   client: str, kubeconfig: str, n: int) -> Phase:
    """The phase ``client`` runs in its own process, its decisions timed by an Observer."""
    obs = Observer(admin, ns, check)
    try:
        await obs.ready_to_watch()
        ph, rss, cpu = await in_own_process(pids, client, kubeconfig, ns, n)
        ph.peak_rss, ph.cpu = rss, cpu
        ph.decisions_ms = obs.latencies_ms()
    finally:
        obs.close()
    return ph


@contextlib.asynccontextmanager
async def floor_side(kubeconfig: str, admin: Kube, ns: str, quota: int) -> AsyncIterator[None]:
    """The floor's namespace and queue, with :class:`MinimalApprover` serving its check while
    it lasts; all of it gone afterwards."""
    await make_queue(admin, ns, FLOOR_CHECK, quota)
    approver_kube = await Kube.connect(kubeconfig=kubeconfig, request_timeout=30)
    approver = MinimalApprover(approver_kube, ns)
    try:
        yield
    finally:
        approver.close()
        await approver_kube.close()
        await drop_queue(admin, ns)


async def floor_client(kubeconfig: str, ns: str, n: int) -> Phase:
    """The floor phase's client: N bare scripts, on one connection."""
    ph = Phase("floor", n)
    # A bare script waits for the server as long as it takes, and its N first GETs queue in
    # one connection pool, the wait counted in a request's timeout: with 30 s, 475 and 573
    # of 1,000 bare jobs timed out there (two runs of 2026-12-04), a floor of half the load.
    kube = await Kube.connect(kubeconfig=kubeconfig, request_timeout=600)
    try:
        began = now()
        results = await asyncio.gather(*(bare_job(kube, ns, i) for i in range(n)),
                                       return_exceptions=True)
        ph.wall_s = now() - began
    finally:
        await kube.close()
    done = [x for x in results if not isinstance(x, BaseException)]
    ph.lost = n - len(done)
    ph.failed = sum(1 for _, _, ok in done if not ok)
    for call in ("start", "open", "wait", "stop"):
        ph.requests[call] = sum(c[call] for c, _, _ in done) / max(1, len(done))
    ph.stop_s = [s for _, s, _ in done]
    ph.stop_wall_s = max(ph.stop_s, default=0.0)
    for x in results:
        if isinstance(x, BaseException):
            ph.notes.append(f"bare job: {type(x).__name__}: {x}")
    return ph


async def floor_phase(kubeconfig: str, admin: Kube, n: int, quota: int,
                      pids: Mapping[str, list[int]], tag: str) -> Phase:
    ns = f"bench-{tag}-f{n}"
    async with floor_side(kubeconfig, admin, ns, quota):
        return await observed(admin, ns, FLOOR_CHECK, pids, "floor_client", kubeconfig, n)


# --- StopJob of a job whose objects go promptly ----------------------------------------------


@dataclass
class Prompt:
    k: int
    requests: dict[str, list[int]] = field(default_factory=dict)
    seconds: dict[str, list[float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


async def prompt_stops(kubeconfig: str, admin: Kube, k: int, quota: int, tag: str) -> Prompt:
    """StopJob of a job whose objects go promptly: ``k`` jobs one after another, each
    stopped on its own once it has ended (so the garbage collector is not behind), through
    the library and as :func:`bare_job` (its :func:`bare_stop`)."""
    out = Prompt(k, {"dispatch": [], "floor": []}, {"dispatch": [], "floor": []})
    ns = f"bench-{tag}-p"
    await make_queue(admin, ns, names.ADMISSION_CHECK, quota)
    kube = await Kube.connect(kubeconfig=kubeconfig, request_timeout=30)
    try:
        backend = await Backend.connect(settings(kubeconfig, ns), kube=kube)
        for _ in range(k):
            job = JobID.new()
            ref = await backend.start(StartRequest(job, 1, 1, SPEC))
            await backend.open(ref)
            await backend.wait(ref, *DONE, deadline=datetime.now(UTC) + WAIT_LIMIT)
            before, began = kube.requests, now()
            report = await backend.stop_job(job, "bench")
            out.seconds["dispatch"].append(now() - began)
            out.requests["dispatch"].append(kube.requests - before)
            if report.alive or report.unproven:
                out.notes.append(f"stop: alive {report.alive} unproven {report.unproven}")
        await backend.close()
    finally:
        await kube.close()
        await drop_queue(admin, ns)
    ns = f"bench-{tag}-q"
    async with floor_side(kubeconfig, admin, ns, quota):
        kube = await Kube.connect(kubeconfig=kubeconfig, request_timeout=30)
        try:
            for i in range(k):
                counts, secs, _ = await bare_job(kube, ns, i)
                out.requests["floor"].append(counts["stop"])
                out.seconds["floor"].append(secs)
        finally:
            await kube.close()
    return out


def prompt_table(p: Prompt) -> None:
    print(f"\nStopJob of a job whose objects go promptly ({p.k} jobs, one at a time)")
    print(f"  {'':<44}{'dispatch':>10}{'floor':>10}{'ratio':>8}")
    rows: list[tuple[str, Mapping[str, Sequence[float]], Callable[[Sequence[float]], float],
                     str]] = [
        ("requests p50", p.requests, statistics.median, ".1f"),
        ("requests max", p.requests, max, ".0f"),
        ("seconds p50", p.seconds, statistics.median, ".2f"),
        ("seconds max", p.seconds, max, ".2f")]
    for label, of, pick, fmt in rows:
        a, b = float(pick(of["dispatch"])), float(pick(of["floor"]))
        print(f"  {label:<44}{a:>10{fmt}}{b:>10{fmt}}{ratio(a, b):>8}")
    for note in sorted(set(p.notes))[:10]:
        print(f"  note: {note}")


# --- P4: a change to the waiter's return, beside the Kubeflow SDK -----------------------------


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


# --- the table --------------------------------------------------------------------------------


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b and b == b else "-"  # b == b: not nan


def table(d: Phase, f: Phase, workers: int | None = None) -> None:
    with_workers = "" if workers is None else f", the controller with --workers={workers}"
    print(f"\nN = {d.n} two-node jobs ({d.wall_s:.0f} s dispatch, {f.wall_s:.0f} s floor"
          f"{with_workers})")
    print(f"  {'':<44}{'dispatch':>10}{'floor':>10}{'ratio':>8}")

    # A phase not run (--no-floor, --no-dispatch) has no wall time: no ratio against it.
    both_ran = d.wall_s > 0 and f.wall_s > 0

    def row(label: str, a: float | None, b: float | None, fmt: str = ".0f",
            *, one_phase: bool = False) -> None:
        sa = "-" if a is None else format(a, fmt)
        sb = "-" if b is None else format(b, fmt)
        text = ratio(a, b) if a is not None and b is not None and (both_ran or one_phase) else "-"
        print(f"  {label:<44}{sa:>10}{sb:>10}{text:>8}")
    for p in (50, 90, 99):
        row(f"decision latency p{p}, ms", pct(d.decisions_ms, p), pct(f.decisions_ms, p))
    row("decision latency max, ms", max(d.decisions_ms, default=0), max(f.decisions_ms,
                                                                         default=0))
    row("decisions seen", len(d.decisions_ms), len(f.decisions_ms))
    for call in ("start", "open", "wait", "stop"):
        row(f"requests per job: {call}", d.requests.get(call), f.requests.get(call), ".1f")
    row("requests per job: whole lifecycle", sum(d.requests.values()),
        sum(f.requests.values()), ".1f")
    row("StopJob of all at once, wall s", d.stop_wall_s, f.stop_wall_s, ".1f")
    row("StopJob per job p50, s", pct(d.stop_s, 50), pct(f.stop_s, 50), ".2f")
    row("StopJob per job max, s", max(d.stop_s, default=0), max(f.stop_s, default=0), ".2f")
    row("jobs lost", d.lost, f.lost)
    row("jobs failed", d.failed, f.failed)
    row("jobs with A != 1", d.bad_a, None)
    row("waits ended early (DeadlineExceeded)", d.early_deadlines, None)
    # Either phase's names: with --no-dispatch only the floor measured them.
    for name in dict.fromkeys([*d.peak_rss, *f.peak_rss]):
        row(f"peak RSS MB: {name}", d.peak_rss.get(name) or None, f.peak_rss.get(name) or None)
    for call, mb in d.rss_by_call.items():
        row(f"peak RSS MB: client, {call} done", mb, f.rss_by_call.get(call))
    for name in dict.fromkeys([*d.cpu, *f.cpu]):
        row(f"CPU s: {name}", d.cpu.get(name), f.cpu.get(name), ".1f")
    for res in WATCHED:
        row(f"API server watches (waits/before): {res}", d.watches.get(res, 0),
            d.idle_watches.get(res, 0), one_phase=True)
    for note in sorted(set(d.notes + f.notes))[:10]:
        print(f"  note: {note}")


def p4_table(rows: list[P4]) -> None:
    print("\nP4: from the change (as a watch saw it) to the waiter returning, ms")
    print(f"  {'change':<12}{'Backend.wait p50':>18}{'max':>8}{'SDK wait p50':>14}{'max':>8}")
    for row in rows:
        sdk = (f"{statistics.median(row.sdk_ms):>14.0f}{max(row.sdk_ms):>8.0f}"
               if row.sdk_ms else f"{'-':>14}{'-':>8}")
        print(f"  {row.change:<12}{statistics.median(row.ours_ms):>18.0f}"
              f"{max(row.ours_ms):>8.0f}{sdk}")
        for why in sorted(set(row.sdk_never)):
            print(f"    the SDK never returned ({len(row.sdk_never)}x): {why}")
    print("  (held: the SDK has no such status)")


CONTROLLER = r.Resource("apps", "v1", "deployments", "Deployment")
CONTROLLER_NAME = "dispatch-admission"


async def set_workers(admin: Kube, workers: int) -> None:
    """Roll the deployed controller out with ``--workers=W`` and wait until every replica
    runs it and one leads (the phase's decisions are that version's)."""
    dep = await admin.get(CONTROLLER, CONTROLLER_NAME, names.CONTROLLER_NAMESPACE)
    containers = dep["spec"]["template"]["spec"]["containers"]
    i = next(i for i, c in enumerate(containers) if c["name"] == "controller")
    args = [a for a in containers[i].get("args", []) if not a.startswith("--workers=")]
    # A JSON patch whose test op carries the version read: a concurrent edit fails it (409).
    await admin.patch(CONTROLLER, CONTROLLER_NAME, [
        {"op": "test", "path": "/metadata/resourceVersion",
         "value": dep["metadata"]["resourceVersion"]},
        {"op": "replace", "path": f"/spec/template/spec/containers/{i}/args",
         "value": [*args, f"--workers={workers}"]}], names.CONTROLLER_NAMESPACE, kind="json")
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        dep = await admin.get(CONTROLLER, CONTROLLER_NAME, names.CONTROLLER_NAMESPACE)
        st, want = dep.get("status", {}), dep["spec"].get("replicas", 1)
        lease = await admin.get_or_none(r.LEASE, names.LEASE_NAME, names.CONTROLLER_NAMESPACE)
        pods, _ = await admin.list(r.POD, names.CONTROLLER_NAMESPACE,
                                   label_selector=f"app.kubernetes.io/name={CONTROLLER_NAME}")
        # The replicas' identity is their pod's name: the leader must be a pod of this roll-out.
        new = {p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")
               and f"--workers={workers}" in p["spec"]["containers"][i].get("args", [])}
        if (st.get("observedGeneration") == dep["metadata"]["generation"]
                and st.get("updatedReplicas") == want == st.get("readyReplicas")
                and st.get("replicas") == want and lease
                and (lease.get("spec") or {}).get("holderIdentity") in new):
            return
        await asyncio.sleep(1)
    raise TimeoutError(f"the controller did not roll out with --workers={workers} in 180 s")


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, nargs="+", default=[50, 200, 1000], help="N, each run")
    ap.add_argument("--quota", type=int, default=10, help="jobs the ClusterQueue admits at once")
    ap.add_argument("--workers", type=int, nargs="+", default=None, metavar="W",
                    help="roll the controller out with --workers=W before each dispatch phase "
                         "(one dispatch phase per W, all beside one floor; default: as deployed)")
    ap.add_argument("--floor", action=argparse.BooleanOptionalAction, default=True,
                    help="also run each N against the floor (--no-floor: the library alone, "
                         "e.g. to see whether N jobs go through at all in half the time)")
    ap.add_argument("--dispatch", action=argparse.BooleanOptionalAction, default=True,
                    help="run each N through the library and the controller (--no-dispatch: "
                         "the floor alone, e.g. beside an earlier --no-floor run of the same N)")
    ap.add_argument("--cluster", default="dk", help="the local cluster (its processes' figures)")
    ap.add_argument("--prompt", type=int, default=5, metavar="JOBS",
                    help="StopJob of a job whose objects go promptly, over this many jobs")
    ap.add_argument("--sdk", type=int, default=0, metavar="JOBS",
                    help="P4 against the Kubeflow SDK over this many jobs (the bench extra)")
    a = ap.parse_args()
    if not (a.floor or a.dispatch):
        ap.error("--no-floor with --no-dispatch leaves nothing to run")
    kubeconfig = os.environ.get("KUBECONFIG")
    if not kubeconfig:
        sys.exit("set KUBECONFIG to the cluster to measure")
    tag = uuid.uuid4().hex[:6]
    admin = await Kube.connect(kubeconfig=kubeconfig, request_timeout=30)
    try:
        await floor_check(admin, True)
        for n in a.jobs:
            ds: list[tuple[int | None, Phase]] = []
            pids = cluster_pids(a.cluster)
            for w in (a.workers or [None]) if a.dispatch else []:
                if w is not None:
                    await set_workers(admin, w)
                    # After the roll-out: the controller's replicas are new processes.
                    pids = cluster_pids(a.cluster)
                ds.append((w, await dispatch_phase(kubeconfig, admin, n, a.quota, pids,
                                                   f"{tag}{w or ''}")))
            # Without the floor (--no-floor), its column is empty ("-", nan) and no ratio.
            f = (await floor_phase(kubeconfig, admin, n, a.quota, pids, tag) if a.floor
                 else Phase("floor (not run)", n))
            # Without the library's phase (--no-dispatch), its column is the empty one.
            for w, d in ds or [(None, Phase("dispatch (not run)", n))]:
                table(d, f, w)
        if a.prompt:
            prompt_table(await prompt_stops(kubeconfig, admin, a.prompt, a.quota, tag))
        if a.sdk:
            p4_table(await p4(kubeconfig, admin, a.sdk, tag))
    finally:
        await floor_check(admin, False)
        await admin.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

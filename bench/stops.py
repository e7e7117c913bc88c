"""StopJob of a crowd, traced: where one stop's time goes when N stop at once (issue 28).

N jobs run to their end through one Backend (as the scale benchmark's dispatch phase runs
them), then all N are stopped at once, every request of the Backend recorded with the stop
it was sent for (a context variable each stop's task carries; a shared list is the first
asker's). Beside them, unless ``--no-floor``, the same N as the bare script (the floor),
also stopped all at once. It prints, side by side: the stops' wall time and their
percentiles; the requests sent during the stops by verb and kind, with their latency; how
many requests were in flight at most; and, every 2 s, how much of the jobs' objects the
cluster still held (one admin list per kind) beside how many stops had ended. Then the
timelines of the stops at the 10th, 50th and 90th percentile.

Needs the local cluster with the controller (``make cluster-up``), ``KUBECONFIG`` set::

    python bench/stops.py --jobs 200
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import os
import resource
import sys
import tracemalloc
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from bare import bare_run, bare_stop, floor_check
from phases import floor_side
from queues import DONE, SPEC, drop_queue, make_queue, now, settings, wait_limit
from tables import pct

from dispatch_kubeflow import Backend, JobID, StartRequest
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r
from dispatch_kubeflow.kube.session import REQUEST_CONNECTIONS
from dispatch_kubeflow.kube.slots import CALL_BEGAN

STOP: contextvars.ContextVar[str] = contextvars.ContextVar("stop", default="")
"""The job whose stop sent a request ("": none)."""


@dataclass
class Call:
    stop: str
    verb: str
    kind: str
    began: float
    ended: float = 0.0
    error: str = ""


@dataclass
class Trace:
    calls: list[Call] = field(default_factory=list)
    on: bool = False
    flying: int = 0
    peak: int = 0

    def begin(self, verb: str, kind: str) -> Call | None:
        if not self.on:
            return None
        c = Call(STOP.get(), verb, kind, now())
        self.calls.append(c)
        self.flying += 1
        self.peak = max(self.peak, self.flying)
        return c

    def end(self, c: Call | None, error: BaseException | None = None) -> None:
        if c is None:
            return
        c.ended = now()
        self.flying -= 1
        if error is not None:
            c.error = type(error).__name__


class Traced:
    """A Kube whose every request is recorded in ``trace`` (watches: their opening)."""

    def __init__(self, kube: Kube, trace: Trace) -> None:
        self._kube, self._trace = kube, trace

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._kube, name)
        if name in ("watch", "observe"):
            return self._stream(name, attr)
        if name in ("get", "get_or_none", "list", "create", "patch", "delete"):
            return self._request(name, attr)
        return attr

    def _request(self, verb: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
        async def call(res: Any, *args: Any, **kw: Any) -> Any:
            c = self._trace.begin(verb, getattr(res, "plural", str(res)))
            try:
                out = await fn(res, *args, **kw)
            except BaseException as exc:
                self._trace.end(c, exc)
                raise
            self._trace.end(c)
            return out
        return call

    def _stream(self, verb: str, fn: Callable[..., AsyncIterator[Any]]) -> Callable[..., Any]:
        def call(res: Any, *args: Any, **kw: Any) -> AsyncIterator[Any]:
            c = self._trace.begin(verb, getattr(res, "plural", str(res)))
            self._trace.end(c)
            return fn(res, *args, **kw)
        return call


KINDS = (r.TRAINJOB, r.TRAINING_RUNTIME, r.JOBSET, r.JOB, r.POD, r.WORKLOAD)


async def left(admin: Kube, ns: str) -> dict[str, int]:
    """How many objects of each kind the namespace still holds (the bench's own reads)."""
    out = {}
    for res in KINDS:
        items, _ = await admin.list(res, ns, metadata=True, trim=lambda o: {})
        out[res.plural] = len(items)
    return out


async def sample_left(admin: Kube, ns: str, ended: Callable[[], int], began: float,
                      rows: list[tuple[float, int, dict[str, int]]]) -> None:
    while True:
        rows.append((now() - began, ended(), await left(admin, ns)))
        await asyncio.sleep(2)


@dataclass
class Side:
    name: str
    wall: float = 0.0
    each: list[float] = field(default_factory=list)
    by_job: dict[str, float] = field(default_factory=dict)
    rows: list[tuple[float, int, dict[str, int]]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class Memory:
    """Where the crowd's memory goes (``--memory``): tracemalloc from just before the crowd,
    a snapshot whenever the traced memory passes its last high by 5 %, and the peak's top
    allocation sites against the start. The process's peak RSS before and after too."""

    def __init__(self) -> None:
        tracemalloc.start(8)
        self.base = tracemalloc.take_snapshot()
        self.rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        self.high = 0
        self.peak: tracemalloc.Snapshot | None = None
        self.task = asyncio.create_task(self._sample())

    async def _sample(self) -> None:
        while True:
            cur, _ = tracemalloc.get_traced_memory()
            if cur > self.high * 1.05:
                self.high, self.peak = cur, tracemalloc.take_snapshot()
            await asyncio.sleep(0.25)

    def report(self) -> None:
        self.task.cancel()
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"\n## memory: peak RSS {self.rss_before:.0f} MB before the crowd, {rss:.0f} MB "
              f"after; traced peak {self.high / 1e6:.1f} MB above tracemalloc's start\n")
        tracemalloc.stop()
        if self.peak is None:
            return
        for st in self.peak.compare_to(self.base, "traceback")[:15]:
            print(f"{st.size_diff / 1e6:8.2f} MB {st.count_diff:8d} blocks")
            for line in st.traceback.format()[-10:]:
                print(f"      {line}")


async def stop_crowd(name: str, admin: Kube, ns: str,
                     stops: dict[str, Callable[[], Awaitable[Any]]], *,
                     fifo: bool = False, memory: bool = False) -> Side:
    """Every stop at once. ``fifo``: every stop's requests marked as begun at the same
    moment (kube.slots), so they wait for a connection first come, first served, as before
    requests were handed out oldest call first."""
    side = Side(name)
    done = 0
    began = now()
    crowd_began = asyncio.get_running_loop().time()
    sampler = asyncio.create_task(sample_left(admin, ns, lambda: done, began, side.rows))
    mem = Memory() if memory else None
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    async def one(job: str, fn: Callable[[], Awaitable[Any]]) -> None:
        nonlocal done
        STOP.set(job)
        if fifo:
            CALL_BEGAN.set(crowd_began)
        t0 = now()
        try:
            report = await fn()
        except Exception as exc:  # recorded and counted, the bench goes on
            side.notes.append(f"{job}: {type(exc).__name__}: {exc}")
            return
        finally:
            done += 1
        side.by_job[job] = now() - t0
        if getattr(report, "alive", None) or getattr(report, "unproven", None):
            side.notes.append(f"{job}: alive {report.alive} unproven {report.unproven}")

    await asyncio.gather(*(asyncio.create_task(one(j, fn), context=contextvars.copy_context())
                           for j, fn in stops.items()))
    side.wall = now() - began
    sampler.cancel()
    if mem is not None:
        mem.report()
    print(f"{name}: peak RSS {rss_before:.0f} MB before the crowd, "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB after")
    side.rows.append((now() - began, done, await left(admin, ns)))
    side.each = list(side.by_job.values())
    return side


async def dispatch_side(kubeconfig: str, admin: Kube, ns: str, n: int, quota: int,
                        trace: Trace, *, fifo: bool = False, memory: bool = False,
                        pool: int | None = None) -> Side:
    await make_queue(admin, ns, names.ADMISSION_CHECK, quota)
    kube = await Kube.connect(kubeconfig=kubeconfig, request_timeout=30,
                              connections=pool or REQUEST_CONNECTIONS)
    try:
        backend = await Backend.connect(settings(kubeconfig, ns), kube=Traced(kube, trace))
        jobs = [JobID.new() for _ in range(n)]
        refs = list(await asyncio.gather(
            *(backend.start(StartRequest(j, 1, 1, SPEC)) for j in jobs)))
        await asyncio.gather(*(backend.open(ref) for ref in refs))
        deadline = datetime.now(UTC) + wait_limit(n)
        await asyncio.gather(*(backend.wait(ref, *DONE, deadline=deadline) for ref in refs))
        print(f"dispatch: {n} jobs ended; stopping all at once", file=sys.stderr)
        trace.on = True

        def stop_of(j: JobID) -> Callable[[], Awaitable[Any]]:
            return lambda: backend.stop_job(j, "bench")
        label = "dispatch, first come" if fifo else "dispatch"
        side = await stop_crowd(label + (f", {pool} connections" if pool else ""), admin, ns,
                                {str(j): stop_of(j) for j in jobs}, fifo=fifo,
                                memory=memory)
        trace.on = False
        await backend.close()
        return side
    finally:
        await kube.close()
        await drop_queue(admin, ns)


async def floor_side_run(kubeconfig: str, admin: Kube, ns: str, n: int, quota: int) -> Side:
    await floor_check(admin, True)
    try:
        return await floor_stops(kubeconfig, admin, ns, n, quota)
    finally:
        await floor_check(admin, False)


async def floor_stops(kubeconfig: str, admin: Kube, ns: str, n: int, quota: int) -> Side:
    async with floor_side(kubeconfig, admin, ns, quota):
        kube = await Kube.connect(kubeconfig=kubeconfig, request_timeout=600)
        try:
            ran = await asyncio.gather(*(bare_run(kube, ns, i) for i in range(n)))
            print(f"floor: {n} jobs ended; stopping all at once", file=sys.stderr)

            def stop_of(tj: dict[str, Any]) -> Callable[[], Awaitable[Any]]:
                return lambda: bare_stop(kube, ns, tj)
            return await stop_crowd("floor", admin, ns,
                                    {tj["metadata"]["name"]: stop_of(tj) for _, tj, _ in ran})
        finally:
            await kube.close()


def report(n: int, sides: list[Side], trace: Trace) -> None:
    print(f"\n## StopJob of {n} at once\n")
    print("| | " + " | ".join(s.name for s in sides) + " |")
    print("|---|" + "---:|" * len(sides))
    rows: list[tuple[str, Callable[[Side], float]]] = [
        ("wall, s", lambda s: s.wall),
        ("per stop p10, s", lambda s: pct(s.each, 10)),
        ("per stop p50, s", lambda s: pct(s.each, 50)),
        ("per stop p90, s", lambda s: pct(s.each, 90)),
        ("per stop max, s", lambda s: max(s.each, default=0.0)),
        ("failed or left", lambda s: float(len(s.notes)))]
    for label, f in rows:
        print(f"| {label} | " + " | ".join(f"{f(s):.2f}" for s in sides) + " |")
    fl = next((s for s in sides if s.name == "floor" and s.wall), None)
    for d in sides:
        if fl is None or d is fl:
            continue
        print(f"\n{d.name} against the floor: wall {d.wall / fl.wall:.2f}x, per-stop p50 "
              f"{pct(d.each, 50) / max(pct(fl.each, 50), 1e-9):.2f}x, p10 "
              f"{pct(d.each, 10) / max(pct(fl.each, 10), 1e-9):.2f}x")
    for s in sides:
        for note in s.notes[:5]:
            print(f"note ({s.name}): {note}")
    calls = [c for c in trace.calls if c.ended]
    print(f"\n## dispatch's requests during the stops: {len(trace.calls)}, "
          f"at most {trace.peak} in flight\n")
    print("| verb kind | count | errors | p50 ms | p99 ms |\n|---|---:|---:|---:|---:|")
    groups: dict[tuple[str, str], list[Call]] = defaultdict(list)
    for c in calls:
        groups[(c.verb, c.kind)].append(c)
    for (verb, kind), cs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        ms = [1000 * (c.ended - c.began) for c in cs]
        errors = Counter(c.error for c in cs if c.error)
        print(f"| {verb} {kind} | {len(cs)} | {dict(errors) or ''} | {pct(ms, 50):.0f} | "
              f"{pct(ms, 99):.0f} |")
    for s in sides:
        print(f"\n## {s.name}: objects left while the stops ran\n")
        print("| s | stops ended | " + " | ".join(k.plural for k in KINDS) + " |")
        print("|---:|---:|" + "---:|" * len(KINDS))
        for t, ended, counts in s.rows:
            print(f"| {t:.0f} | {ended} | " + " | ".join(str(counts[k.plural]) for k in KINDS)
                  + " |")
    traced = next((s for s in sides if s.name == "dispatch"), None)
    if traced is None or not traced.by_job:
        return
    t0 = min(c.began for c in trace.calls) if trace.calls else 0.0
    ranked = sorted(traced.by_job.items(), key=lambda kv: kv[1])
    for p in (10, 50, 90):
        job, secs = ranked[min(len(ranked) - 1, int(p / 100 * (len(ranked) - 1)))]
        print(f"\n## the p{p} stop ({secs:.1f} s): its requests, from the crowd's start\n")
        for c in (c for c in trace.calls if c.stop == job):
            print(f"  {c.began - t0:7.2f} +{(c.ended or c.began) - c.began:6.2f} "
                  f"{c.verb} {c.kind} {c.error}")


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--quota", type=int, default=10)
    ap.add_argument("--floor", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--memory", action="store_true",
                    help="trace the dispatch side's memory during its stops (tracemalloc, "
                         "which slows it: its times are not comparable)")
    ap.add_argument("--compare-order", action="store_true",
                    help="first a dispatch side whose stops are served first come, first "
                         "served (as before kube.slots), then the library's own")
    ap.add_argument("--pool", type=int, default=None, metavar="N",
                    help="the dispatch side's requests share at most N connections (default: "
                         "the library's); one size a run, so each run's peak RSS is its own")
    a = ap.parse_args()
    kubeconfig = os.environ.get("KUBECONFIG") or sys.exit("set KUBECONFIG")
    tag = uuid.uuid4().hex[:6]
    admin = await Kube.connect(kubeconfig=kubeconfig, request_timeout=60)
    trace = Trace()
    try:
        sides = []
        if a.compare_order:
            sides.append(await dispatch_side(kubeconfig, admin, f"stops-{tag}-o", a.jobs,
                                             a.quota, Trace(), fifo=True))
        sides.append(await dispatch_side(kubeconfig, admin, f"stops-{tag}-d", a.jobs, a.quota,
                                         trace, memory=a.memory, pool=a.pool))
        if a.floor:
            report(a.jobs, sides, trace)  # kept should the floor's side fail
            sides.append(await floor_side_run(kubeconfig, admin, f"stops-{tag}-f", a.jobs,
                                              a.quota))
    finally:
        await admin.close()
    report(a.jobs, sides, trace)


if __name__ == "__main__":
    asyncio.run(main())

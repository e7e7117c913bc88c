"""The scale benchmark's two phases for one N: dispatch (N jobs through one Backend and the
admission controller) and floor (N bare scripts behind :class:`bare.MinimalApprover`), each
client in a process of its own, its decisions timed by an :class:`observer.Observer`."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import multiprocessing
import sys
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from apiserver import profile, request_counts
from bare import FLOOR_CHECK, MinimalApprover, bare_run, bare_stop
from fenced import FENCED_CHECK, FencedApprover
from observer import Observer
from queues import DONE, SPEC, drop_queue, make_queue, now, settings, wait_limit
from sampler import Sampler, WatchPeak, peak_rss_mb, watch_count

from dispatch_kubeflow import (
    Backend,
    DeadlineExceeded,
    JobID,
    ObjectRef,
    ObjectState,
    StartRequest,
)
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r

T = TypeVar("T")


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
    transient_failures: dict[str, int] = field(default_factory=dict)
    """The client's tries that failed transiently (timed out, refused, 429, 503, ...), by
    reason, whether a later try succeeded or not (``Kube.transient_failures``)."""
    apiserver: dict[str, int] = field(default_factory=dict)
    """The API server's requests during the phase, everyone's, by "VERB resource"."""
    profile: str = ""
    """The API server's CPU profile during the phase's decisions (``--apiserver-profile``)."""
    notes: list[str] = field(default_factory=list)


async def bounded(n: int, coros: Iterable[Awaitable[T]]) -> list[T | BaseException]:
    """Run ``coros`` at most ``n`` at a time; each result or its exception, in order."""
    sem = asyncio.Semaphore(n)

    async def one(c: Awaitable[T]) -> T:
        async with sem:
            return await c
    return await asyncio.gather(*(one(c) for c in coros), return_exceptions=True)


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
    back its Phase as a dict (plain data, whatever the child calls its modules: a class of
    the child's ``__mp_main__`` would not unpickle)."""
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
        waited = await asyncio.gather(
            *(backend.wait(ref, *DONE, deadline=deadline) for ref in refs),
            return_exceptions=True)
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
        ph.transient_failures = dict(kube.transient_failures)
        await kube.close()
    return ph


async def dispatch_phase(kubeconfig: str, admin: Kube, n: int, quota: int,
                         pids: Mapping[str, list[int]], tag: str, *,
                         profile_s: int = 0) -> Phase:
    ns = f"bench-{tag}-d{n}"
    await make_queue(admin, ns, names.ADMISSION_CHECK, quota)
    try:
        return await observed(admin, ns, names.ADMISSION_CHECK, pids, "dispatch_client",
                              kubeconfig, n, profile_s=profile_s)
    finally:
        await drop_queue(admin, ns)


async def observed(admin: Kube, ns: str, check: str, pids: Mapping[str, list[int]],
                   client: str, kubeconfig: str, n: int, *, profile_s: int = 0) -> Phase:
    """The phase ``client`` runs in its own process, its decisions timed by an Observer;
    the API server's requests counted over it, its open watches before it and at their
    peak during it, and (``profile_s``) its CPU profiled once a third of the decisions were
    seen."""
    obs = Observer(admin, ns, check)
    profiling: asyncio.Task[str] | None = None
    try:
        await obs.ready_to_watch()
        idle_watches = await watch_count()
        before = await request_counts()
        if profile_s:
            profiling = asyncio.create_task(profile_mid(obs, n, profile_s, ns))
        # The same sampling of the API server in every phase: until 2026-12-07 only the
        # dispatch phase's waits read its metrics (every second), a load the floor's
        # decisions never met.
        with WatchPeak() as wp:
            ph, rss, cpu = await in_own_process(pids, client, kubeconfig, ns, n)
        ph.apiserver = dict(await request_counts() - before)
        ph.watches, ph.idle_watches = wp.peak, idle_watches
        ph.peak_rss, ph.cpu = rss, cpu
        ph.decisions_ms = obs.latencies_ms()
        if profiling is not None:
            ph.profile = (await profiling if profiling.done() else
                          f"no profile: the phase ended before a third of its decisions "
                          f"and {profile_s} s more")
    finally:
        if profiling is not None:
            profiling.cancel()
        obs.close()
    return ph


async def profile_mid(obs: Observer, n: int, seconds: int, ns: str) -> str:
    """The API server's CPU profile over ``seconds``, begun once a third of the phase's N
    decisions were seen (its middle, where decisions flow)."""
    await obs.until_ready(n // 3)
    return await profile(seconds, Path(f"/tmp/{ns}.apiserver.pprof"))


@contextlib.asynccontextmanager
async def floor_side(kubeconfig: str, admin: Kube, ns: str, quota: int, *,
                     fenced: bool = False) -> AsyncIterator[None]:
    """The floor's namespace and queue, with :class:`MinimalApprover` (``fenced``: the
    :class:`FencedApprover`) serving its check while it lasts; all of it gone afterwards."""
    await make_queue(admin, ns, FENCED_CHECK if fenced else FLOOR_CHECK, quota)
    approver_kube = await Kube.connect(kubeconfig=kubeconfig, request_timeout=30)
    approver = (FencedApprover if fenced else MinimalApprover)(approver_kube, ns)
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
        results = await asyncio.gather(*(bare_run(kube, ns, i) for i in range(n)),
                                       return_exceptions=True)
        done = [x for x in results if not isinstance(x, BaseException)]
        # Then every stop at once, as the dispatch phase stops its N (each stopped as it
        # ended, the floor's stops met a quiet garbage collector, and no crowd: the ratio
        # compared a crowd with lone stops until 2026-12-06).
        t0 = now()
        stopped = await asyncio.gather(
            *(timed(bare_stop(kube, ns, tj)) for _, tj, _ in done), return_exceptions=True)
        ph.stop_wall_s = now() - t0
        ph.wall_s = now() - began
    finally:
        ph.transient_failures = dict(kube.transient_failures)
        await kube.close()
    stops = [x for x in stopped if not isinstance(x, BaseException)]
    ph.lost = n - len(stops)
    ph.failed = sum(1 for _, _, ok in done if not ok)
    for (counts, _, _), one in zip(done, stopped, strict=True):
        counts["stop"] += 0 if isinstance(one, BaseException) else one[0]
    for call in ("start", "open", "wait", "stop"):
        ph.requests[call] = sum(c[call] for c, _, _ in done) / max(1, len(done))
    ph.stop_s = [s for _, s in stops]
    for what, xs in (("bare job", results), ("bare stop", stopped)):
        for x in xs:
            if isinstance(x, BaseException):
                ph.notes.append(f"{what}: {type(x).__name__}: {x}")
    return ph


async def floor_phase(kubeconfig: str, admin: Kube, n: int, quota: int,
                      pids: Mapping[str, list[int]], tag: str, *,
                      fenced: bool = False, profile_s: int = 0) -> Phase:
    """The floor's phase; ``fenced``: its approver sends the controller's three fenced
    requests (bench/fenced.py), not one write."""
    ns = f"bench-{tag}-{'g' if fenced else 'f'}{n}"
    async with floor_side(kubeconfig, admin, ns, quota, fenced=fenced):
        ph = await observed(admin, ns, FENCED_CHECK if fenced else FLOOR_CHECK, pids,
                            "floor_client", kubeconfig, n, profile_s=profile_s)
    if fenced:
        ph.name = "fenced floor"
    return ph

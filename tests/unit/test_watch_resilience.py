"""Our watch I/O against network faults: a small HTTP server on 127.0.0.1 plays the API server.

It speaks just enough of the list/watch shape (a list answer with a resourceVersion, then
a chunked watch stream of JSON lines) to drive :meth:`Kube.watch` and :meth:`Kube.observe`,
and breaks the stream the ways a network or a restarting server does: mid-line, by
disconnecting, by going silent, with garbage. What is tested is our code's reaction (a
KubeError of the error tree, a fresh list, no spurious timeout), not Kubernetes.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web

from dispatch_kubeflow import errors
from dispatch_kubeflow.errors import DeadlineExceeded
from dispatch_kubeflow.kube import Kube, transport
from dispatch_kubeflow.kube import resources as r
from dispatch_kubeflow.kube.transport import WatchBackoff, WatchEvent
from dispatch_kubeflow.waits import Watched, deadline_after, wait_for_all, within
from tests.unit.http_kube import kube_at

pytestmark = pytest.mark.asyncio

Obj = dict[str, Any]
NS = "ns"
Behaviour = Callable[[web.Request, "FakeApi"], Awaitable[web.StreamResponse]]


def pod(name: str, rv: int) -> Obj:
    return {"metadata": {"name": name, "namespace": NS, "resourceVersion": str(rv)}}


def line(typ: str, obj: Obj) -> bytes:
    return json.dumps({"type": typ, "object": obj}).encode() + b"\n"


class FakeApi:
    """Lists answer ``items``; each watch runs the next behaviour of ``watches`` (then
    ``idle``: a stream that sends nothing and ends at its timeoutSeconds)."""

    def __init__(self) -> None:
        self.items: list[Obj] = [pod("p0", 1)]
        self.rv = 1
        self.watches: list[Behaviour] = []
        self.lists = 0
        self.watch_requests = 0
        self.list_failures: list[int] = []  # statuses to answer the next lists with
        self.pages: list[str | None] = []  # each list request's limit, when paging
        self.paging = False  # answer lists page by page, by limit and continue
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") == "true":
            self.watch_requests += 1
            behaviour = self.watches.pop(0) if self.watches else idle
            return await behaviour(request, self)
        self.lists += 1
        if self.list_failures:
            status = self.list_failures.pop(0)
            return web.json_response({"kind": "Status", "code": status,
                                      "reason": "InternalError", "message": "try again"},
                                     status=status)
        if self.paging:
            limit, start = request.query.get("limit"), int(request.query.get("continue", 0))
            self.pages.append(limit)
            end = start + int(limit or len(self.items))
            more = {"continue": str(end)} if end < len(self.items) else {}
            return web.json_response({"kind": "PodList", "items": self.items[start:end],
                                      "metadata": {"resourceVersion": str(self.rv), **more}})
        return web.json_response({"kind": "PodList", "metadata": {"resourceVersion": str(self.rv)},
                                  "items": self.items})

    async def start(self, port: int = 0) -> None:
        app = web.Application()
        app.router.add_get(f"/api/v1/namespaces/{NS}/pods", self.handle)
        self.runner = web.AppRunner(app, shutdown_timeout=0.01)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", port, reuse_address=True)
        await site.start()
        self.port = port or int(self.runner.addresses[0][1])

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


async def stream(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    return resp


async def idle(request: web.Request, api: FakeApi) -> web.StreamResponse:
    """A healthy quiet watch: nothing happens until the server ends it."""
    resp = await stream(request)
    await asyncio.sleep(float(request.query.get("timeoutSeconds", "1")))
    await resp.write_eof()
    return resp


def sends(*lines: bytes, then: str = "stay") -> Behaviour:
    """A watch that sends ``lines``, then: "stay" open, "end" cleanly, "abort" the TCP
    connection (mid-line when the last line lacks its newline), or "close" it."""
    async def behave(request: web.Request, api: FakeApi) -> web.StreamResponse:
        resp = await stream(request)
        for data in lines:
            await resp.write(data)
        if then == "end":
            await resp.write_eof()
            return resp
        if then in ("abort", "close"):
            await asyncio.sleep(0.05)  # let the bytes leave first
            assert request.transport is not None
            if then == "abort":
                request.transport.abort()
            else:
                request.transport.close()
            raise asyncio.CancelledError  # the handler is done; no end of the body
        await asyncio.sleep(3600)
        return resp
    return behave


async def stall(request: web.Request, api: FakeApi) -> web.StreamResponse:
    """Headers, then silence far past timeoutSeconds: a stalled watch."""
    resp = await stream(request)
    await asyncio.sleep(3600)
    return resp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# The transport's timing, a quarter of its defaults (the grace far less than its 30 s), so
# that the tests are quick; every time a test waits or expects is in the same scale.
SCALE = 0.25
SCALED = WatchBackoff(first=transport.WATCH_BACKOFF.first * SCALE,
                      most=transport.WATCH_BACKOFF.most * SCALE,
                      quick_end=transport.WATCH_BACKOFF.quick_end * SCALE)
GRACE = 0.1


async def connect(port: int, *, backoff: WatchBackoff = SCALED) -> Kube:
    # transient_window=0: these tests see each failure as the transport meets it; riding
    # failures out is test_transient_retry.py's.
    return kube_at(port, request_timeout=2.0, watch_grace=GRACE, watch_backoff=backoff,
                   transient_window=0)


@pytest_asyncio.fixture(loop_scope="session")
async def api() -> AsyncIterator[FakeApi]:
    server = FakeApi()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest_asyncio.fixture(loop_scope="session")
async def kube(api: FakeApi) -> AsyncIterator[Kube]:
    k = await connect(api.port)
    try:
        yield k
    finally:
        await k.close()


async def take(stream: AsyncIterator[WatchEvent], n: int, limit: float = 5.0
               ) -> list[WatchEvent]:
    out: list[WatchEvent] = []
    async with asyncio.timeout(limit):
        async for ev in stream:
            out.append(ev)
            if len(out) == n:
                break
    return out


async def drain(stream: AsyncIterator[WatchEvent], into: list[WatchEvent]) -> None:
    async with asyncio.timeout(5):
        async for ev in stream:
            into.append(ev)


def names_of(events: Sequence[WatchEvent]) -> list[str]:
    return [ev.type if ev.type == "SYNC" else f"{ev.type}:{ev.object['metadata']['name']}"
            for ev in events]


# --- Kube.watch: every fault is a KubeError of the tree ---------------------------------------
@pytest.mark.parametrize(("behaviour", "kind"), [
    (sends(line("ADDED", pod("p1", 2)), b'{"type": "MODIFIED", "obj', then="abort"),
     errors.KubeStreamBroken),
    (sends(line("ADDED", pod("p1", 2)), then="close"), errors.KubeStreamBroken),
    (sends(line("ADDED", pod("p1", 2)), b"<html>proxy error</html>\n"), errors.KubeBadResponse),
    (sends(line("ADDED", pod("p1", 2)), b'["not", "an", "event"]\n'), errors.KubeBadResponse),
], ids=["mid-line-abort", "disconnect", "garbage", "not-an-event"])
async def test_a_broken_watch_raises_kube_error(api: FakeApi, kube: Kube,
                                                behaviour: Behaviour,
                                                kind: type[errors.KubeNoAnswer]) -> None:
    api.watches = [behaviour]
    seen: list[WatchEvent] = []
    with pytest.raises(errors.KubeError) as info:
        await drain(kube.watch(r.POD, NS, resource_version="1", timeout_seconds=5), seen)
    assert names_of(seen) == ["ADDED:p1"]
    assert type(info.value) is kind
    assert (info.value.status, info.value.reason) == (0, kind.KIND)  # as callers read them
    assert not isinstance(info.value.__cause__, errors.DispatchError)


async def test_observe_reads_a_mebibyte_event_and_one_cut_short_is_watched_again(
        api: FakeApi, kube: Kube) -> None:
    # Objects reach about 1.5 MiB; aiohttp's own readline() stopped at 512 KiB (issue 27).
    big = line("ADDED", {**pod("big", 2), "data": "x" * (1 << 20)})
    api.watches = [sends(big[:len(big) // 2], then="abort"), sends(big)]
    stream = kube.observe(r.POD, NS, timeout_seconds=5)
    try:
        got = await take(stream, 3)
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
    assert names_of(got) == ["SYNC", "SYNC", "ADDED:big"]  # the cut one listed again
    assert len(got[2].object["data"]) == 1 << 20


async def test_a_stalled_watch_raises_after_its_timeout_and_grace(api: FakeApi,
                                                                   kube: Kube) -> None:
    # timeoutSeconds 0 keeps the test short: silence is allowed for 0 + grace.
    api.watches = [stall]
    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(errors.KubeError) as info:
        await drain(kube.watch(r.POD, NS, resource_version="1", timeout_seconds=0), [])
    assert type(info.value) is errors.KubeStreamBroken
    assert (info.value.status, info.value.reason) == (0, "StreamBroken")
    assert isinstance(info.value.__cause__, TimeoutError)
    assert GRACE * 0.8 <= loop.time() - began < 2


async def test_a_watch_the_server_ends_just_ends(api: FakeApi, kube: Kube) -> None:
    api.watches = [sends(line("ADDED", pod("p1", 2)), b"\n", then="end")]
    seen = [ev async for ev in kube.watch(r.POD, NS, resource_version="1", timeout_seconds=5)]
    assert names_of(seen) == ["ADDED:p1"]


async def test_a_list_whose_body_breaks_raises_kube_error(api: FakeApi, kube: Kube) -> None:
    async def short_body(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.content_length = 1000
        await resp.prepare(request)
        await resp.write(b'{"kind": "PodList", "items": [')
        await asyncio.sleep(0.05)
        assert request.transport is not None
        request.transport.close()
        raise asyncio.CancelledError

    app = web.Application()
    app.router.add_get(f"/api/v1/namespaces/{NS}/pods", short_body)
    runner = web.AppRunner(app, shutdown_timeout=0.01)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    k = await connect(int(runner.addresses[0][1]))
    try:
        with pytest.raises(errors.KubeError) as info:
            await k.list(r.POD, NS)
        assert type(info.value) is errors.KubeStreamBroken
        assert (info.value.status, info.value.reason) == (0, "StreamBroken")
        assert isinstance(info.value.__cause__, aiohttp.ClientError)
    finally:
        await k.close()
        await runner.cleanup()


async def test_a_trimmed_list_is_trimmed_page_by_page(api: FakeApi, kube: Kube) -> None:
    """What an informer keeps of a namespace's objects is cut as each page arrives, in pages
    of 100, so the list is never held whole; untrimmed lists keep their pages of 500."""
    from dispatch_kubeflow.core.objects import metadata_only

    api.paging = True
    api.items = [{**pod(f"p{i}", i), "spec": {"containers": [{"name": "c"}]}}
                 for i in range(250)]
    trimmed_after: list[int] = []

    def trim(o: Obj) -> dict[str, Any]:
        trimmed_after.append(len(api.pages))  # pages asked for when this item was cut
        return metadata_only(o)

    items, rv = await kube.list(r.POD, NS, trim=trim)
    assert [o["metadata"]["name"] for o in items] == [f"p{i}" for i in range(250)]
    assert all(set(o) == {"metadata"} for o in items)
    assert (rv, api.pages) == ("1", ["100", "100", "100"])
    assert trimmed_after[:100] == [1] * 100  # the first page cut before the second was asked
    whole, _ = await kube.list(r.POD, NS)
    assert len(whole) == 250
    assert "spec" in whole[0]
    assert api.pages[3:] == ["500"]


async def test_observe_trims_what_it_lists_and_what_it_watches(api: FakeApi,
                                                               kube: Kube) -> None:
    api.items = [{**pod("p0", 1), "spec": {"big": True}}]
    api.watches = [sends(line("ADDED", {**pod("p1", 2), "spec": {"big": True}}))]
    stream = kube.observe(r.POD, NS, timeout_seconds=5,
                          trim=lambda o: {"metadata": o["metadata"]})
    try:
        sync, added = await take(stream, 2)
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
    assert [set(o) for o in sync.items] == [{"metadata"}]
    assert (added.type, set(added.object)) == ("ADDED", {"metadata"})


async def test_nothing_listening_is_unreachable() -> None:
    k = await connect(free_port())
    try:
        with pytest.raises(errors.KubeError) as info:
            await k.list(r.POD, NS)
        assert type(info.value) is errors.KubeUnreachable
        assert (info.value.status, info.value.reason) == (0, "Unreachable")
        assert (info.value.transient, info.value.sent) == (True, False)  # nothing listened
    finally:
        await k.close()


# --- Kube.observe: lists again and carries on ---------------------------------------------------
@pytest.mark.parametrize("fault", [
    sends(line("ADDED", pod("p1", 2)), b'{"type": "MODIFIED", "obj', then="abort"),
    sends(line("ADDED", pod("p1", 2)), then="close"),
    sends(line("ADDED", pod("p1", 2)), b"garbage\n"),
], ids=["mid-line-abort", "disconnect", "garbage"])
async def test_observe_lists_again_after_a_broken_stream(api: FakeApi, kube: Kube,
                                                         fault: Behaviour) -> None:
    api.watches = [fault, sends(line("ADDED", pod("p2", 3)))]
    stream = kube.observe(r.POD, NS, timeout_seconds=5)
    try:
        events = await take(stream, 4)
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
    assert names_of(events) == ["SYNC", "ADDED:p1", "SYNC", "ADDED:p2"]
    assert api.lists == 2


async def test_observe_lists_again_after_a_stall(api: FakeApi, kube: Kube) -> None:
    api.watches = [stall, sends(line("ADDED", pod("p2", 3)))]
    stream = kube.observe(r.POD, NS, timeout_seconds=0)  # silence allowed: the grace
    try:
        events = await take(stream, 3, limit=4)
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
    assert names_of(events) == ["SYNC", "SYNC", "ADDED:p2"]


async def test_observe_outlasts_a_server_that_is_down_then_up() -> None:
    port = free_port()
    k = await connect(port)
    api = FakeApi()
    stream = k.observe(r.POD, NS, timeout_seconds=5)
    first = asyncio.ensure_future(take(stream, 1, limit=5))
    try:
        await asyncio.sleep(0.3 * SCALE)  # refused meanwhile: retried with back-off
        assert not first.done()
        await api.start(port)
        events = await first
        assert names_of(events) == ["SYNC"]
        assert api.lists == 1
    finally:
        first.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await first
        await stream.aclose()  # type: ignore[attr-defined]
        await k.close()
        await api.stop()


async def test_watches_that_end_at_once_are_backed_off(api: FakeApi) -> None:
    # Every watch ends at once with nothing; each counts as quick however slow the machine
    # (quick_end far above any round trip), so each is backed off from, doubling.
    n = 4
    times: list[float] = []
    enough = asyncio.Event()

    async def ends_at_once(request: web.Request, api: FakeApi) -> web.StreamResponse:
        times.append(asyncio.get_running_loop().time())
        if len(times) == n:
            enough.set()
        return await sends(then="end")(request, api)

    api.watches = [ends_at_once] * 20
    k = await connect(api.port, backoff=WatchBackoff(first=SCALED.first, most=SCALED.most,
                                                     quick_end=60))
    stream = k.observe(r.POD, NS, timeout_seconds=5)
    first = asyncio.ensure_future(take(stream, 2, limit=5))
    try:
        await asyncio.wait_for(enough.wait(), 5)
    finally:
        first.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await first
        await stream.aclose()  # type: ignore[attr-defined]
        await k.close()
    # not as fast as the loop can spin: 0.2, 0.4, 0.8 s apart (times SCALE), at least
    gaps = [b - a for a, b in itertools.pairwise(times[:n])]
    assert all(g >= SCALED.first * 2**i * 0.95 for i, g in enumerate(gaps)), gaps


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_observe_retries_an_error_status(api: FakeApi, kube: Kube, status: int) -> None:
    api.list_failures = [status]
    stream = kube.observe(r.POD, NS, timeout_seconds=5)
    try:
        assert names_of(await take(stream, 1)) == ["SYNC"]
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
    assert api.lists == 2


async def test_observe_still_raises_forbidden(api: FakeApi, kube: Kube) -> None:
    api.list_failures = [403]
    stream = kube.observe(r.POD, NS, timeout_seconds=5)
    with pytest.raises(errors.KubeForbidden):
        await take(stream, 1)


async def test_many_concurrent_observes_all_get_their_events(api: FakeApi, kube: Kube) -> None:
    """110 watches at once through one Kube, more than the request pool's 100 connections:
    every one is open at the same time (none waits for another to end)."""
    n = 110
    opened: set[int] = set()
    everyone = asyncio.Event()

    async def held(request: web.Request, api: FakeApi) -> web.StreamResponse:
        resp = await stream(request)
        opened.add(id(request))
        if len(opened) == n:
            everyone.set()
        await everyone.wait()  # an event only once every watch is open
        await resp.write(line("ADDED", pod("p-new", 2)))
        await asyncio.sleep(3600)
        return resp

    api.watches = [held] * n
    streams = [kube.observe(r.POD, NS, timeout_seconds=60) for _ in range(n)]
    try:
        results = await asyncio.gather(*(take(s, 2, limit=8) for s in streams))
    finally:
        for s in streams:
            await s.aclose()  # type: ignore[attr-defined]
    assert all(names_of(ev) == ["SYNC", "ADDED:p-new"] for ev in results)
    assert api.watch_requests == n


# --- waits: the caller's deadline and nothing else -----------------------------------------------
async def test_within_does_not_turn_an_inner_timeout_into_deadline_exceeded() -> None:
    with pytest.raises(TimeoutError) as info:
        async with within(deadline_after(30), "waiting"):
            raise TimeoutError("a request's own timeout")
    assert not isinstance(info.value, DeadlineExceeded)
    with pytest.raises(TimeoutError) as inner:
        async with within(deadline_after(30), "waiting"), asyncio.timeout(0.01):
            await asyncio.sleep(1)
    assert not isinstance(inner.value, DeadlineExceeded)


async def test_within_raises_deadline_exceeded_at_its_own_deadline() -> None:
    with pytest.raises(DeadlineExceeded, match="waiting: the deadline passed"):
        async with within(deadline_after(0.05), "waiting"):
            await asyncio.sleep(1)
    with pytest.raises(DeadlineExceeded, match="inner: the deadline passed"):
        async with within(deadline_after(30), "outer"), within(deadline_after(0.05), "inner"):
            await asyncio.sleep(1)


async def test_a_wait_rides_out_broken_streams_and_returns(api: FakeApi, kube: Kube) -> None:
    api.watches = [
        sends(b'{"type": "ADDED", "ob', then="abort"),
        sends(b"garbage\n"),
        sends(line("ADDED", pod("p1", 2)), then="close"),
        sends(line("ADDED", pod("done", 3))),
    ]

    def done(current: Sequence[Mapping[str, Obj]]) -> str | None:
        return "done" if "done" in current[0] else None

    async with within(deadline_after(8), "waiting for done"):
        got = await wait_for_all(kube, [Watched(r.POD, NS)], done)
    assert got == "done"
    assert api.lists == 4

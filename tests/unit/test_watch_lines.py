"""A watch reads events of any size the API server sends (objects reach about 1.5 MiB):
aiohttp's readline() stops at 512 KiB with LineTooLong, outside the error tree (issue 27).
A loopback HTTP server streams the events; what is tested is our transport."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from aiohttp import web

from dispatch_kubeflow import errors
from dispatch_kubeflow.kube import resources as r
from tests.unit.http_kube import kube_at

NS = "ns"


def _event(name: str, pad: int) -> bytes:
    obj = {"metadata": {"name": name, "namespace": NS, "resourceVersion": "2",
                        "annotations": {"big": "x" * pad}}}
    return json.dumps({"type": "ADDED", "object": obj}).encode() + b"\n"


class Streamer:
    def __init__(self) -> None:
        self.body: list[bytes] = []
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        resp.content_type = "application/json"
        await resp.prepare(request)
        for part in self.body:
            # In pieces, as a real stream arrives: lines cross chunk boundaries.
            for i in range(0, len(part), 65_536):
                await resp.write(part[i:i + 65_536])
        await resp.write_eof()
        return resp

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases", self.handle)
        self.runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


@pytest_asyncio.fixture
async def streamer() -> AsyncIterator[Streamer]:
    s = Streamer()
    await s.start()
    try:
        yield s
    finally:
        assert s.runner is not None
        await s.runner.cleanup()


@pytest.mark.asyncio
async def test_a_watch_reads_a_one_mebibyte_event(streamer: Streamer) -> None:
    streamer.body = [_event("small", 10), b"\n", _event("big", 1 << 20), b"\n\n",
                     _event("after", 10)]
    async with kube_at(streamer.port, request_timeout=5.0) as kube:
        got = [ev async for ev in kube.watch(r.LEASE, NS, resource_version="1")]
    assert [ev.object["metadata"]["name"] for ev in got] == ["small", "big", "after"]
    assert len(got[1].object["metadata"]["annotations"]["big"]) == 1 << 20


@pytest.mark.asyncio
async def test_an_event_past_any_object_size_is_a_typed_error(streamer: Streamer) -> None:
    streamer.body = [_event("huge", 70 << 20)]
    async with kube_at(streamer.port, request_timeout=5.0) as kube:
        with pytest.raises(errors.KubeBadResponse) as caught:
            _ = [ev async for ev in kube.watch(r.LEASE, NS, resource_version="1")]
    assert caught.value.reason == "BadResponse"

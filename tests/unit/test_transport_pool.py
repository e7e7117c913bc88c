"""The request timeout counts the server's answer, not the wait for a free connection.

aiohttp's total timeout includes the wait for its own connection pool: with more requests
in flight than the pool has connections, a request queued long enough timed out without
ever being sent (StopJob of 1,000 jobs at once, issue 11). A small HTTP server on 127.0.0.1
answers each GET after a delay; the pool has two connections."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from aiohttp import web

from dispatch_kubeflow.kube import resources as r
from tests.unit.http_kube import kube_at, serving

pytestmark = pytest.mark.asyncio
ANSWER_S = 0.2


class Slow:
    def __init__(self) -> None:
        self.in_flight = 0
        self.most = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await asyncio.sleep(ANSWER_S)
        finally:
            self.in_flight -= 1
        name = request.match_info["name"]
        return web.json_response({"metadata": {"name": name, "namespace": "ns"}})


@pytest_asyncio.fixture
async def slow() -> AsyncIterator[tuple[Slow, int]]:
    s = Slow()
    app = web.Application()
    app.router.add_get("/api/v1/namespaces/ns/pods/{name}", s.handle)
    async with serving(app) as port:
        yield s, port


async def test_requests_queued_for_a_connection_do_not_time_out(
        slow: tuple[Slow, int]) -> None:
    server, port = slow
    # Eight GETs on two connections: the last pair waits 3 x 0.2 s for a connection, longer
    # than its 0.5 s timeout, but the server answers each within 0.2 s.
    kube = kube_at(port, pool=2, request_timeout=0.5, transient_window=0.0)
    try:
        got = await asyncio.gather(*(kube.get(r.POD, f"p{i}", "ns") for i in range(8)))
    finally:
        await kube.close()
    assert [o["metadata"]["name"] for o in got] == [f"p{i}" for i in range(8)]
    assert server.most == 2  # the pool's limit still holds
    assert kube.requests == 8  # none timed out and was sent again

"""Requests ride out transient API failures (dispatch_kubeflow.kube.retry), inside the
caller's deadline, and send again only what is safe to send again.

A small HTTP server on 127.0.0.1 answers with the failures a restarting or loaded API server
gives (503, 429 with retryAfterSeconds, a refused connection, 500); what is tested is our
transport's reaction, not Kubernetes.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web

from dispatch_kubeflow import errors
from dispatch_kubeflow.kube import Kube, retry, session
from dispatch_kubeflow.kube import resources as r
from dispatch_kubeflow.waits import within
from tests.unit.http_kube import kube_at

NS = "ns"


def _status(code: int, reason: str, **details: Any) -> web.Response:
    body = {"kind": "Status", "code": code, "reason": reason, "message": "not now",
            "details": details}
    return web.json_response(body, status=code)


class Server:
    """Answers each request with the next of ``answers`` (then a Lease), counting them."""

    def __init__(self) -> None:
        self.answers: list[web.Response] = []
        self.seen: list[str] = []
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append(request.method)
        if self.answers:
            return self.answers.pop(0)
        return web.json_response({"metadata": {"name": "x", "resourceVersion": "1"}})

    async def start(self, port: int = 0) -> None:
        app = web.Application()
        app.router.add_route("*", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/x",
                             self.handle)
        app.router.add_route("*", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases",
                             self.handle)
        self.runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", port, reuse_address=True)
        await site.start()
        self.port = port or site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


def _kube(port: int, window: float = 5.0) -> Kube:
    return kube_at(port, request_timeout=2.0, transient_window=window)


@pytest_asyncio.fixture
async def server() -> AsyncIterator[Server]:
    s = Server()
    await s.start()
    try:
        yield s
    finally:
        await s.stop()


@pytest.fixture(autouse=True)
def _quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retry, "FIRST", 0.02)
    monkeypatch.setattr(retry, "MARGIN", 0.05)
    monkeypatch.setattr(retry, "MAX", 0.05)


@pytest.mark.asyncio
async def test_a_503_and_a_429_are_ridden_out_for_any_verb(server: Server) -> None:
    server.answers = [_status(503, "ServiceUnavailable"),
                      _status(429, "TooManyRequests", retryAfterSeconds=0)]
    async with _kube(server.port) as kube:
        created = await kube.create(r.LEASE, {"metadata": {"name": "x"}}, NS)
        failures = dict(kube.transient_failures)
    assert created["metadata"]["name"] == "x"
    assert server.seen == ["POST"] * 3
    # Counted by reason, though the request succeeded: what a benchmark reports.
    assert failures == {"ServiceUnavailable": 1, "TooManyRequests": 1}


@pytest.mark.asyncio
async def test_a_429_waits_as_long_as_the_server_asks() -> None:
    busy = errors.kube_error(429, {"reason": "TooManyRequests",
                                   "details": {"retryAfterSeconds": 2}})
    assert busy.retry_after == 2
    assert (retry.Backoff(window=10).next(busy) or 0) >= 2.0
    # ... but not past the time it has: then the error surfaces.
    assert retry.Backoff(window=1).next(busy) is None


@pytest.mark.asyncio
async def test_a_500_is_sent_again_only_when_it_is_a_read(server: Server) -> None:
    server.answers = [_status(500, "InternalError")]
    async with _kube(server.port) as kube:
        await kube.get(r.LEASE, "x", NS)
        assert server.seen == ["GET", "GET"]
        server.answers = [_status(500, "InternalError")]
        with pytest.raises(errors.KubeError) as caught:
            await kube.patch(r.LEASE, "x", {"spec": {}}, NS)
    assert caught.value.status == 500
    assert server.seen == ["GET", "GET", "PATCH"]  # a write is answered as the server did
    assert dict(kube.transient_failures) == {"InternalError": 1}  # the write's is not one


@pytest.mark.asyncio
async def test_a_refused_connection_is_ridden_out_until_the_server_is_back() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    back = Server()

    async def later() -> None:
        await asyncio.sleep(0.15)
        await back.start(port)

    task = asyncio.create_task(later())
    try:
        async with _kube(port) as kube:
            created = await kube.create(r.LEASE, {"metadata": {"name": "x"}}, NS)
        assert created["metadata"]["name"] == "x"
        assert back.seen == ["POST"]
    finally:
        await task
        await back.stop()


@pytest.mark.asyncio
async def test_a_call_s_deadline_bounds_the_retries_and_the_error_surfaces(
        server: Server) -> None:
    server.answers = [_status(503, "ServiceUnavailable") for _ in range(1000)]
    began = time.monotonic()
    async with _kube(server.port, window=60) as kube:  # the deadline is the shorter
        with pytest.raises(errors.KubeError) as caught:
            async with within(datetime.now(UTC) + timedelta(seconds=0.3), "the call"):
                await kube.get(r.LEASE, "x", NS)
    took = time.monotonic() - began
    # The server's own answer, not DeadlineExceeded, by the deadline (give or take the
    # last request's own time, which a loaded machine stretches): far short of the window.
    assert not isinstance(caught.value, errors.DeadlineExceeded)
    assert caught.value.status == 503
    assert took < 0.3 + 0.5
    assert len(server.seen) > 2


@pytest.mark.asyncio
async def test_without_a_deadline_the_transport_s_window_bounds_the_retries(
        server: Server) -> None:
    server.answers = [_status(503, "ServiceUnavailable") for _ in range(1000)]
    began = time.monotonic()
    async with _kube(server.port, window=0.25) as kube:
        with pytest.raises(errors.KubeError):
            await kube.get(r.LEASE, "x", NS)
    assert 0.1 < time.monotonic() - began < 0.6


@pytest.mark.asyncio
async def test_a_deadline_longer_than_the_window_does_not_lengthen_it() -> None:
    began = retry.now()
    with retry.deadline(began + 600):
        assert retry.Backoff(window=2).until <= retry.now() + 2
    with retry.deadline(began + 1):
        assert retry.Backoff(window=60).until == began + 1


@pytest.mark.asyncio
async def test_a_nested_deadline_never_extends_the_outer_one() -> None:
    with retry.deadline(10.0):
        with retry.deadline(20.0):
            assert retry._DEADLINE.get() == 10.0
        with retry.deadline(5.0):
            assert retry._DEADLINE.get() == 5.0
    assert retry._DEADLINE.get() is None


def test_a_tls_failure_is_not_ridden_out() -> None:
    key = aiohttp.client_reqrep.ConnectionKey("h", 443, True, True, None, None, None)
    refused = session.unreachable(
        aiohttp.ClientConnectorError(key, ConnectionRefusedError(111, "no")), "POST /x")
    assert (refused.transient, refused.sent) == (True, False)  # never connected: not sent
    assert retry.transient(refused, "POST")
    bad_cert = session.unreachable(
        aiohttp.ClientConnectorCertificateError(key, ValueError("self-signed")), "GET /x")
    assert (type(bad_cert), bad_cert.transient) == (errors.KubeUnreachable, False)
    assert not retry.transient(bad_cert, "GET")


def test_an_answer_lost_after_the_request_went_out_is_sent_again_only_when_a_read() -> None:
    lost = session.unreachable(aiohttp.ServerDisconnectedError(), "POST /x")
    assert (lost.transient, lost.sent) == (True, True)
    assert retry.transient(lost, "GET")
    assert not retry.transient(lost, "POST")
    for broke in (errors.KubeStreamBroken("GET /x: broke"), errors.KubeBadResponse("not JSON")):
        assert (retry.transient(broke, "GET"), retry.transient(broke, "PATCH")) == (True, False)


def test_whether_no_answer_is_transient_comes_from_its_type_not_its_text() -> None:
    # The message and reason of a typed failure say nothing: its type and flags decide.
    assert retry.transient(errors.KubeUnreachable("", sent=False), "DELETE")
    assert not retry.transient(errors.KubeUnreachable("", transient=False, sent=False), "GET")
    # A bare status 0 whose reason reads "Unreachable" is not a failure the transport raises.
    assert not retry.transient(errors.KubeError("x", status=0, reason="Unreachable"), "GET")

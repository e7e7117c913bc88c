"""A failure with no whole answer is a type of its own in the error tree (issue 27, item 3):
KubeUnreachable, KubeStreamBroken, KubeBadResponse under KubeNoAnswer, each saying whether
asking again may help. Every site of the transport that raises one is met here or in
test_watch_resilience.py / test_watch_lines.py / test_transient_retry.py, against a
loopback HTTP server; what is tested is our transport."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from dispatch_kubeflow import errors
from dispatch_kubeflow.find import KINDS, find_refs
from dispatch_kubeflow.kube import Resource
from dispatch_kubeflow.kube import resources as r
from dispatch_kubeflow.model import JobID
from tests.unit.fake_kube import FakeKube
from tests.unit.http_kube import kube_at, serving

NS = "ns"


def test_every_no_answer_is_a_kube_error_with_status_zero_and_its_kind() -> None:
    # status and reason stay as callers (StopJob, the chaos ledger, logs) read them.
    for cls, kind in ((errors.KubeUnreachable, "Unreachable"),
                      (errors.KubeStreamBroken, "StreamBroken"),
                      (errors.KubeBadResponse, "BadResponse")):
        exc = cls("GET /x: it failed")
        assert isinstance(exc, errors.KubeNoAnswer)
        assert isinstance(exc, errors.KubeError)
        assert (exc.status, exc.reason, exc.transient, exc.sent) == (0, kind, True, True)
        assert str(exc) == "GET /x: it failed"


def test_restated_keeps_the_class_and_what_it_says() -> None:
    exc = errors.KubeUnreachable("GET /x: refused", transient=False, sent=False)
    again = exc.restated("find: cannot list pods: GET /x: refused")
    assert (type(again), again.transient, again.sent, str(again)) == (
        errors.KubeUnreachable, False, False, "find: cannot list pods: GET /x: refused")
    assert str(exc) == "GET /x: refused"  # the original is left as it was


@pytest.mark.asyncio
async def test_an_answer_that_is_not_json_is_a_bad_response() -> None:
    async def html(_: web.Request) -> web.Response:
        return web.Response(status=200, text="<html>a proxy's page</html>")

    app = web.Application()
    app.router.add_get(f"/api/v1/namespaces/{NS}/pods/p", html)
    async with serving(app) as port, kube_at(port, request_timeout=2.0,
                                              transient_window=0) as kube:
        with pytest.raises(errors.KubeBadResponse) as caught:
            await kube.get(r.POD, "p", NS)
    assert caught.value.reason == "BadResponse"
    assert "the answer is not JSON" in str(caught.value)


@pytest.mark.asyncio
async def test_a_log_that_breaks_off_is_a_broken_stream() -> None:
    async def short_log(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        resp.content_length = 1000
        await resp.prepare(request)
        await resp.write(b"first line\n")
        await asyncio.sleep(0.05)
        assert request.transport is not None
        request.transport.close()
        raise asyncio.CancelledError

    app = web.Application()
    app.router.add_get(f"/api/v1/namespaces/{NS}/pods/p/log", short_log)
    async with serving(app) as port, kube_at(port, request_timeout=2.0) as kube:
        log = await kube.open_pod_log("p", NS, follow=True)
        got: list[bytes] = []

        async def read_all() -> None:
            async for chunk in log:
                got.append(chunk)

        with pytest.raises(errors.KubeStreamBroken) as caught:
            await read_all()
    assert b"".join(got) == b"first line\n"
    assert "GET pod log: the stream broke" in str(caught.value)


@pytest.mark.asyncio
async def test_find_keeps_an_unreachable_cluster_unreachable() -> None:
    kube = FakeKube()

    def refuse(verb: str, res: Resource, name: str) -> None:
        if verb == "list" and res is r.POD:
            raise errors.KubeUnreachable("GET pods: refused", sent=False)

    kube.before = refuse
    with pytest.raises(errors.KubeUnreachable) as caught:
        await find_refs(kube, NS, JobID.new(), KINDS)
    assert str(caught.value).startswith("find: cannot list pods: GET pods: refused")
    assert (caught.value.transient, caught.value.sent) == (True, False)

"""The transport's lists: pages followed, and the metadata-only form StopJob's shared lists
ask for (a PartialObjectMetadataList, whose items are given back their own kind).

A small HTTP server on 127.0.0.1 answers as the API server's documented protocol says; that
the real API server serves the form for pods and for Trainer's, JobSet's and Kueue's kinds
is tests/cluster/test_adapter_kueue.py's (concurrent stops)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web

from dispatch_kubeflow.core.objects import metadata_only
from dispatch_kubeflow.kube import resources as r
from tests.unit.http_kube import kube_at, serving

pytestmark = pytest.mark.asyncio
NS = "ns"


class Pods:
    """Three pods, in pages of the size asked; records each request's Accept and limit."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str | None]] = []

    async def handle(self, request: web.Request) -> web.Response:
        accept = request.headers.get("Accept", "")
        self.asked.append((accept, request.query.get("limit")))
        partial = "as=PartialObjectMetadataList" in accept
        start = int(request.query.get("continue") or 0)
        size = int(request.query.get("limit") or 3)
        items: list[dict[str, Any]] = []
        for i in range(start, min(start + size, 3)):
            m = {"name": f"p{i}", "namespace": NS, "resourceVersion": str(10 + i),
                 "managedFields": [{"manager": "x"}]}
            items.append({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                          "metadata": m} if partial else
                         {"metadata": m, "spec": {"containers": []}, "status": {}})
        more = start + size < 3
        body = {"apiVersion": "meta.k8s.io/v1" if partial else "v1",
                "kind": "PartialObjectMetadataList" if partial else "PodList",
                "metadata": {"resourceVersion": "42",
                             **({"continue": str(start + size)} if more else {})},
                "items": items}
        return web.json_response(body)


@pytest_asyncio.fixture
async def pods() -> AsyncIterator[tuple[Pods, int]]:
    p = Pods()
    app = web.Application()
    app.router.add_get(f"/api/v1/namespaces/{NS}/pods", p.handle)
    async with serving(app) as port:
        yield p, port


async def listed(port: int, **options: Any) -> tuple[list[dict[str, Any]], str]:
    kube = kube_at(port)
    try:
        return await kube.list(r.POD, NS, **options)
    finally:
        await kube.close()


async def test_a_metadata_list_asks_for_it_and_gives_items_their_kind(
        pods: tuple[Pods, int]) -> None:
    server, port = pods
    items, rv = await listed(port, trim=metadata_only, metadata=True)
    assert rv == "42"
    assert [o["metadata"]["name"] for o in items] == ["p0", "p1", "p2"]
    # Metadata alone, without managedFields (the trim), and no spec sent at all.
    assert all(set(o) == {"metadata"} and "managedFields" not in o["metadata"] for o in items)
    assert len(server.asked) == 1
    accept, limit = server.asked[0]
    assert accept.split(";")[:2] == ["application/json", "as=PartialObjectMetadataList"]
    assert limit == "500"  # small items: the whole-object list's page size


async def test_a_metadata_list_keeps_the_kind_of_its_items(pods: tuple[Pods, int]) -> None:
    items, _ = await listed(pods[1], metadata=True)
    assert {(o["apiVersion"], o["kind"]) for o in items} == {("v1", "Pod")}


async def test_a_trimmed_list_of_whole_objects_comes_in_small_pages(
        pods: tuple[Pods, int]) -> None:
    server, port = pods
    items, _ = await listed(port, trim=metadata_only)
    assert len(items) == 3
    assert server.asked == [("application/json", "100")]

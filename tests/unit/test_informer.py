"""The informer: one watch per feed, shared by its subscribers, each woken for its own key."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from dispatch_kubeflow.informer import Feed, Informers
from dispatch_kubeflow.kube.resources import POD
from tests.unit.fake_kube import FakeKube

NS = "ns"


@pytest.mark.asyncio
async def test_a_feed_wakes_the_views_of_the_key_an_object_left_and_joined() -> None:
    kube = FakeKube(seed=9)
    feed = Feed(POD, NS, label_selector="app", key_label="app")
    await kube.create(POD, {"metadata": {"name": "p", "labels": {"app": "a"}}}, NS)
    informers = Informers(kube)

    async def first(key: str, ok: Callable[[dict[str, Any]], bool]) -> None:
        async with informers.watching([(feed, key)]) as view:
            while not ok((await view.changed())[0]):
                pass

    gone_from_a = asyncio.create_task(first("a", lambda objs: not objs))
    came_to_b = asyncio.create_task(first("b", lambda objs: "p" in objs))
    await asyncio.sleep(0.05)
    assert informers.feeds == 1
    assert kube.calls["watch"] == 1
    kube.write_now(POD, "p", NS, {"metadata": {"labels": {"app": "b"}}})
    done: list[Awaitable[None]] = [gone_from_a, came_to_b]
    async with asyncio.timeout(5):
        await asyncio.gather(*done)
    assert informers.feeds == 0
    assert kube.open_watches == 0
    await informers.close()

"""Which view a stop keeps (dispatch_kubeflow.stop.sharing): the Backend's informers,
the very ones its waits run, and its own watches when an informer ends by an error."""

from __future__ import annotations

from typing import Any

import pytest

from dispatch_kubeflow.kube import Resource
from dispatch_kubeflow.kube.resources import (
    POD,
    TRAINJOB,
    WORKLOAD,
)
from dispatch_kubeflow.stop import stop_feeds
from tests.unit.fake_kube import FakeKube, status_error
from tests.unit.stop_helpers import (
    ALL,
    KUEUE_MODE,
    NS,
    SEEDS,
    WORKLOAD_FEED,
    a_job,
    left,
    stop,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.virtual_time]


class InformersRefused(FakeKube):
    """A cluster whose RBAC lets the caller watch a kind by a job's own selector, not the
    whole namespace's (the informers' selectors, a label that exists or none): 403."""

    def watch(self, res: Resource, namespace: str | None = None, **kw: Any) -> Any:
        sel = kw.get("label_selector")
        if sel is None or not any(c in sel for c in "=("):
            raise status_error(403, "Forbidden", "watch refused", res)
        return super().watch(res, namespace, **kw)


@pytest.mark.parametrize("seed", SEEDS)
async def test_an_informer_that_ends_by_an_error_sends_the_stop_to_its_own_watches(
        seed: int) -> None:
    k = InformersRefused(seed)
    await a_job(k)
    mine = left(k, *ALL)
    report = await stop(k, follow=True)
    assert report.complete
    assert left(k, *ALL) == set()
    assert {(r.kind, r.name) for r in report.stopped} == mine


async def test_stops_follow_the_informers_the_waits_run() -> None:
    """A Backend's StopJob follows the very informers its waits run (one watch and one cache
    per kind, whatever each keeps)."""
    from dispatch_kubeflow.observe import subscriptions

    waits = {feed.res: feed.source for feed, _ in subscriptions(KUEUE_MODE, NS, "tj", "u")}
    stops = stop_feeds(NS)
    assert stops[TRAINJOB].source == waits[TRAINJOB]
    assert stops[POD].source == waits[POD]
    assert WORKLOAD_FEED.source == waits[WORKLOAD]

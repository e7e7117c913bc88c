"""The in-memory fake of the Kubernetes port keeps the API server's rules it claims to keep:
preconditions (409), 404, label selectors, watches from a resourceVersion and 410 after a
compaction, and errors of the transport's own classes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dispatch_kubeflow.core import errors
from dispatch_kubeflow.kube import PatchKind, WatchEvent
from dispatch_kubeflow.kube.resources import POD, TRAINJOB
from tests.unit.fake_kube import FakeKube, label_matches

pytestmark = [pytest.mark.asyncio, pytest.mark.virtual_time]


def pod(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "spec": {}}


async def test_create_of_a_taken_name_is_409_already_exists() -> None:
    k = FakeKube()
    first = await k.create(POD, pod("p"), "ns")
    with pytest.raises(errors.KubeConflict) as exc:
        await k.create(POD, pod("p"), "ns")
    assert (exc.value.status, exc.value.reason) == (409, "AlreadyExists")
    assert str(exc.value).endswith('"p" already exists (409 AlreadyExists)')
    other = await k.create(POD, pod("p"), "other")  # names are per namespace
    assert other["metadata"]["uid"] != first["metadata"]["uid"]


async def test_stale_resource_version_is_409_conflict_and_fresh_one_applies() -> None:
    k = FakeKube()
    made = await k.create(POD, pod("p"), "ns")
    rv = made["metadata"]["resourceVersion"]
    moved = await k.patch(POD, "p", {"metadata": {"labels": {"a": "1"}}}, "ns")
    assert int(moved["metadata"]["resourceVersion"]) > int(rv)
    kinds: tuple[PatchKind, ...] = ("merge", "strategic")
    for kind in kinds:
        with pytest.raises(errors.KubeConflict) as exc:
            await k.patch(POD, "p", {"metadata": {"resourceVersion": rv, "labels": {"a": "2"}}},
                          "ns", kind=kind)
        assert exc.value.reason == "Conflict"
    stale = dict(made, metadata={**made["metadata"], "labels": {"a": "3"}})
    with pytest.raises(errors.KubeConflict):
        await k.replace(POD, stale, "ns")
    assert (await k.get(POD, "p", "ns"))["metadata"]["labels"] == {"a": "1"}
    fresh = await k.patch(POD, "p", {"metadata": {
        "resourceVersion": moved["metadata"]["resourceVersion"], "labels": {"a": "4"}}}, "ns")
    assert fresh["metadata"]["labels"] == {"a": "4"}
    assert fresh["metadata"]["uid"] == made["metadata"]["uid"]


async def test_delete_honours_the_uid_precondition_and_missing_is_404() -> None:
    k = FakeKube()
    made = await k.create(POD, pod("p"), "ns")
    with pytest.raises(errors.KubeConflict) as exc:
        await k.delete(POD, "p", "ns", uid="not-its-uid")
    assert exc.value.status == 409
    assert "Precondition failed" in str(exc.value)
    assert await k.get_or_none(POD, "p", "ns") is not None
    assert await k.delete(POD, "p", "ns", uid=made["metadata"]["uid"]) is not None
    assert await k.delete(POD, "p", "ns") is None  # already gone, as the transport says
    with pytest.raises(errors.KubeNotFound) as nf:
        await k.get(POD, "p", "ns")
    assert nf.value.status == 404
    assert str(nf.value).endswith("(404 NotFound)")
    with pytest.raises(errors.KubeNotFound):
        await k.patch(POD, "p", {"metadata": {"labels": {"a": "1"}}}, "ns")


async def test_a_finalizer_keeps_a_deleted_object_until_it_is_removed() -> None:
    k = FakeKube()
    await k.create(TRAINJOB, {"metadata": {"name": "t", "finalizers": ["x/y"]}}, "ns")
    marked = await k.delete(TRAINJOB, "t", "ns")
    assert marked is not None
    assert "deletionTimestamp" in marked["metadata"]
    assert await k.get_or_none(TRAINJOB, "t", "ns") is not None
    await k.patch(TRAINJOB, "t", [{"op": "remove", "path": "/metadata/finalizers"}], "ns",
                  kind="json")
    assert await k.get_or_none(TRAINJOB, "t", "ns") is None


async def test_json_patch_test_op_failing_is_422_invalid() -> None:
    k = FakeKube()
    await k.create(POD, pod("p", a="1"), "ns")
    with pytest.raises(errors.KubeInvalid) as exc:
        await k.patch(POD, "p", [{"op": "test", "path": "/metadata/labels/a", "value": "2"},
                                 {"op": "replace", "path": "/metadata/labels/a", "value": "3"}],
                      "ns", kind="json")
    assert exc.value.status == 422
    assert (await k.get(POD, "p", "ns"))["metadata"]["labels"] == {"a": "1"}  # all or nothing


@pytest.mark.parametrize(("selector", "want"), [
    ("app=x", {"a", "b"}),
    ("app==x,tier=1", {"a"}),
    ("app!=x", {"c", "d"}),
    ("tier in (1,2)", {"a", "b"}),
    ("tier notin (1)", {"b", "c", "d"}),
    ("tier", {"a", "b"}),
    ("!tier", {"c", "d"}),
    ("app=x,!tier", set()),
])
async def test_list_filters_by_label_selector(selector: str, want: set[str]) -> None:
    k = FakeKube()
    for name, labels in {"a": {"app": "x", "tier": "1"}, "b": {"app": "x", "tier": "2"},
                         "c": {"app": "y"}, "d": {}}.items():
        await k.create(POD, pod(name, **labels), "ns")
    await k.create(POD, pod("elsewhere", app="x", tier="1"), "other")
    items, _ = await k.list(POD, "ns", label_selector=selector)
    assert {o["metadata"]["name"] for o in items} == want
    assert label_matches(selector, {"app": "x", "tier": "1"}) == ("a" in want)


async def collect(k: FakeKube, rv: str, n: int, selector: str | None = None) -> list[WatchEvent]:
    out: list[WatchEvent] = []
    async for ev in k.watch(POD, "ns", resource_version=rv, label_selector=selector,
                            timeout_seconds=5):
        out.append(ev)
        if len(out) == n:
            break
    return out


async def test_watch_replays_from_a_resource_version_and_follows_the_selector() -> None:
    k = FakeKube()
    await k.create(POD, pod("before", app="x"), "ns")
    _, rv = await k.list(POD, "ns")
    await k.create(POD, pod("p", app="x"), "ns")
    await k.patch(POD, "p", {"metadata": {"labels": {"app": "y"}}}, "ns")  # leaves app=x
    await k.patch(POD, "p", {"metadata": {"labels": {"app": "x"}}}, "ns")  # back
    await k.patch(POD, "p", {"spec": {"n": 1}}, "ns")
    await k.delete(POD, "p", "ns")
    events = await collect(k, rv, 5, "app=x")
    assert [(e.type, e.object["metadata"]["name"]) for e in events] == [
        ("ADDED", "p"), ("DELETED", "p"), ("ADDED", "p"), ("MODIFIED", "p"), ("DELETED", "p")]
    rvs = [int(e.object["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs)
    assert rvs[0] > int(rv)


async def test_an_open_watch_sees_a_later_change_and_ends_when_told() -> None:
    k = FakeKube()
    _, rv = await k.list(POD, "ns")
    seen: list[str] = []
    got_one = asyncio.Event()

    async def watch() -> None:
        async for ev in k.watch(POD, "ns", resource_version=rv, timeout_seconds=5):
            seen.append(ev.type)
            got_one.set()

    task = asyncio.create_task(watch())
    await k.create(POD, pod("p"), "ns")
    await asyncio.wait_for(got_one.wait(), 1)
    k.end_watches()
    await asyncio.wait_for(task, 1)
    assert seen == ["ADDED"]
    assert k.open_watches == 0


async def test_watch_from_before_a_compaction_is_410_expired() -> None:
    k = FakeKube()
    await k.create(POD, pod("o"), "ns")
    _, old = await k.list(POD, "ns")
    await k.create(POD, pod("p"), "ns")
    _, current = await k.list(POD, "ns")
    k.compact()
    with pytest.raises(errors.KubeGone) as exc:
        await collect(k, old, 1)
    assert (exc.value.status, exc.value.reason) == (410, "Expired")
    await k.create(POD, pod("q"), "ns")
    assert [e.object["metadata"]["name"] for e in await collect(k, current, 1)] == ["q"]


async def test_observe_lists_again_after_410() -> None:
    k = FakeKube()
    await k.create(POD, pod("p"), "ns")
    stream = k.observe(POD, "ns")
    first = await anext(stream)
    assert first.type == "SYNC"
    assert [o["metadata"]["name"] for o in first.items] == ["p"]
    # Suspended after its list, the stream has no watch open: q's event is missed...
    await k.create(POD, pod("q"), "ns")
    k.compact()  # ...and gone from the history, so watching from the list's version is 410
    again = await anext(stream)
    await stream.aclose()  # type: ignore[attr-defined]
    assert again.type == "SYNC"
    assert sorted(o["metadata"]["name"] for o in again.items) == ["p", "q"]
    assert (k.calls["list"], k.calls["watch"]) == (2, 1)


async def test_list_filters_by_field_selector() -> None:
    k = FakeKube()
    for name in ("a", "b"):
        await k.create(POD, pod(name), "ns")
    items, _ = await k.list(POD, "ns", field_selector="metadata.name=b")
    assert [o["metadata"]["name"] for o in items] == ["b"]
    items, _ = await k.list(POD, "ns", field_selector="metadata.name!=b,metadata.namespace=ns")
    assert [o["metadata"]["name"] for o in items] == ["a"]


async def test_apply_to_status_merges_named_entries_and_honours_the_version() -> None:
    k = FakeKube()
    made = await k.create(POD, {"metadata": {"name": "p"}, "spec": {"x": 1}, "status": {
        "checks": [{"name": "a", "state": "Pending"}, {"name": "b", "state": "Pending"}]}}, "ns")
    body = {"metadata": {"name": "p", "resourceVersion": made["metadata"]["resourceVersion"]},
            "spec": {"x": 2}, "status": {"checks": [{"name": "b", "state": "Ready"}]}}
    out = await k.patch(POD, "p", body, "ns", kind="apply", subresource="status",
                        field_manager="me", force=True)
    assert out["status"]["checks"] == [{"name": "a", "state": "Pending"},
                                       {"name": "b", "state": "Ready"}]
    assert out["spec"] == {"x": 1}  # the status subresource writes only the status
    with pytest.raises(errors.KubeConflict):  # the same version again: stale now
        await k.patch(POD, "p", body, "ns", kind="apply", subresource="status",
                      field_manager="me", force=True)

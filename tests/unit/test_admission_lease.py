"""Lease arithmetic and the client-go election rules."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from admission.lease import (
    LeaderElector,
    held_by_other,
    next_record,
    released_record,
)
from dispatch_kubeflow import errors
from dispatch_kubeflow.core.lease import LeaseRecord
from dispatch_kubeflow.core.times import format_microtime

pytestmark = pytest.mark.virtual_time

T0 = datetime(2026, 3, 4, 5, 6, 7, 890, tzinfo=UTC)


def test_microtime_is_utc_with_six_digits() -> None:
    assert format_microtime(T0) == "2026-03-04T05:06:07.000890Z"


def test_expiry_is_judged_by_our_clock_since_the_record_changed() -> None:
    rec = LeaseRecord(holder="other", duration=15, renew_time="1999-01-01T00:00:00.000000Z")
    # renewTime is ancient, but we saw the record change at t=100: valid until t=115.
    assert held_by_other(rec, "me", observed_at=100.0, now=114.9)
    assert not held_by_other(rec, "me", observed_at=100.0, now=115.0)
    assert not held_by_other(LeaseRecord(holder="", duration=15), "me", 100.0, 101.0)
    assert not held_by_other(LeaseRecord(holder="me", duration=15), "me", 100.0, 101.0)


def test_takeover_counts_a_transition_and_renewal_does_not() -> None:
    old = LeaseRecord(holder="other", duration=15, acquire_time="a", renew_time="r",
                      transitions=3)
    taken = next_record(old, "me", 15, T0)
    assert (taken.holder, taken.transitions) == ("me", 4)
    assert taken.acquire_time == taken.renew_time == format_microtime(T0)
    renewed = next_record(taken, "me", 15, T0.replace(second=9))
    assert renewed.transitions == 4
    assert renewed.acquire_time == taken.acquire_time
    assert renewed.renew_time == "2026-03-04T05:06:09.000890Z"


def test_release_empties_the_holder_and_keeps_transitions() -> None:
    rel = released_record(LeaseRecord(holder="me", duration=15, transitions=4), T0)
    assert rel.holder == ""
    assert rel.duration == 1
    assert rel.transitions == 4


class FakeLeases:
    """An in-memory Lease endpoint with resourceVersion conflicts (unit tests only)."""

    def __init__(self) -> None:
        self.obj: dict[str, Any] | None = None
        self.rv = 0

    async def get_or_none(self, res: Any, name: str, ns: str | None = None) -> Any:
        return copy.deepcopy(self.obj)

    async def get(self, res: Any, name: str, ns: str | None = None) -> Any:
        if self.obj is None:
            raise errors.KubeNotFound("gone", status=404)
        return copy.deepcopy(self.obj)

    async def create(self, res: Any, body: dict[str, Any], ns: str | None = None) -> Any:
        if self.obj is not None:
            raise errors.KubeConflict("exists", status=409)
        self.rv += 1
        self.obj = copy.deepcopy(body)
        self.obj["metadata"]["resourceVersion"] = str(self.rv)
        return copy.deepcopy(self.obj)

    async def replace(self, res: Any, body: dict[str, Any], ns: str | None = None) -> Any:
        assert self.obj is not None
        if body["metadata"]["resourceVersion"] != self.obj["metadata"]["resourceVersion"]:
            raise errors.KubeConflict("conflict", status=409)
        self.rv += 1
        self.obj = copy.deepcopy(body)
        self.obj["metadata"]["resourceVersion"] = str(self.rv)
        return copy.deepcopy(self.obj)


def elector(api: FakeLeases, me: str, clock: list[float]) -> LeaderElector:
    return LeaderElector(api, namespace="ns", name="l", identity=me,  # type: ignore[arg-type]
                         lease_duration=15, renew_deadline=10, retry_period=2,
                         clock=lambda: clock[0], wallclock=lambda: T0)


@pytest.mark.asyncio
async def test_two_candidates_one_leader_and_takeover_after_expiry() -> None:
    api, clock = FakeLeases(), [0.0]
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    assert await a.try_acquire_or_renew()
    assert api.obj is not None
    assert api.obj["spec"]["leaseTransitions"] == 0
    assert not await b.try_acquire_or_renew()  # b saw the record now: valid for 15 s
    clock[0] = 14.0
    assert not await b.try_acquire_or_renew()
    clock[0] = 15.0
    assert await b.try_acquire_or_renew()
    assert api.obj["spec"]["holderIdentity"] == "b"
    assert api.obj["spec"]["leaseTransitions"] == 1
    # a has not renewed for 15 s, beyond its renew deadline: it does not think it leads.
    assert not a.is_leader()


@pytest.mark.asyncio
async def test_confirm_and_release() -> None:
    api, clock = FakeLeases(), [0.0]
    a = elector(api, "a", clock)
    assert await a.try_acquire_or_renew()
    a.leading.set()
    assert await a.confirm()
    await a.release()
    assert api.obj is not None
    assert api.obj["spec"]["holderIdentity"] == ""
    assert not await a.confirm()
    b = elector(api, "b", clock)
    assert await b.try_acquire_or_renew()  # a free lease is taken at once
    assert api.obj["spec"]["leaseTransitions"] == 1


def test_bad_timings_are_refused() -> None:
    with pytest.raises(ValueError, match="retry period"):
        LeaderElector(None, namespace="n", name="l", identity="i",  # type: ignore[arg-type]
                      lease_duration=5, renew_deadline=10, retry_period=2)


def test_wakes_when_the_other_lease_expires() -> None:
    clock = [0.0]
    e = elector(FakeLeases(), "me", clock)
    e._observe(LeaseRecord(holder="x", duration=15), "1")
    clock[0] = 14.5
    assert 0.5 <= e._next_wait() < 0.6

"""admission.permit_revocation (the manager's side of the permit) against the in-memory fake
port as the manager's API server, with the workers' admission.permit_renewal beside it: a
permit renewed in time is never revoked; one silent for the wait is revoked on the version
timed, and by then no share it gave is left; a renewal landing between the manager's read
and its write wins (409) and restarts the wait; a version is timed from after the read that
first saw it; only permit Leases are touched; and a missing Lease proves nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from admission.permit_renewal import PermitRenewal
from admission.permit_revocation import PermitRevocation
from dispatch_kubeflow.core import errors, names
from dispatch_kubeflow.core.permit import is_revoked, lease_name, manager_wait
from dispatch_kubeflow.kube.resources import LEASE, POD, Resource
from tests.unit.fake_kube import FakeKube

pytestmark = pytest.mark.asyncio
NS = names.CONTROLLER_NAMESPACE
LENGTH = 30.0
DRIFT = 0.01
WAIT = manager_wait(LENGTH, DRIFT)
EPS = 1e-3  # well above the floating point error of 1000 + WAIT - 1000


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def granted(k: FakeKube, cluster: str) -> None:
    await k.create(LEASE, {"metadata": {"name": lease_name(cluster)}, "spec": {}}, NS)


def lease(k: FakeKube, cluster: str) -> dict[str, Any]:
    return k.objects[(LEASE.plural, NS, lease_name(cluster))]


def setup() -> tuple[FakeKube, Clock, PermitRevocation]:
    k, clock = FakeKube(0), Clock()
    return k, clock, PermitRevocation(k, length=LENGTH, drift=DRIFT, clock=clock)


async def revoked_just_after_the_wait(m: PermitRevocation, clock: Clock) -> None:
    """w1's permit, last seen new at ``clock.now``: not revoked a moment before the wait is
    over, revoked a moment after."""
    clock.now += WAIT - EPS
    assert await m.observe_once() == []
    clock.now += 2 * EPS
    assert await m.observe_once() == [lease_name("w1")]


async def test_a_permit_renewed_in_time_is_never_revoked_and_a_silent_one_is() -> None:
    k, clock, m = setup()
    await granted(k, "w1")
    await granted(k, "w2")
    w1 = PermitRenewal(k, "w1", "a", length=LENGTH, clock=clock)
    w2 = PermitRenewal(k, "w2", "b", length=LENGTH, clock=clock)
    assert await w1.renew_once()
    assert await w2.renew_once()
    revoked: list[str] = []
    # Ten minutes in 2 s steps; w1 renews every length / 3, w2 is cut off after its first.
    for step in range(300):
        clock.now += 2
        if step % 5 == 0:
            assert await w1.renew_once()
        got = await m.observe_once()
        if got:
            # The moment it is revoked, no share w2's permit gave is left (one clock here:
            # the margin is for drift).
            assert w2.left() == 0
        revoked += got
    assert revoked == [lease_name("w2")]
    assert is_revoked(lease(k, "w2"))
    assert not is_revoked(lease(k, "w1"))
    assert not await w2.renew_once()  # back: it reads the revocation
    assert w2.revoked
    assert w2.left() == 0
    assert w1.left() > 0


async def test_it_waits_the_whole_wait_from_the_first_sighting() -> None:
    k, clock, m = setup()
    await granted(k, "w1")
    assert await m.observe_once() == []
    await revoked_just_after_the_wait(m, clock)


async def test_a_version_is_timed_from_after_the_read_that_saw_it() -> None:
    # A list that takes 10 s may have read a renewal that landed at its very end: the wait
    # starts when the list came back.
    k, clock, m = setup()
    await granted(k, "w1")

    def slow(verb: str, res: Resource, _name: str) -> None:
        if verb == "list":
            clock.now += 10
    k.before = slow
    assert await m.observe_once() == []
    k.before = None
    await revoked_just_after_the_wait(m, clock)


async def test_a_renewal_between_the_read_and_the_revocation_wins() -> None:
    k, clock, m = setup()
    await granted(k, "w1")
    w1 = PermitRenewal(k, "w1", "a", length=LENGTH, clock=clock)
    await m.observe_once()
    clock.now += WAIT + EPS
    renewed: list[bool] = []

    def renews_first(verb: str, res: Resource, _name: str) -> None:
        # The worker's renewal lands just before the manager's PUT: the PUT carries the
        # version it timed and gets 409.
        if verb == "replace" and not renewed:
            k.write_now(LEASE, lease_name("w1"), NS, {"spec": {"holderIdentity": "a"}})
            renewed.append(True)
    k.before = renews_first
    assert await m.observe_once() == []
    k.before = None
    assert renewed
    assert not is_revoked(lease(k, "w1"))
    assert await w1.renew_once()
    # The new version is timed from when it is first seen, not from the old one's sighting.
    clock.now += 1
    assert await m.observe_once() == []
    await revoked_just_after_the_wait(m, clock)


async def test_a_permit_granted_again_is_timed_afresh() -> None:
    k, clock, m = setup()
    await granted(k, "w1")
    await m.observe_once()
    clock.now += WAIT + EPS
    assert await m.observe_once() == [lease_name("w1")]
    clock.now += 100
    assert await m.observe_once() == []  # revoked stays revoked; nothing written again
    # The worker's agent, its pods proven gone, grants it again on the revoked version.
    revoked = lease(k, "w1")
    granted_again = {**revoked, "metadata": {**revoked["metadata"], "annotations": {}}}
    await k.replace(LEASE, granted_again, NS)
    assert await m.observe_once() == []
    await revoked_just_after_the_wait(m, clock)


async def test_only_permit_leases_are_touched() -> None:
    k, clock, m = setup()
    await k.create(LEASE, {"metadata": {"name": names.LEASE_NAME}, "spec": {}}, NS)
    await granted(k, "w1")
    await m.observe_once()
    clock.now += WAIT + EPS
    assert await m.observe_once() == [lease_name("w1")]
    leader = k.objects[(LEASE.plural, NS, names.LEASE_NAME)]
    assert not is_revoked(leader)


async def test_a_missing_lease_proves_nothing_and_a_revoked_one_does() -> None:
    k, clock, m = setup()
    assert not await m.revoked_live("w1")  # deleted while held, maybe: not a proof
    await granted(k, "w1")
    assert not await m.revoked_live("w1")
    await m.observe_once()
    clock.now += WAIT + EPS
    await m.observe_once()
    assert await m.revoked_live("w1")


async def test_an_unreadable_manager_is_raised_and_revokes_nothing() -> None:
    k, clock, m = setup()
    await granted(k, "w1")
    await m.observe_once()

    def cut(verb: str, res: Resource, _name: str) -> None:
        raise errors.KubeError("connection refused", status=0, reason="Unreachable")
    k.before = cut
    clock.now += WAIT + EPS
    with pytest.raises(errors.KubeError):
        await m.observe_once()
    k.before = None
    assert not is_revoked(lease(k, "w1"))
    # The version first seen before the failure is still the one timed.
    assert await m.observe_once() == [lease_name("w1")]


def dispatch_pod(name: str, phase: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {names.JOB_ID_LABEL: "jabc"}},
            "status": {"phase": phase}}


async def revoked(k: FakeKube, clock: Clock, m: PermitRevocation, cluster: str) -> None:
    await granted(k, cluster)
    await m.observe_once()
    clock.now += WAIT + EPS
    assert await m.observe_once() == [lease_name(cluster)]


async def test_a_revoked_permit_is_granted_again_only_with_no_dispatch_pod_alive() -> None:
    k, clock, m = setup()
    worker = FakeKube(1)
    await revoked(k, clock, m, "w1")
    # A pod waiting for its first answer counts: on a new permit it would start.
    await worker.create(POD, dispatch_pod("p-0", "Pending"), "team-a")
    await worker.create(POD, dispatch_pod("p-1", "Succeeded"), "team-a")
    await worker.create(POD, {"metadata": {"name": "not-ours"}, "status": {"phase": "Running"}},
                        "team-b")
    assert not await m.grant_again("w1", worker)
    assert is_revoked(lease(k, "w1"))
    await worker.delete(POD, "p-0", "team-a")
    assert await m.grant_again("w1", worker)
    assert not is_revoked(lease(k, "w1"))
    # The worker renews on the permit granted again.
    w1 = PermitRenewal(k, "w1", "a", length=LENGTH, clock=clock)
    assert await w1.renew_once()
    assert not await m.grant_again("w1", worker)  # nothing to grant: not revoked


async def test_a_grant_is_written_on_the_revoked_version_only() -> None:
    k, clock, m = setup()
    worker = FakeKube(1)
    await revoked(k, clock, m, "w1")

    def another_writer(verb: str, res: Resource, _name: str) -> None:
        # The other replica grants first (between this one's read and its write).
        if verb == "replace" and res is LEASE:
            k.before = None
            k.write_now(LEASE, lease_name("w1"), NS, {"metadata": {"annotations": {
                names.PERMIT_REVOKED: None}}})
    k.before = another_writer
    assert not await m.grant_again("w1", worker)
    assert not is_revoked(lease(k, "w1"))


async def test_an_unreachable_worker_stays_revoked() -> None:
    k, clock, m = setup()
    worker = FakeKube(1)
    await revoked(k, clock, m, "w1")

    def cut(verb: str, res: Resource, _name: str) -> None:
        raise errors.KubeError("connection refused", status=0, reason="Unreachable")
    worker.before = cut
    with pytest.raises(errors.KubeError):
        await m.grant_again("w1", worker)
    assert is_revoked(lease(k, "w1"))


async def rounds(m: PermitRevocation, leading: list[bool], workers: dict[str, FakeKube],
                 n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``n`` rounds of the leader's loop, its sleeps between rounds skipped (the fake's own
    sleeps kept)."""
    done = 0
    real = asyncio.sleep

    async def sleep(seconds: float) -> None:
        nonlocal done
        if seconds != m.wait / m.ROUNDS:
            return await real(seconds)
        done += 1
        if done >= n:
            raise asyncio.CancelledError
        return None

    monkeypatch.setattr("admission.permit_revocation.asyncio.sleep", sleep)
    with pytest.raises(asyncio.CancelledError):
        await m.lead(lambda: leading[0], workers)


async def test_the_leaders_loop_revokes_and_grants_and_a_follower_writes_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    k, clock, m = setup()
    worker, cut = FakeKube(1), FakeKube(2)
    await granted(k, "w1")
    await granted(k, "w2")
    await worker.create(POD, dispatch_pod("p-0", "Running"), "team-a")

    def unreachable(verb: str, res: Resource, _name: str) -> None:
        raise errors.KubeError("connection refused", status=0, reason="Unreachable")
    cut.before = unreachable
    workers = {"w1": worker, "w2": cut}
    leading = [False]
    await rounds(m, leading, workers, 1, monkeypatch)
    clock.now += WAIT + EPS
    await rounds(m, leading, workers, 3, monkeypatch)
    # A follower neither times nor revokes.
    assert not is_revoked(lease(k, "w1"))
    assert not is_revoked(lease(k, "w2"))
    leading[0] = True
    await rounds(m, leading, workers, 1, monkeypatch)  # first sighting as leader
    clock.now += WAIT + EPS
    await rounds(m, leading, workers, 1, monkeypatch)
    # Both silent: revoked; w1 has a dispatch pod alive and w2 cannot be listed, so
    # neither is granted again in the same round.
    assert is_revoked(lease(k, "w1"))
    assert is_revoked(lease(k, "w2"))
    await worker.delete(POD, "p-0", "team-a")
    await rounds(m, leading, workers, 1, monkeypatch)
    assert not is_revoked(lease(k, "w1"))  # its pods gone: granted again
    assert is_revoked(lease(k, "w2"))  # still unreachable: stays revoked

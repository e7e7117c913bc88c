"""admission.permit_renewal (a worker's side of the permit) against the in-memory fake port
as the manager's API server: a renewal extends the permit from before it was sent, never
from its answer; a revocation that lands between the read and the write makes the write a
409 that extends nothing; a revoked or missing Lease ends the permit at once; and the
manager's revocation, timed by core.permit.Silence, leaves no permit alive."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import pytest

from admission.permit_renewal import PermitRenewal
from dispatch_kubeflow.core import errors, names
from dispatch_kubeflow.core.permit import Silence, is_revoked, lease_name, manager_wait, revocation
from dispatch_kubeflow.kube.resources import LEASE, Resource
from tests.unit.fake_kube import FakeKube

pytestmark = pytest.mark.asyncio
NS = names.CONTROLLER_NAMESPACE
LENGTH = 30.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def granted(k: FakeKube, cluster: str = "w1") -> None:
    """The manager grants the worker its permit: the Lease exists, not revoked."""
    await k.create(LEASE, {"metadata": {"name": lease_name(cluster)}, "spec": {}}, NS)


def lease(k: FakeKube, cluster: str = "w1") -> dict[str, Any]:
    return k.objects[(LEASE.plural, NS, lease_name(cluster))]


def renewal(k: FakeKube, clock: Clock, identity: str = "r1") -> PermitRenewal:
    return PermitRenewal(k, "w1", identity, length=LENGTH, clock=clock)


async def test_a_renewal_runs_from_before_it_was_sent() -> None:
    k, clock = FakeKube(0), Clock()
    await granted(k)
    r = renewal(k, clock)
    assert r.left() == 0  # nothing before the first renewal
    # The answer comes 7 s after the clock was read (a slow manager): the permit still
    # runs from the reading.
    def slow(verb: str, res: Resource, _name: str) -> None:
        if verb == "replace":
            clock.now += 7
    k.before = slow
    assert await r.renew_once()
    assert r.permit.until == 1000 + LENGTH
    assert r.left() == LENGTH - 7
    assert lease(k)["spec"]["holderIdentity"] == "r1"


async def test_a_revocation_between_the_read_and_the_write_extends_nothing() -> None:
    k, clock = FakeKube(0), Clock()
    await granted(k)
    r = renewal(k, clock)
    assert await r.renew_once()
    before = r.permit.until
    clock.now += 5

    def manager_revokes(verb: str, res: Resource, _name: str) -> None:
        if verb == "replace" and not is_revoked(lease(k)):
            k.before = None
            k.write_now(LEASE, lease_name("w1"), NS, {"metadata": {"annotations": {
                names.PERMIT_REVOKED: "x"}}})
    k.before = manager_revokes
    assert not await r.renew_once()  # the PUT carried the version read: 409
    assert r.permit.until == before
    assert is_revoked(lease(k))
    assert not await r.renew_once()  # and now it reads the revocation
    assert r.revoked
    assert r.left() == 0


async def test_no_lease_means_no_permit() -> None:
    k, clock = FakeKube(0), Clock()
    r = renewal(k, clock)
    assert not await r.renew_once()
    assert r.left() == 0


async def test_an_unreachable_manager_is_raised_and_the_permit_runs_out() -> None:
    k, clock = FakeKube(0), Clock()
    await granted(k)
    r = renewal(k, clock)
    assert await r.renew_once()

    def cut(verb: str, res: Resource, _name: str) -> None:
        raise errors.KubeError("connection refused", status=0, reason="Unreachable")
    k.before = cut
    clock.now += LENGTH / 2
    with pytest.raises(errors.KubeError):
        await r.renew_once()
    assert r.left() == LENGTH / 2
    clock.now += LENGTH / 2
    assert r.left() == 0


async def test_two_replicas_renew_and_the_manager_times_the_newest_version() -> None:
    # Both replicas renew on their own; the manager revokes only a version unchanged for its
    # wait, with that version as precondition, and then neither replica holds a permit.
    k, clock = FakeKube(0), Clock()
    await granted(k)
    r1, r2 = renewal(k, clock, "r1"), renewal(k, clock, "r2")
    wait = manager_wait(LENGTH, 0.01)
    silence = Silence(wait)
    assert await r1.renew_once()
    silence.seen(lease(k)["metadata"]["resourceVersion"], clock.now)
    clock.now += 10
    assert await r2.renew_once()
    silence.seen(lease(k)["metadata"]["resourceVersion"], clock.now)  # a new version
    clock.now += wait - 5
    assert not silence.revocable(clock.now)  # r2's renewal restarted the wait
    clock.now += 5.001
    assert silence.revocable(clock.now)
    # The manager's revocation, written on the version it timed.
    await k.replace(LEASE, revocation(lease(k)), NS)
    assert r1.left() == 0
    assert r2.left() == 0
    assert not await r1.renew_once()
    assert r1.revoked


async def test_a_revocation_on_an_older_version_is_refused() -> None:
    k, clock = FakeKube(0), Clock()
    await granted(k)
    r = renewal(k, clock)
    timed = dict(lease(k))
    assert await r.renew_once()  # landed after the manager's read
    with pytest.raises(errors.KubeConflict):
        await k.replace(LEASE, revocation(timed), NS)
    assert not is_revoked(lease(k))
    assert r.left() == LENGTH


# --- the rounds: a cut shorter than the permit must not end it ----------------------------------


class HangingManager(FakeKube):
    """The manager's API server behind a cut that drops packets: until ``healed`` is set, every
    read hangs (as one sent into a partition waits out its timeouts); none fails fast."""

    def __init__(self) -> None:
        super().__init__(0)
        self.healed = asyncio.Event()
        self.healed.set()
        self.sent = 0

    async def get_or_none(self, res: Resource, name: str,
                          namespace: str | None = None) -> Any:
        self.sent += 1
        await self.healed.wait()
        return await super().get_or_none(res, name, namespace)


def quick(r: PermitRenewal) -> PermitRenewal:
    """``r`` with its pauses after a failed round, and its rounds, in hundredths of a second
    (a test's seconds), the period left as it is (10 s)."""
    r.retry, r.round_seconds = 0.04, 0.2
    return r


async def rounds(r: PermitRenewal, seconds: float) -> None:
    task = asyncio.create_task(r.run())
    await asyncio.sleep(seconds)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def test_a_failed_round_is_tried_again_soon_not_a_period_later() -> None:
    # The period is 10 s; the manager refuses the first two rounds (a refused connection,
    # a 503): the third, a fraction of a second later, renews. One period later would
    # leave a worker back from a 20 s cut with 20 s of its permit, or none.
    k = FakeKube(0)
    await granted(k)
    failures = 2

    def flaky(verb: str, res: Resource, _name: str) -> None:
        nonlocal failures
        if verb == "get" and failures:
            failures -= 1
            raise errors.KubeError("connection refused", status=0, reason="Unreachable")
    k.before = flaky
    r = quick(PermitRenewal(k, "w1", "r1", length=LENGTH))
    await rounds(r, 0.5)
    assert failures == 0
    assert r.left() > LENGTH - 1
    assert lease(k)["spec"]["holderIdentity"] == "r1"


async def test_a_round_sent_into_a_cut_is_given_up_and_the_heal_renews_at_once() -> None:
    k = HangingManager()
    await granted(k)
    r = quick(PermitRenewal(k, "w1", "r1", length=LENGTH))
    k.healed.clear()  # the cut
    task = asyncio.create_task(r.run())
    await asyncio.sleep(0.5)
    assert r.left() == 0  # nothing landed
    assert k.sent >= 2  # the hanging round was given up and another sent
    k.healed.set()  # the heal: the round hanging now, or the next, lands
    await asyncio.sleep(0.5)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert r.left() > LENGTH - 1


async def test_a_renewed_permit_waits_a_period_for_its_next_round() -> None:
    k = FakeKube(0)
    await granted(k)
    r = quick(PermitRenewal(k, "w1", "r1", length=LENGTH))
    await rounds(r, 0.5)
    version = lease(k)["metadata"]["resourceVersion"]
    assert r.left() > LENGTH - 1
    await rounds(r, 0.3)  # a fresh loop renews once, then sleeps 8 to 10 s
    assert int(lease(k)["metadata"]["resourceVersion"]) == int(version) + 1


async def test_a_missing_lease_is_said_once_while_it_is_retried(
        caplog: pytest.LogCaptureFixture) -> None:
    k = FakeKube(0)
    r = quick(PermitRenewal(k, "w1", "r1", length=LENGTH))
    with caplog.at_level(logging.WARNING, logger="admission.permit_renewal"):
        await rounds(r, 0.3)
        assert [rec.getMessage() for rec in caplog.records].count(
            f"no permit Lease {NS}/{lease_name('w1')} in the manager: not granted; this "
            "worker runs no dispatch execution") == 1
        await granted(k)  # the manager grants it: seen within a retry, not a period
        await rounds(r, 0.3)
    assert r.left() > LENGTH - 1
    assert not r.missing

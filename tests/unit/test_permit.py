"""core.permit: every pod's share of a worker's permit ends, in real time, before the manager
may revoke the version it came from, whatever the clocks' rates (within the drift) and the
delays; and each rule is needed (a timer from the reply's arrival, or no margin, fails)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import pytest

from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.permit import (
    DEFAULT_DRIFT,
    Permit,
    PermitError,
    Share,
    Silence,
    grant,
    is_revoked,
    manager_wait,
    refusal,
    revocation,
)

LENGTH = 60.0


@dataclass(frozen=True)
class Clock:
    """A monotonic clock: local = offset + rate * real."""

    rate: float
    offset: float

    def read(self, real: float) -> float:
        return self.offset + self.rate * real

    def real(self, local: float) -> float:
        return (local - self.offset) / self.rate


def clock(rng: random.Random, drift: float) -> Clock:
    # The extremes are where a bound breaks: pick them half of the time.
    rate = rng.choice([1 - drift, 1 + drift, rng.uniform(1 - drift, 1 + drift)])
    return Clock(rate, rng.uniform(-1e6, 1e6))


def margin_of_worst_share(rng: random.Random, *, drift: float, wait: float,
                          from_reply: bool = False) -> float:
    """Real seconds between the end of a pod's share and the manager's earliest revocation
    of the version it came from, in one random run (negative: the share outlived it)."""
    agent, pod, manager = (clock(rng, drift) for _ in range(3))

    def delay() -> float:
        return rng.choice([0.0, rng.expovariate(1 / 5), rng.uniform(0, 2 * LENGTH)])

    sent = rng.uniform(0, 100)                  # the agent sends a renewal
    landed = sent + delay()                     # the manager's API server accepts it
    seen = landed + delay()                     # the manager first sees that version
    known = landed + delay()                    # the agent learns it was accepted
    permit = Permit(LENGTH)
    permit.renewed(agent.read(sent))
    silence = Silence(wait)
    silence.seen("r1", manager.read(seen))
    revoke_local = silence.since + silence.wait
    assert not silence.revocable(revoke_local - 1e-3)
    assert silence.revocable(revoke_local + 1e-3)
    worst = float("inf")
    asked = known
    for _ in range(5):                          # a pod asks, again and again
        asked += rng.uniform(0, LENGTH / 2)
        answered = asked + delay()
        received = answered + delay()
        left = permit.left(agent.read(answered))
        if left == 0:
            continue  # nothing left: the pod runs nothing on this answer
        share = Share()
        share.granted(pod.read(received if from_reply else asked), left)
        worst = min(worst, manager.real(revoke_local) - pod.real(share.until))
    return worst


@pytest.mark.parametrize("drift", [0.0, DEFAULT_DRIFT, 0.1])
def test_a_share_ends_before_the_manager_may_revoke(drift: float) -> None:
    rng = random.Random(f"permit-{drift}")
    worst = min(margin_of_worst_share(rng, drift=drift, wait=manager_wait(LENGTH, drift))
                for _ in range(20_000))
    assert worst >= -1e-6, worst


def test_a_share_timed_from_the_reply_outlives_the_permit() -> None:
    rng = random.Random("late-start")
    worst = min(margin_of_worst_share(rng, drift=DEFAULT_DRIFT,
                                      wait=manager_wait(LENGTH, DEFAULT_DRIFT), from_reply=True)
                for _ in range(2_000))
    assert worst < -1.0


def test_without_the_margin_drift_outlives_the_permit() -> None:
    rng = random.Random("no-margin")
    worst = min(margin_of_worst_share(rng, drift=DEFAULT_DRIFT, wait=LENGTH)
                for _ in range(2_000))
    assert worst < 0


def test_the_manager_waits_the_length_and_the_drift_both_ways() -> None:
    assert manager_wait(60, 0) == 60
    assert manager_wait(60, 0.01) == pytest.approx(61.2121, abs=1e-3)
    with pytest.raises(PermitError, match="permit length"):
        manager_wait(0, 0.01)
    with pytest.raises(PermitError, match="clock drift"):
        manager_wait(60, 0.5)


def test_a_new_version_restarts_the_silence_and_the_same_one_does_not() -> None:
    s = Silence(wait=10)
    assert not s.revocable(100)  # nothing seen yet
    s.seen("1", 0)
    s.seen("1", 5)
    assert s.revocable(10)
    s.seen("2", 10)
    assert not s.revocable(19.9)
    assert s.revocable(20)


def test_a_revoked_permit_leaves_nothing_and_renewals_only_extend() -> None:
    p = Permit(10)
    p.renewed(100)
    p.renewed(95)  # an older renewal landing late does not shorten it
    assert p.until == 110
    assert p.holds(109)
    assert p.left(105) == 5
    p.revoked()
    assert not p.holds(100)
    assert p.left(100) == 0
    share = Share()
    share.granted(50, p.left(100))
    assert share.expired(50)


def test_the_wait_is_tight_a_little_less_fails() -> None:
    # (1 + drift) alone, or 1 / (1 - drift) alone, is not enough; the product is the least.
    for wait in (LENGTH * 1.1, LENGTH / 0.9, manager_wait(LENGTH, 0.1) * 0.99):
        rng = random.Random(f"tight-{wait}")
        assert min(margin_of_worst_share(rng, drift=0.1, wait=wait)
                   for _ in range(20_000)) < 0, wait


def _workload(cluster: str | None) -> dict[str, Any]:
    return {"metadata": {"name": "wl"}, "status": {"clusterName": cluster} if cluster else {}}


def _trainjob(a: int) -> dict[str, Any]:
    return {"metadata": {"name": "tj", "annotations": {names.ADMISSION_COUNT: str(a)}}}


def test_a_pod_starts_only_at_the_current_admission_and_where_it_was_dispatched() -> None:
    # A remote TrainJob left on a worker that was lost makes pods at its old A.
    assert refusal(_workload("w1"), _trainjob(3), 3, "w1") is None
    assert "admission count in the manager is 4, the pod's 3" in str(
        refusal(_workload("w1"), _trainjob(4), 3, "w1"))
    assert "dispatched the job to w2, not to w1" in str(
        refusal(_workload("w2"), _trainjob(3), 3, "w1"))
    # Readmission under way: MultiKueue has dispatched nothing yet.
    assert "to no worker" in str(refusal(_workload(None), _trainjob(3), 3, "w1"))
    assert "gone from the manager" in str(refusal(None, _trainjob(3), 3, "w1"))
    assert "gone from the manager" in str(refusal(_workload("w1"), None, 3, "w1"))


def test_the_revocation_and_the_grant_undo_each_other_on_the_version_read() -> None:
    lease = {"metadata": {"name": "dispatch-worker-w1", "resourceVersion": "41",
                          "annotations": {"team": "a"}}, "spec": {}}
    revoked = revocation(lease)
    assert is_revoked(revoked)
    revoked["metadata"]["resourceVersion"] = "42"
    granted = grant(revoked)
    assert not is_revoked(granted)
    assert granted["metadata"] == {"name": "dispatch-worker-w1", "resourceVersion": "42",
                                   "annotations": {"team": "a"}}
    assert is_revoked(revoked)  # the lease read is left as it was
    assert not is_revoked(None)  # a missing Lease proves nothing of a revocation

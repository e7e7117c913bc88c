"""Execution identity arithmetic: R = A + J, DISPATCH_EPOCH = submission, R padded to six."""

from __future__ import annotations

import pytest

from dispatch_kubeflow.core.identity import ExecutionIdentity, IdentityError, epoch


@pytest.mark.parametrize(("submission", "r", "want"), [
    (1, 0, 1000000), (1, 1, 1000001), (1, 2, 1000002), (12, 3, 12000003),
    (3, 9999, 3009999),
])
def test_epoch(submission: int, r: int, want: int) -> None:
    assert epoch(submission, r) == want


def test_tutorial_identities() -> None:
    first = ExecutionIdentity("JOB", 1, 1, 1, 0)
    assert first.attempt_id == "JOB.1.1.1.0"
    assert first.env()["DISPATCH_EPOCH"] == "1000001"
    second = ExecutionIdentity("JOB", 1, 1, 2, 0)
    assert second.attempt_id == "JOB.1.1.2.0"
    assert second.epoch > first.epoch


def test_probe_identity() -> None:
    probe = ExecutionIdentity("P", 1, 1, 0, 0)
    assert probe.env()["DISPATCH_ATTEMPT"] == "P.1.1.0.0"
    assert probe.env()["DISPATCH_EPOCH"] == "1000000"


@pytest.mark.parametrize(("submission", "r"), [(0, 1), (1, -1), (1, 10000)])
def test_out_of_range(submission: int, r: int) -> None:
    with pytest.raises(IdentityError):
        epoch(submission, r)


def test_a_later_attempt_runs_above_every_execution_of_the_earlier_ones() -> None:
    # Issue 26, case 2: attempt 2 of a submission is a new TrainJob whose A starts again.
    last_of_first = ExecutionIdentity("JOB", 1, 1, 2, 0)  # held and released once
    first_of_second = ExecutionIdentity("JOB", 1, 2, 1, 0)
    assert last_of_first.epoch == 1000002  # the seed's numbers for attempt 1 stand
    assert first_of_second.epoch == 1010001
    assert first_of_second.epoch > ExecutionIdentity("JOB", 1, 1, 9999, 0).epoch
    assert ExecutionIdentity("JOB", 2, 1, 1, 0).epoch > ExecutionIdentity(
        "JOB", 1, 100, 9999, 0).epoch  # and every submission above the one before


@pytest.mark.parametrize(("attempt", "a"), [(101, 1), (1, 10000)])
def test_an_identity_past_its_attempt_s_range_is_refused(attempt: int, a: int) -> None:
    with pytest.raises(IdentityError):
        ExecutionIdentity("JOB", 1, attempt, a, 0)

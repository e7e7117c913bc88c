"""Execution identity arithmetic: R = A + J, DISPATCH_EPOCH = submission, R padded to six."""

from __future__ import annotations

import pytest

from dispatch_kubeflow.core.identity import ExecutionIdentity, IdentityError, epoch


@pytest.mark.parametrize(("submission", "r", "want"), [
    (1, 0, 1000000), (1, 1, 1000001), (1, 2, 1000002), (12, 3, 12000003),
    (3, 999999, 3999999),
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


@pytest.mark.parametrize(("submission", "r"), [(0, 1), (1, -1), (1, 1000000)])
def test_out_of_range(submission: int, r: int) -> None:
    with pytest.raises(IdentityError):
        epoch(submission, r)

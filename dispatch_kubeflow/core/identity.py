"""Execution identity: A, J, R = A + J, ``DISPATCH_ATTEMPT`` and ``DISPATCH_EPOCH``.

A is the admission count the admission controller (or, in plain mode, the adapter)
raises once per admission; J is JobSet's restart count of the running execution. R = A + J
rises with every new execution of a submission, so ``DISPATCH_EPOCH`` — the submission
followed by R padded to six digits — orders everything written by one execution below
everything written by the next.
"""

from __future__ import annotations

from dataclasses import dataclass

from dispatch_kubeflow.core import names

R_DIGITS = 6
R_MAX = 10**R_DIGITS - 1


class IdentityError(ValueError):
    """An identity input is out of range; the message names the field."""


@dataclass(frozen=True, slots=True)
class ExecutionIdentity:
    """Who a pod is: job, submission, attempt, admission count A and restart count J."""

    job_id: str
    submission: int
    attempt: int
    admissions: int
    restarts: int

    def __post_init__(self) -> None:
        if not self.job_id:
            raise IdentityError("job_id: must not be empty")
        for field, value, low in (
            ("submission", self.submission, 1),
            ("attempt", self.attempt, 1),
            ("admissions", self.admissions, 0),
            ("restarts", self.restarts, 0),
        ):
            if value < low:
                raise IdentityError(f"{field}: must be at least {low}, got {value}")
        if self.r > R_MAX:
            raise IdentityError(f"A + J: must be at most {R_MAX}, got {self.r}")

    @property
    def r(self) -> int:
        """R = A + J."""
        return self.admissions + self.restarts

    @property
    def attempt_id(self) -> str:
        """``<job>.<submission>.<attempt>.<A>.<J>``."""
        return f"{self.job_id}.{self.submission}.{self.attempt}.{self.admissions}.{self.restarts}"

    @property
    def epoch(self) -> int:
        """The submission followed by R padded to six digits (1, 1 -> 1000001)."""
        return epoch(self.submission, self.r)

    def env(self) -> dict[str, str]:
        """The four ``DISPATCH_*`` variables every container of the execution gets."""
        return {
            names.ENV_JOB_ID: self.job_id,
            names.ENV_SUBMISSION: str(self.submission),
            names.ENV_ATTEMPT: self.attempt_id,
            names.ENV_EPOCH: str(self.epoch),
        }


def epoch(submission: int, r: int) -> int:
    """``int(f"{submission}{r:06d}")``, checked."""
    if submission < 1:
        raise IdentityError(f"submission: must be at least 1, got {submission}")
    if not 0 <= r <= R_MAX:
        raise IdentityError(f"R: must be between 0 and {R_MAX}, got {r}")
    return int(submission * 10**R_DIGITS + r)


def parse_count(value: str | None, field: str) -> int:
    """Read a non-negative count written as a label or annotation ("" or None is 0)."""
    if value is None or value == "":
        return 0
    try:
        n = int(value)
    except ValueError:
        raise IdentityError(f"{field}: not an integer: {value!r}") from None
    if n < 0 or str(n) != value.strip():
        raise IdentityError(f"{field}: not a non-negative integer: {value!r}")
    return n

"""Execution identity: A, J, R = A + J, ``DISPATCH_ATTEMPT`` and ``DISPATCH_EPOCH``.

A is the admission count the admission controller (or, in plain mode, the adapter)
raises once per admission; J is JobSet's restart count of the running execution. R = A + J
rises with every new execution of an attempt. ``DISPATCH_EPOCH`` is the submission followed
by six digits: the attempt's base, ``(attempt - 1) * 10,000``, plus R. It orders everything
written by one execution below everything written by the next, across attempts too: a later
attempt of the submission (a new TrainJob, after StopJob deleted the old one with its A)
starts above every execution of the attempts before it. The memory that makes this so is the
attempt number, which the service keeps anyway; no object in the cluster has to outlive the
job. The price is a bound: at most `ATTEMPT_MAX` attempts of a submission, and R below
`ATTEMPT_SPAN` within each (past it the webhook refuses the pod rather than reuse an
epoch). For attempt 1 the epoch is what it always was (1, R = 1 -> 1000001).
"""

from __future__ import annotations

from dataclasses import dataclass

from dispatch_kubeflow.core import names

R_DIGITS = 6
ATTEMPT_SPAN = 10_000
"""Epochs each attempt owns: R (= A + J) of one attempt stays below this."""
ATTEMPT_MAX = 10**R_DIGITS // ATTEMPT_SPAN
"""Attempts of one submission that fit the epoch's six digits (100)."""
R_MAX = ATTEMPT_SPAN - 1


class IdentityError(ValueError):
    """An identity input is out of range; the message names the field."""


@dataclass(frozen=True, slots=True)
class ExecutionIdentity:
    """Who a pod is: job, submission, attempt, admission count A and restart count J.

    What [FakeBackend.identity][dispatch_kubeflow.testing.FakeBackend.identity] returns; a
    pod reads its own from ``DISPATCH_ATTEMPT`` and ``DISPATCH_EPOCH`` (docs/identity.md).

    Attributes:
        job_id: The job's id.
        submission: The submission, 1 or more.
        attempt: The attempt, from 1 to 100.
        admissions: A, the admission count.
        restarts: J, JobSet's restart count within the admission.

    Raises:
        IdentityError: A field is out of range (a ``ValueError``; the message names it).
    """

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
        if self.attempt > ATTEMPT_MAX:
            raise IdentityError(f"attempt: must be at most {ATTEMPT_MAX}, got {self.attempt}")
        if self.r > R_MAX:
            raise IdentityError(f"A + J: must be at most {R_MAX} within an attempt, "
                                f"got {self.r}")

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
        """The submission followed by six digits, the attempt's base plus R (submission 1,
        attempt 1, R 1 -> 1000001; attempt 2, R 1 -> 1010001)."""
        return epoch(self.submission, self.r, self.attempt)

    def env(self) -> dict[str, str]:
        """The four ``DISPATCH_*`` variables every container of the execution gets.

        Returns:
            ``DISPATCH_JOB_ID``, ``DISPATCH_SUBMISSION``, ``DISPATCH_ATTEMPT`` and
                ``DISPATCH_EPOCH``, by name.
        """
        return {
            names.ENV_JOB_ID: self.job_id,
            names.ENV_SUBMISSION: str(self.submission),
            names.ENV_ATTEMPT: self.attempt_id,
            names.ENV_EPOCH: str(self.epoch),
        }


def epoch(submission: int, r: int, attempt: int = 1) -> int:
    """``int(f"{submission}{(attempt - 1) * ATTEMPT_SPAN + r:06d}")``, checked."""
    if submission < 1:
        raise IdentityError(f"submission: must be at least 1, got {submission}")
    if not 1 <= attempt <= ATTEMPT_MAX:
        raise IdentityError(f"attempt: must be between 1 and {ATTEMPT_MAX}, got {attempt}")
    if not 0 <= r <= R_MAX:
        raise IdentityError(f"R: must be between 0 and {R_MAX} within an attempt, got {r}")
    return int(submission * 10**R_DIGITS + (attempt - 1) * ATTEMPT_SPAN + r)


def split_attempt_id(text: str) -> tuple[str, int, int, int, int]:
    """``<job>.<submission>.<attempt>.<A>.<J>`` as (job, submission, attempt, A, J); an
    IdentityError when the text does not have that shape."""
    parts = text.rsplit(".", 4)
    if len(parts) != 5 or not parts[0] or not all(p.isdigit() for p in parts[1:]):
        raise IdentityError(f"{names.ENV_ATTEMPT} {text!r} is not "
                            "<job>.<submission>.<attempt>.<A>.<J>")
    sub, att, a, j = (int(p) for p in parts[1:])
    return parts[0], sub, att, a, j


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

"""The execution identity the job's command prints, read back from rank 0's log."""

from __future__ import annotations

import re
from dataclasses import dataclass

from dispatch_kubeflow.conformance.failed import CheckFailed
from dispatch_kubeflow.core.identity import IdentityError, split_attempt_id
from dispatch_kubeflow.model import JobID

_ATTEMPT = re.compile(r"^DISPATCH_ATTEMPT=(\S+)$", re.MULTILINE)
_EPOCH = re.compile(r"^DISPATCH_EPOCH=(\d+)$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Identity:
    """The identity an execution printed: DISPATCH_ATTEMPT split, and DISPATCH_EPOCH."""

    attempt: str
    admissions: int
    restarts: int
    epoch: int

    @classmethod
    def parse(cls, log: str, job: JobID) -> Identity:
        attempt = _ATTEMPT.search(log)
        epoch = _EPOCH.search(log)
        if attempt is None or epoch is None:
            raise CheckFailed(f"rank 0's log has no DISPATCH_ATTEMPT or DISPATCH_EPOCH: {log!r}")
        shape = f"DISPATCH_ATTEMPT={attempt.group(1)} is not {job}.1.1.<A>.<J>"
        try:  # the one reader of the identity's shape (core.identity)
            who, submission, attempt_no, a, j = split_attempt_id(attempt.group(1))
        except IdentityError:
            raise CheckFailed(shape) from None
        if (who, submission, attempt_no) != (str(job), 1, 1):
            raise CheckFailed(shape)
        return cls(attempt.group(1), a, j, int(epoch.group(1)))

    def __str__(self) -> str:
        return f"DISPATCH_ATTEMPT={self.attempt} DISPATCH_EPOCH={self.epoch}"

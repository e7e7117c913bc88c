"""The execution identity the job's command prints, read back from rank 0's log."""

from __future__ import annotations

import re
from dataclasses import dataclass

from dispatch_kubeflow.conformance.registry import CheckFailed
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
        parts = attempt.group(1).split(".")
        if len(parts) != 5 or parts[0] != str(job) or parts[1:3] != ["1", "1"] or not (
                parts[3].isdigit() and parts[4].isdigit()):
            raise CheckFailed(f"DISPATCH_ATTEMPT={attempt.group(1)} is not "
                              f"{job}.1.1.<A>.<J>")
        return cls(attempt.group(1), int(parts[3]), int(parts[4]), int(epoch.group(1)))

    def __str__(self) -> str:
        return f"DISPATCH_ATTEMPT={self.attempt} DISPATCH_EPOCH={self.epoch}"

"""The leader-election record of a Lease, as both sides read it: the controller campaigns
with it (admission/lease.py), the library's preflight judges whether a holder is alive
(dispatch_kubeflow/preflight/readmission.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The leader-election fields of a Lease's spec."""

    holder: str = ""
    duration: int = 0
    acquire_time: str = ""
    renew_time: str = ""
    transitions: int = 0

    @classmethod
    def from_lease(cls, lease: Mapping[str, Any]) -> LeaseRecord:
        spec = lease.get("spec") or {}
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            duration=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=str(spec.get("acquireTime") or ""),
            renew_time=str(spec.get("renewTime") or ""),
            transitions=int(spec.get("leaseTransitions") or 0),
        )

    def spec(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.duration,
            "leaseTransitions": self.transitions,
        }
        if self.acquire_time:
            out["acquireTime"] = self.acquire_time
        if self.renew_time:
            out["renewTime"] = self.renew_time
        return out

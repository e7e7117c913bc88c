"""A capability's status as a proof gives it: yes, no or unknown, with the reason."""

from __future__ import annotations

from dispatch_kubeflow.model import (
    Capability,
    CapabilitySource,
    CapabilityStatus,
    CapabilityValue,
)

Caps = dict[Capability, CapabilityStatus]
ALL = tuple(Capability)


def yes(reason: str, source: CapabilitySource = CapabilitySource.PROBED) -> CapabilityStatus:
    return CapabilityStatus(CapabilityValue.YES, source, reason)


def no(reason: str) -> CapabilityStatus:
    return CapabilityStatus(CapabilityValue.NO, CapabilitySource.PROBED, reason)


def unknown(reason: str,
            source: CapabilitySource = CapabilitySource.PROBED) -> CapabilityStatus:
    return CapabilityStatus(CapabilityValue.UNKNOWN, source, reason)

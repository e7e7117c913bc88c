"""What the preflight needs of the mode: the mode-specific proofs and the probe's gate."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from dispatch_kubeflow import errors
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.model import CapabilityStatus
from dispatch_kubeflow.preflight.access import Permission
from dispatch_kubeflow.preflight.probe_watch import ProbeWatch


class PreflightMode(Protocol):
    def api_versions(self) -> list[tuple[str, str]]:
        """The API versions the mode needs beyond Trainer's and JobSet's."""
        ...

    def permissions(self, namespace: str) -> list[Permission]:
        """What the mode needs beyond the common permissions."""
        ...

    def hold_reason(self, namespace: str) -> str:
        """Why Hold is yes once its permissions are there."""
        ...

    async def prove_readmission(self, kube: KubeAPI, watch_for: float) -> CapabilityStatus:
        ...

    def trainjob_labels(self) -> dict[str, str]:
        """The labels a TrainJob (a job's or the probe) carries in this mode (the queue's)."""
        ...

    def closed_annotations(self) -> dict[str, str]:
        """The annotations a new TrainJob carries so it starts closed."""
        ...

    async def watch_probe(self, kube: KubeAPI, namespace: str, probe: Mapping[str, Any],
                          seen: ProbeWatch) -> None:
        """Watch what the mode's gate must keep from happening to the probe."""
        ...

    def judge_probe(self, name: str, seen: ProbeWatch, seconds: float) -> CapabilityStatus:
        ...

    def judge_a_writes(self, probe: str, who: str, a_write: errors.KubeError | None,
                       control: errors.KubeError | None) -> CapabilityStatus:
        """What the two dry-run patches prove about who may write A in this mode."""
        ...

    def judge_guard(self, probe: str, who: str, unqueue: errors.KubeError | None,
                    resume: errors.KubeError | None) -> CapabilityStatus:
        """What the dry-run patches that take the probe's queue label off and resume it
        prove about who may run a dispatch TrainJob past the gate in this mode."""
        ...

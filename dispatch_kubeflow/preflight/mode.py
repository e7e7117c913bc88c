"""What the preflight needs of the mode: its proofs, asked once (:meth:`PreflightMode.proofs`).

Each proof is one module, holding what it proves in either mode (:mod:`.access`,
:mod:`.readmission`, :mod:`.probe_watch`, :mod:`.a_writes`); :mod:`.proofs` picks each
mode's parts once, and the mode hands them over as one value.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from dispatch_kubeflow import errors
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.model import CapabilityStatus
from dispatch_kubeflow.preflight.access import Permission
from dispatch_kubeflow.preflight.probe_watch import ProbeWatch

Judge = Callable[[str, str, errors.KubeError | None, errors.KubeError | None], CapabilityStatus]
"""What two dry-run patches of the probe prove: (probe, who, first answer, second answer)."""


@dataclass(frozen=True, slots=True)
class Proofs:
    """What the preflight proves in one mode, beyond what it proves in every mode."""

    api_versions: tuple[tuple[str, str], ...]
    """The API versions the mode needs beyond Trainer's and JobSet's."""
    permissions: tuple[Permission, ...]
    """What the mode needs beyond the common permissions."""
    hold_reason: str
    """Why Hold is yes once its permissions are there."""
    readmission: Callable[[KubeAPI, float], Awaitable[CapabilityStatus]]
    """The readmission gate's proof, watching for at most the given seconds."""
    trainjob_labels: Mapping[str, str]
    """The labels a TrainJob (a job's or the probe) carries in this mode (the queue's)."""
    closed_annotations: Mapping[str, str]
    """The annotations a new TrainJob carries so it starts closed."""
    watch_probe: Callable[[KubeAPI, str, Mapping[str, Any], ProbeWatch], Awaitable[None]]
    """Watch what the mode's gate must keep from happening to the probe."""
    judge_probe: Callable[[str, ProbeWatch, float], CapabilityStatus]
    """What the probe's watches prove about the start gate."""
    judge_a_writes: Judge
    """What the dry-run patches of A and of another annotation prove about who writes A."""
    judge_guard: Judge
    """What the dry-run patches that take the probe's queue label off and resume it prove
    about who may run a dispatch TrainJob past the gate."""
    workers: Mapping[str, KubeAPI] = field(default_factory=dict)
    """MultiKueue mode: the worker clusters, each proved able to run and stop a job
    (:mod:`.workers`)."""


class PreflightMode(Protocol):
    def proofs(self) -> Proofs:
        """What the preflight proves in this mode (asked once per preflight)."""
        ...

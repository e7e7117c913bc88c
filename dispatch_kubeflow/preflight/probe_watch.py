"""What the start-gate probe's watches see, and what it proves, in each mode.

Every mode watches the probe's pods (none may be created); Kueue mode also watches its
Workload (Kueue must report it ``AdmissionGated`` and admit nothing), plain mode the
TrainJob (it must stay suspended).

In Kueue mode the gate can be proven positively, at once: Kueue itself says so
(``QuotaReserved=False``, reason ``AdmissionGated``, on a Workload whose
``kueue.x-k8s.io/admission-gated-by`` names dispatch's gate) while no pod of the probe
exists; with ``probeWatch: "proof"`` (the default) the probe ends there.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.objects import annotations_of, condition, meta
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import POD, TRAINJOB, WORKLOAD
from dispatch_kubeflow.model import CapabilityStatus
from dispatch_kubeflow.preflight.verdicts import no, unknown, yes
from dispatch_kubeflow.waits import wait_for


@dataclass
class ProbeWatch:
    """What the probe's watch saw."""

    gated_seen: bool = False
    breach: list[str] = field(default_factory=list)
    workload_reason: str = ""
    no_pods: bool = False
    """The pod watch's current view: listed, and no pod of the probe."""
    proven: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the gate is positively proven (Kueue mode): gated by dispatch's gate, in
    Kueue's own words, while no pod exists."""
    proven_after: float = 0.0
    began: float = field(default_factory=time.monotonic)
    end_at_proof: bool = False
    """probeWatch "proof": a positive proof ends the probe (else it watches its window)."""

    def check_proof(self) -> None:
        if (self.end_at_proof and self.gated_seen and self.no_pods and not self.breach
                and not self.proven.is_set()):
            self.proven_after = time.monotonic() - self.began
            self.proven.set()


async def watch_pods(kube: KubeAPI, ns: str, name: str, seen: ProbeWatch) -> None:
    def any_pod(pods: Mapping[str, Any]) -> bool | None:
        if pods:
            seen.no_pods = False
            seen.breach.append(f"pod {next(iter(pods))} was created")
            return True
        seen.no_pods = True
        seen.check_proof()
        return None

    await wait_for(kube, POD, ns, any_pod, label_selector=names.pods_of(name))


def breached(name: str, seen: ProbeWatch) -> CapabilityStatus | None:
    """No, when the probe got out of its gate (every mode); None otherwise."""
    if seen.breach:
        return no(f"probe TrainJob {name} was not held by its gate: {'; '.join(seen.breach)}")
    return None


# --- Kueue mode ---------------------------------------------------------------------------------


async def watch_workload(kube: KubeAPI, ns: str, probe: Mapping[str, Any],
                         seen: ProbeWatch) -> None:
    """Kueue mode: the probe's Workload (by its TrainJob's UID) must stay AdmissionGated."""
    uid = str(meta(probe)["uid"])

    def look(wls: Mapping[str, Any]) -> bool | None:
        for wl in wls.values():
            qr = condition(wl, "QuotaReserved") or {}
            if qr.get("status") == "True" or (condition(wl, "Admitted") or {}).get(
                    "status") == "True":
                seen.breach.append(f"Workload {meta(wl)['name']} got quota or was admitted")
                return True
            gates = str(annotations_of(wl).get(names.ADMISSION_GATED_BY) or "").split(",")
            if qr.get("reason") == "AdmissionGated" and names.GATE in gates:
                seen.gated_seen = True
                seen.check_proof()
            elif qr:
                seen.workload_reason = f"QuotaReserved {qr.get('reason')}: {qr.get('message')}"
            elif not seen.workload_reason:
                seen.workload_reason = "the Workload has no QuotaReserved condition"
        return None

    await wait_for(kube, WORKLOAD, ns, look, label_selector=f"{names.KUEUE_JOB_UID_LABEL}={uid}")


def judge_gated(name: str, seen: ProbeWatch, seconds: float) -> CapabilityStatus:
    """Kueue mode: the probe's Workload was seen AdmissionGated, and nothing got out."""
    if (out := breached(name, seen)) is not None:
        return out
    if seen.proven.is_set() and seen.proven_after < seconds:
        return yes(f"probe TrainJob {name} is gated: Kueue reported its Workload "
                   f"AdmissionGated by {names.GATE}, with no pod, after "
                   f"{seen.proven_after:.1f}s")
    if seen.gated_seen:
        return yes(f"probe TrainJob {name} stayed gated for {seconds:g}s: Kueue reported its "
                   "Workload AdmissionGated, admitted nothing, and no pod was created")
    if seen.workload_reason:
        return unknown(f"Kueue did not report probe TrainJob {name}'s Workload AdmissionGated "
                       f"within {seconds:g}s ({seen.workload_reason}); is the feature gate "
                       "AdmissionGatedBy on?")
    return unknown(f"Kueue made no Workload for probe TrainJob {name} within {seconds:g}s; is "
                   "the TrainJob integration (trainer.kubeflow.org/trainjob) enabled?")


# --- plain mode ---------------------------------------------------------------------------------


async def watch_suspend(kube: KubeAPI, ns: str, probe: Mapping[str, Any],
                        seen: ProbeWatch) -> None:
    """Plain mode: the probe TrainJob must stay suspended."""
    name = str(meta(probe)["name"])

    def look(tjs: Mapping[str, Any]) -> bool | None:
        tj = tjs.get(name)
        if tj is not None and not (tj.get("spec") or {}).get("suspend"):
            seen.breach.append("it was unsuspended")
            return True
        return None

    await wait_for(kube, TRAINJOB, ns, look, field_selector=f"metadata.name={name}")


def judge_suspended(name: str, seen: ProbeWatch, seconds: float) -> CapabilityStatus:
    """Plain mode: the probe stayed suspended and no pod was created."""
    if (out := breached(name, seen)) is not None:
        return out
    return yes(f"probe TrainJob {name} stayed suspended for {seconds:g}s with no pod")

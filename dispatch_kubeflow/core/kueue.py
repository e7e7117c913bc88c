"""Kueue's objects as both sides read them: whose AdmissionCheck it is, which checks a
ClusterQueue lists, which TrainJob a Workload is of. One reader each, so the library's
preflight and the controller never disagree about what Kueue says."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.objects import labels_of

Obj = Mapping[str, Any]


def is_our_check(ac: Obj) -> bool:
    """Whether the AdmissionCheck is dispatch-admission's (its controllerName)."""
    return (ac.get("spec") or {}).get("controllerName") == names.CONTROLLER_NAME


def check_rules(cq: Obj) -> list[Mapping[str, Any]]:
    """The ClusterQueue's ``spec.admissionChecksStrategy.admissionChecks`` entries."""
    return list(((cq.get("spec") or {}).get("admissionChecksStrategy") or {}).get(
        "admissionChecks") or [])


def checks_listed(cq: Obj) -> frozenset[str]:
    """The names of the AdmissionChecks a ClusterQueue lists."""
    return frozenset(str(r.get("name")) for r in check_rules(cq))


def trainjob_of(wl: Obj) -> str | None:
    """The name of the TrainJob that controls this Workload, or None."""
    for ref in (wl.get("metadata") or {}).get("ownerReferences") or []:
        if (ref.get("kind") == "TrainJob" and ref.get("controller")
                and str(ref.get("apiVersion", "")).startswith(names.TRAINER_GROUP + "/")):
            return str(ref.get("name") or "") or None
    return None


def multikueue_remote(trainjob: Obj) -> bool:
    """Whether the TrainJob is a MultiKueue remote: made in this worker cluster by a
    manager's MultiKueue (its origin label), so its admission is the manager's, judged by the
    manager's gate, and its pods run on the worker's permit (docs/multikueue-fence.md)."""
    return bool(labels_of(trainjob).get(names.MULTIKUEUE_ORIGIN_LABEL))


def dispatched_by_multikueue(trainjob: Obj) -> bool:
    """Whether the TrainJob runs in a worker cluster, dispatched there by MultiKueue
    (``spec.managedBy``): then nothing of it runs in this cluster, where Trainer makes no
    JobSet for it, and its pods are the workers' (docs/multikueue-fence.md)."""
    return (trainjob.get("spec") or {}).get("managedBy") == names.MULTIKUEUE_CONTROLLER

"""Plain mode's admission: the adapter itself raises A, once the old pods are gone.

In Kueue mode the admission controller raises A when it approves a Workload. Without
Kueue nobody else does, so every unsuspend the adapter makes (Open, Release) is an
admission: it waits until no pod of the previous execution exists (terminating ones
included), then in ONE merge patch guarded by the TrainJob's resourceVersion raises
``dispatch.phpboyscout.uk/admission-count`` to A + 1, records the token ``plain/<n>``
(n counts the adapter's unsuspends of this TrainJob), applies any other annotation
changes the caller asks for (removing a hold's), and sets ``spec.suspend=false``. A
concurrent change makes the patch fail with a conflict, and the whole check runs again,
so two callers never raise A twice for one admission.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube.resources import POD, TRAINJOB
from dispatch_kubeflow.state import admissions, annotations_of, meta, suspended
from dispatch_kubeflow.waits import wait_for

PLAIN_TOKEN_PREFIX = "plain/"


def plain_unsuspends(trainjob: Mapping[str, Any]) -> int:
    """n of the recorded ``plain/<n>`` token (0 when none)."""
    token = annotations_of(trainjob).get(names.ADMISSION_TOKEN, "")
    if token.startswith(PLAIN_TOKEN_PREFIX):
        tail = token[len(PLAIN_TOKEN_PREFIX):]
        if tail.isdigit():
            return int(tail)
    return 0


def admission_patch(trainjob: Mapping[str, Any],
                    annotations: Mapping[str, str | None] | None = None) -> dict[str, Any]:
    """The merge patch that admits the suspended TrainJob once more (pure)."""
    n = plain_unsuspends(trainjob) + 1
    ann: dict[str, str | None] = dict(annotations or {})
    ann[names.ADMISSION_COUNT] = str(admissions(trainjob) + 1)
    ann[names.ADMISSION_TOKEN] = f"{PLAIN_TOKEN_PREFIX}{n}"
    return {
        "metadata": {"resourceVersion": meta(trainjob).get("resourceVersion"),
                     "annotations": ann},
        "spec": {"suspend": False},
    }


async def admit_plain(
    kube: Kube,
    namespace: str,
    name: str,
    *,
    should_admit: Callable[[Mapping[str, Any]], bool],
    annotations: Mapping[str, str | None] | None = None,
) -> bool:
    """Admit the TrainJob when ``should_admit(trainjob)`` still holds; False if it does not.

    The caller bounds the wait for old pods (:func:`dispatch_kubeflow.waits.within`).
    """
    while True:
        trainjob = await kube.get_or_none(TRAINJOB, name, namespace)
        if trainjob is None:
            raise errors.NotFound(f"TrainJob {namespace}/{name} not found")
        if not suspended(trainjob) or not should_admit(trainjob):
            return False
        await wait_for(kube, POD, namespace, lambda pods: True if not pods else None,
                       label_selector=f"{names.JOBSET_NAME_LABEL}={name}")
        # The pods may have gone while the TrainJob changed: the patch's resourceVersion
        # makes any such change a conflict, and the loop looks again.
        trainjob = await kube.get_or_none(TRAINJOB, name, namespace)
        if trainjob is None:
            raise errors.NotFound(f"TrainJob {namespace}/{name} not found")
        if not suspended(trainjob) or not should_admit(trainjob):
            return False
        try:
            await kube.patch(TRAINJOB, name, admission_patch(trainjob, annotations), namespace)
            return True
        except errors.KubeConflict:
            continue

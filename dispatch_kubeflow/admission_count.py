"""Plain mode's admission: the adapter itself raises A, once the old pods are gone.

The rules (the token, the patch) are :mod:`dispatch_kubeflow.core.admission_count`'s, shared
with Kueue mode; this module does the I/O.

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

from dispatch_kubeflow.core import errors, names
from dispatch_kubeflow.core.admission_count import plain_admission_patch
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import POD, TRAINJOB
from dispatch_kubeflow.state import suspended
from dispatch_kubeflow.waits import wait_for


async def admit_plain(
    kube: KubeAPI,
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
            await kube.patch(TRAINJOB, name, plain_admission_patch(trainjob, annotations),
                             namespace)
            return True
        except errors.KubeConflict:
            continue

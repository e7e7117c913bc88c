"""Plain mode's admission: the adapter itself raises A, once the old pods are gone.

The rules (the token, the patch) are :mod:`dispatch_kubeflow.core.admission_count`'s, shared
with Kueue mode; this module does the I/O.

In Kueue mode the admission controller raises A when it approves a Workload. Without
Kueue nobody else does, so every unsuspend the adapter makes (Open, Release) is an
admission: it waits until no pod of the previous execution is alive (terminating ones
included; a finished rank, which its suspended Job keeps, never blocks), then in ONE merge
patch guarded by the TrainJob's resourceVersion raises
``dispatch.phpboyscout.uk/admission-count`` to A + 1, records the token ``plain/<n>``
(n counts the adapter's unsuspends of this TrainJob) and the JobSet the execution runs as
(the webhook admits only its pods, :mod:`dispatch_kubeflow.core.execution`), applies any
other annotation changes the caller asks for (removing a hold's), and sets
``spec.suspend=false``. A
concurrent change makes the patch fail with a conflict, and the whole check runs again,
so two callers never raise A twice for one admission.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from dispatch_kubeflow.core import errors, names
from dispatch_kubeflow.core.admission_count import plain_admission_patch
from dispatch_kubeflow.core.execution import alive, approval_annotations, raise_step
from dispatch_kubeflow.core.objects import meta
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import JOBSET, POD, TRAINJOB
from dispatch_kubeflow.state import suspended
from dispatch_kubeflow.waits import wait_for

JOBSET_POLL = 0.5
"""Seconds between looks for the JobSet while Trainer has not made it yet."""


async def _jobset(kube: KubeAPI, namespace: str, name: str) -> Mapping[str, Any]:
    """The TrainJob's JobSet, which the approval names. Trainer applies it with the
    TrainJob, suspended or not (v2.3.0 reconcileObjects), so it is nearly always there;
    listed (a verb every mode needs already), and looked for again while it is not, within
    the caller's deadline. Approving without one would let the webhook skip its JobSet rule
    (the model's variant RECORDNONE)."""
    while True:
        found, _ = await kube.list(JOBSET, namespace, field_selector=f"metadata.name={name}")
        if found:
            return found[0]
        await asyncio.sleep(JOBSET_POLL)


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
        await wait_for(kube, POD, namespace,
                       lambda pods: True if not alive(pods.values()) else None,
                       label_selector=names.pods_of(name))
        jobset = await _jobset(kube, namespace, name)
        # The pods may have gone while the TrainJob changed: the patch's resourceVersion
        # makes any such change a conflict, and the loop looks again.
        trainjob = await kube.get_or_none(TRAINJOB, name, namespace)
        if trainjob is None:
            raise errors.NotFound(f"TrainJob {namespace}/{name} not found")
        if not suspended(trainjob) or not should_admit(trainjob):
            return False
        try:
            uid = str(meta(jobset).get("uid") or "")
            approval = {**(annotations or {}), **approval_annotations(uid)}
            await kube.patch(TRAINJOB, name, plain_admission_patch(
                trainjob, approval, raise_step(trainjob, uid, jobset)), namespace)
            return True
        except errors.KubeConflict:
            continue

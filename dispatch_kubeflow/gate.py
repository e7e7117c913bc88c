"""The start gate: a started job stays closed until Open.

Kueue mode (:mod:`dispatch_kubeflow.mode_kueue`): the TrainJob is created with
``kueue.x-k8s.io/admission-gated-by: dispatch.phpboyscout.uk/gate``; Kueue admits no
Workload while a gate is listed. Kueue lets a gate be removed but never added after
creation, so Open removes only dispatch's entry and leaves anybody else's. The removal is a
JSON patch whose ``test`` op checks the annotation's value first, so a gate someone removes
or edits at the same moment is never overwritten with a stale list.

Plain mode (:mod:`dispatch_kubeflow.mode_plain`): the TrainJob is created suspended; Open
is the job's first admission, done by :mod:`dispatch_kubeflow.admission_count` (raise A,
then unsuspend).
"""

from __future__ import annotations

from typing import Any

from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.objects import annotations_of
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import TRAINJOB
from dispatch_kubeflow.state import parse_gates

_GATE_PATH = "/metadata/annotations/" + names.ADMISSION_GATED_BY.replace("~", "~0").replace(
    "/", "~1")
_RETRIES = 8


def removal_patch(value: str) -> list[dict[str, Any]] | None:
    """The JSON patch that removes dispatch's gate from ``value`` (None: nothing to remove)."""
    gates = parse_gates(value)
    if names.GATE not in gates:
        return None
    rest = [g for g in gates if g != names.GATE]
    test = {"op": "test", "path": _GATE_PATH, "value": value}
    if rest:
        return [test, {"op": "replace", "path": _GATE_PATH, "value": ",".join(rest)}]
    return [test, {"op": "remove", "path": _GATE_PATH}]


async def open_kueue_gate(kube: KubeAPI, namespace: str, name: str) -> bool:
    """Remove dispatch's gate from the TrainJob. False when it was not there (already open)."""
    # The common case in one request: the annotation is what Start wrote, our gate alone.
    # The patch's ``test`` op is its precondition (a 422 when the value is anything else),
    # so it removes nothing but that; otherwise the loop reads the value and judges.
    first = removal_patch(names.GATE)
    assert first is not None
    try:
        await kube.patch(TRAINJOB, name, first, namespace, kind="json")
        return True
    except (errors.KubeInvalid, errors.KubeNotFound):
        pass  # another value (or a webhook's refusal, or no TrainJob): the loop says which
    for _ in range(_RETRIES):
        trainjob = await kube.get_or_none(TRAINJOB, name, namespace)
        if trainjob is None:
            raise errors.NotFound(f"TrainJob {namespace}/{name} not found")
        value = annotations_of(trainjob).get(names.ADMISSION_GATED_BY)
        patch = removal_patch(value or "")
        if patch is None:
            return False
        try:
            await kube.patch(TRAINJOB, name, patch, namespace, kind="json")
            return True
        except errors.KubeInvalid:
            # A failed ``test`` is a 422 too: read again; if the value did not change the
            # refusal was real (a webhook), so say so.
            again = await kube.get_or_none(TRAINJOB, name, namespace)
            if again is not None and annotations_of(again).get(names.ADMISSION_GATED_BY) == value:
                raise
    raise errors.KubeConflict(
        f"TrainJob {namespace}/{name}: its admission gates kept changing; Open gave up after "
        f"{_RETRIES} tries")

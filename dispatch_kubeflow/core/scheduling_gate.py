"""The pod's start, fenced after its creation: dispatch's scheduling gate.

The webhook judges a pod before the API server stores it (:func:`~dispatch_kubeflow.core.
execution.judge_pod`), and those are two steps: a pod whose create is in flight while the
job is held, released and admitted again is stored after the next execution's pods were
judged, and would run beside them (the model's limit ``podrace``). So the webhook puts a
scheduling gate, ``dispatch.phpboyscout.uk/execution``, on every dispatch pod it admits: a
gated pod is stored but never scheduled. dispatch-admission lifts the gate, and the webhook
judges that lift too, after the pod is stored (:func:`judge_start`): the pod must still be
of the current execution, and no alive pod of another execution may be stored.

Why that closes the window: a pod counts as alive from the moment it is stored, gated or
not, and each lift is judged after its own pod was stored. Of two pods of different
executions, the lift judged later lists the other pod, stored before the earlier lift was
judged, so at most one of them ever starts (the other is refused until it goes). The lift
itself needs no fence of its own: it is a JSON patch that tests the gate is still there
(idempotent), and whoever sends it — the controller, a stale replica, a user — is judged
the same way by the webhook.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.execution import PodVerdict, execution_of, judge_pod
from dispatch_kubeflow.core.objects import labels_of, meta

Obj = Mapping[str, Any]


def _gates(pod: Obj | None) -> list[Any]:
    return list(((pod or {}).get("spec") or {}).get("schedulingGates") or [])


def gated(pod: Obj | None) -> bool:
    """Whether ``pod`` carries dispatch's scheduling gate."""
    return any(isinstance(g, Mapping) and g.get("name") == names.EXECUTION_GATE
               for g in _gates(pod))


def gate_op(pod: Obj) -> dict[str, Any] | None:
    """The JSON patch operation that gates ``pod`` at its creation (None: gated already, as
    on the webhook's reinvocation)."""
    if gated(pod):
        return None
    gate = {"name": names.EXECUTION_GATE}
    if isinstance((pod.get("spec") or {}).get("schedulingGates"), list):
        return {"op": "add", "path": "/spec/schedulingGates/-", "value": gate}
    # absent, or null: the whole list (appending to null would fail the pod's creation)
    return {"op": "add", "path": "/spec/schedulingGates", "value": [gate]}


def lifts_gate(old: Obj | None, new: Obj | None) -> bool:
    """Whether an update of a pod from ``old`` to ``new`` lifts dispatch's gate."""
    return gated(old) and not gated(new)


def lift_patch(pod: Obj) -> list[dict[str, Any]] | None:
    """The JSON patch that lifts the gate from ``pod`` as read: it tests that the gate is
    still at that place, so it is idempotent (once lifted, the test fails: 422, nothing
    written). None: not gated."""
    for i, g in enumerate(_gates(pod)):
        if isinstance(g, Mapping) and g.get("name") == names.EXECUTION_GATE:
            path = f"/spec/schedulingGates/{i}"
            return [{"op": "test", "path": path, "value": dict(g)},
                    {"op": "remove", "path": path}]
    return None


def judge_start(pod: Obj, trainjob: Obj, admissions: int, pods: Sequence[Obj], *,
                workloads: Sequence[Obj] = ()) -> PodVerdict:
    """Whether ``pod``, stored and gated, may start now, for ``trainjob`` whose A is
    ``admissions``, with ``pods`` the job's pods stored now (``pod`` among them).

    It must be of the current execution — the A the webhook gave it at its creation is
    still the job's — and pass the creation's rules again against the pods stored now
    (:func:`~dispatch_kubeflow.core.execution.judge_pod`)."""
    own = execution_of(pod).admissions
    job = (f"job {labels_of(trainjob).get(names.JOB_ID_LABEL)} "
           f"(TrainJob {meta(trainjob).get('name')})")
    if own != admissions:
        return PodVerdict(False, f"{job}: pod {meta(pod).get('name')} was given A={own} when it "
                                 f"was made, and the job is at A={admissions} now: its "
                                 "execution is over, and it never starts")
    uid = meta(pod).get("uid")
    others = [p for p in pods if meta(p).get("uid") != uid]
    return judge_pod(pod, trainjob, admissions, others, workloads=workloads)

"""Hold and release.

Kueue mode: a hold records itself on the TrainJob (the annotations
``dispatch.phpboyscout.uk/hold-instance``, ``hold-since``, ``hold-until``, ``hold-who`` and
``hold-reason``, without suspending it), then deactivates the job's Workload
(``spec.active=false``) with the same annotations; Kueue evicts the Workload and suspends
the TrainJob, which ends the execution. The TrainJob's record outlives a re-made Workload:
the admission controller never approves a Workload of a held TrainJob and puts the hold
back on it (:mod:`dispatch_kubeflow.core.hold`). Release removes the TrainJob's record
first (so the controller never puts a released hold back), then reactivates the Workload
and removes its annotations, each in one JSON patch whose ``test`` op checks the hold
instance, so a release never removes another instance's hold. An expired hold
(``hold-until`` in the past) is released by the admission controller, which watches
Workloads anyway.

Plain mode: the same annotations go on the TrainJob with ``spec.suspend=true``. Release
waits until no pod of the job remains, then raises A, removes the annotations and
unsuspends in one patch (:mod:`dispatch_kubeflow.admission_count`). A job still closed by
its start gate (never opened, A = 0) stays suspended after release. Nobody else being
there to release an expired hold, the library does, in a wait on the job
(:func:`dispatch_kubeflow.observe.wait`); Inspect only reads.

Every call is bounded by its own ``HoldMeta.call.deadline``; past it the call raises
DeadlineExceeded and changes nothing more.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from dispatch_kubeflow import errors
from dispatch_kubeflow.admission_count import admit_plain
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.admission_count import admissions
from dispatch_kubeflow.core.hold import instance as hold_instance
from dispatch_kubeflow.core.objects import annotations_of, meta
from dispatch_kubeflow.core.times import format_time
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import TRAINJOB, WORKLOAD
from dispatch_kubeflow.model import HoldMeta

_RETRIES = 8


def hold_annotations(hold: HoldMeta, now: datetime | None = None) -> dict[str, str]:
    """The annotations that record ``hold``."""
    ann = {
        names.HOLD_INSTANCE: str(hold.instance),
        names.HOLD_SINCE: format_time(now or datetime.now(UTC)),
        names.HOLD_WHO: str(hold.by),
        names.HOLD_REASON: hold.reason,
    }
    if hold.until is not None:
        ann[names.HOLD_UNTIL] = format_time(hold.until)
    return ann


def validate_hold(hold: HoldMeta) -> None:
    if isinstance(hold.instance, bool) or not isinstance(hold.instance, int) \
            or hold.instance < 1:
        raise errors.SpecError(f"hold.instance: must be an integer of at least 1, got "
                               f"{hold.instance!r}", field="hold.instance")
    if not hold.by.id:
        raise errors.SpecError("hold.by.id: must name who holds", field="hold.by.id")
    # Recorded in annotations on the TrainJob and the Workload, whose total Kubernetes caps.
    for field, text in (("hold.by.id", hold.by.id), ("hold.reason", hold.reason)):
        if len(text.encode()) > HOLD_TEXT_MAX:
            raise errors.SpecError(f"{field}: {len(text.encode()):,} bytes, more than the "
                                   f"{HOLD_TEXT_MAX:,} a hold records; shorten it",
                                   field=field)


HOLD_TEXT_MAX = 4096
"""The most bytes a hold records of who holds and why (annotations share 256 KiB)."""


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def release_patch(obj: Mapping[str, Any], instance: int, *,
                  reactivate: bool) -> list[dict[str, Any]]:
    """JSON patch: test the hold instance, drop the hold's annotations, and (a Workload's)
    set ``spec.active`` again."""
    ann = annotations_of(obj)
    ops: list[dict[str, Any]] = [{"op": "test", "path": f"/metadata/annotations/"
                                  f"{_escape(names.HOLD_INSTANCE)}",
                                  "value": ann.get(names.HOLD_INSTANCE, str(instance))}]
    ops += [{"op": "remove", "path": f"/metadata/annotations/{_escape(k)}"}
            for k in names.HOLD_ANNOTATIONS if k in ann]
    if reactivate:
        ops.append({"op": "add", "path": "/spec/active", "value": True})
    return ops


# --- Kueue mode -------------------------------------------------------------------------------


async def hold_workload(kube: KubeAPI, workload: Mapping[str, Any], hold: HoldMeta,
                       now: datetime | None = None) -> None:
    """Deactivate the Workload and record the hold (idempotent for the same instance)."""
    ns, name = meta(workload)["namespace"], meta(workload)["name"]
    current: Mapping[str, Any] | None = workload
    for _ in range(_RETRIES):
        if current is None:
            raise errors.NotFound(f"Workload {ns}/{name} not found")
        held = hold_instance(current)
        if held and held != hold.instance:
            raise errors.HoldError(
                f"Workload {ns}/{name} is already held as instance {held}; release that first")
        if held == hold.instance and (current.get("spec") or {}).get("active") is False:
            return
        patch = {"metadata": {"resourceVersion": meta(current).get("resourceVersion"),
                              "annotations": hold_annotations(hold, now)},
                 "spec": {"active": False}}
        try:
            await kube.patch(WORKLOAD, name, patch, ns)
            return
        except errors.KubeConflict:
            current = await kube.get_or_none(WORKLOAD, name, ns)
    raise errors.KubeConflict(f"Workload {ns}/{name} kept changing; the hold gave up")


async def release_workload(kube: KubeAPI, workload: Mapping[str, Any], instance: int, *,
                           mark: bool = False) -> bool:
    """Reactivate the Workload if it holds ``instance``. False when it was not held.

    With ``mark`` (the TrainJob's record of this hold was just cleared), a Workload that
    carries no hold is still written: ``hold-released``, fenced by the version read. The
    controller puts a hold the TrainJob records back on a Workload re-made under it, judged
    from the Workload it read; that write carries its version, so this one makes it a 409
    instead of a hold put back after its release (the model's NORELEASEWRITE). A copy that
    landed after our read makes this write the 409, and the next turn releases it."""
    ns, name = meta(workload)["namespace"], meta(workload)["name"]
    current: Mapping[str, Any] | None = workload
    for _ in range(_RETRIES):
        if current is None:
            raise errors.NotFound(f"Workload {ns}/{name} not found")
        held = hold_instance(current)
        if held and held != instance:
            raise errors.HoldError(
                f"Workload {ns}/{name} is held as instance {held}, not {instance}; "
                "the hold stays")
        try:
            if held:
                await kube.patch(WORKLOAD, name, release_patch(current, instance,
                                                               reactivate=True), ns, kind="json")
                return True
            if not mark:
                return False
            stamp = f"{instance} {datetime.now(UTC).isoformat(timespec='microseconds')}"
            await kube.patch(WORKLOAD, name, {"metadata": {
                "resourceVersion": meta(current).get("resourceVersion"),
                "annotations": {names.HOLD_RELEASED: stamp}}}, ns)
            return False
        except errors.KubeWebhookDenied:
            raise  # a webhook refused: reading again changes nothing
        except (errors.KubeInvalid, errors.KubeConflict):
            current = await kube.get_or_none(WORKLOAD, name, ns)
    raise errors.KubeConflict(f"Workload {ns}/{name} kept changing; the release gave up")


# --- the TrainJob's record: plain mode's hold, and Kueue mode's copy of it --------------------


async def _held_trainjob(kube: KubeAPI, namespace: str, name: str,
                         instance: int | None) -> tuple[Mapping[str, Any], int]:
    """The TrainJob and the hold instance it records (0: none); a HoldError when it records
    another than ``instance`` (None: any will do)."""
    trainjob = await kube.get_or_none(TRAINJOB, name, namespace)
    if trainjob is None:
        raise errors.NotFound(f"TrainJob {namespace}/{name} not found")
    held = hold_instance(trainjob)
    if held and instance is not None and held != instance:
        raise errors.HoldError(f"TrainJob {namespace}/{name} is held as instance {held}, "
                               f"not {instance}; the hold stays")
    return trainjob, held


async def clear_trainjob_hold(kube: KubeAPI, namespace: str, name: str, instance: int) -> bool:
    """Remove the TrainJob's record of hold ``instance`` (False: it records none), and
    nothing else: Kueue mode's copy, or a plain-mode job never opened (it keeps its start
    gate). One JSON patch whose ``test`` op checks the instance."""
    for _ in range(_RETRIES):
        trainjob, held = await _held_trainjob(kube, namespace, name, instance)
        if not held:
            return False
        try:
            await kube.patch(TRAINJOB, name, release_patch(trainjob, instance, reactivate=False),
                             namespace, kind="json")
            return True
        except errors.KubeWebhookDenied:
            raise  # a webhook refused: reading again changes nothing
        except errors.KubeInvalid:
            continue  # the test op failed: the record changed meanwhile; judge again
    raise errors.KubeConflict(f"TrainJob {namespace}/{name} kept changing; the release gave up")


async def hold_trainjob(kube: KubeAPI, namespace: str, name: str, hold: HoldMeta, *,
                        suspend: bool = True, now: datetime | None = None) -> None:
    """Record the hold on the TrainJob and (plain mode) suspend it; idempotent for the same
    instance. Kueue mode records it without suspending (Kueue suspends the TrainJob when
    the Workload is deactivated)."""
    for _ in range(_RETRIES):
        trainjob = await kube.get_or_none(TRAINJOB, name, namespace)
        if trainjob is None:
            raise errors.NotFound(f"TrainJob {namespace}/{name} not found")
        held = hold_instance(trainjob)
        if held and held != hold.instance:
            raise errors.HoldError(f"TrainJob {namespace}/{name} is already held as instance "
                                   f"{held}; release that first")
        if held == hold.instance:
            return
        # Fenced by the version read: a hold or release written meanwhile is judged again.
        patch: dict[str, Any] = {"metadata": {
            "resourceVersion": meta(trainjob).get("resourceVersion"),
            "annotations": hold_annotations(hold, now)}}
        if suspend:
            patch["spec"] = {"suspend": True}
        try:
            await kube.patch(TRAINJOB, name, patch, namespace)
            return
        except errors.KubeConflict:
            continue
    raise errors.KubeConflict(f"TrainJob {namespace}/{name} kept changing; the hold gave up")


async def release_trainjob(kube: KubeAPI, namespace: str, name: str, instance: int | None) -> bool:
    """Release the plain-mode hold ``instance`` (None: whatever instance, when expired).

    A job that was opened before (A > 0) is admitted again once its pods are gone; a job
    never opened keeps its start gate (stays suspended) and only loses the hold.
    """
    trainjob, held = await _held_trainjob(kube, namespace, name, instance)
    if not held:
        return False
    drop: dict[str, str | None] = dict.fromkeys(names.HOLD_ANNOTATIONS)

    def same_hold(tj: Mapping[str, Any]) -> bool:
        return hold_instance(tj) == held

    if admissions(trainjob) > 0:
        return await admit_plain(kube, namespace, name, should_admit=same_hold,
                                 annotations=drop)
    try:
        return await clear_trainjob_hold(kube, namespace, name, held)
    except errors.HoldError:
        return False  # another hold was placed meanwhile: not the one being released

"""The hold's record, read and written the same way by the library and the controller.

A hold is the five annotations ``dispatch.phpboyscout.uk/hold-instance``, ``hold-since``,
``hold-who``, ``hold-until`` and ``hold-reason``. Where they live:

- plain mode: on the TrainJob, with ``spec.suspend=true``;
- Kueue mode: on the Workload, with ``spec.active=false`` (what Kueue acts on), *and* on the
  TrainJob, without suspending it. The TrainJob's copy is what outlives the Workload: Kueue
  (or anyone) may delete a held job's Workload and Kueue then makes a new, active one. The
  controller never approves a Workload of a TrainJob that records a hold, and puts the
  hold back on such a Workload (:func:`keep_patch`, fenced by the Workload's version).
  Hold writes the TrainJob first and Release clears it first, then writes the Workload
  even when it carries no hold (``hold-released``), so the controller never puts back a
  hold that was released: its live read of the TrainJob sees the release, or its fenced
  write meets the Workload's new version (model-checked: verify/, variants CACHEDHOLDCOPY,
  RELEASEWLFIRST, NORELEASEWRITE).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.identity import IdentityError, parse_count
from dispatch_kubeflow.core.objects import annotations_of, controller_uid, meta
from dispatch_kubeflow.core.times import parse_time

Obj = Mapping[str, Any]


def instance(obj: Obj | None) -> int:
    """The hold instance recorded on the object (0: no hold)."""
    raw = annotations_of(obj).get(names.HOLD_INSTANCE)
    if raw is None:
        return 0
    try:
        return max(parse_count(raw, "hold-instance"), 1)
    except IdentityError:
        return 1  # a hold we cannot read is still a hold


def record(obj: Obj | None) -> dict[str, str] | None:
    """The hold's annotations, when the object carries a hold."""
    ann = annotations_of(obj)
    if names.HOLD_INSTANCE not in ann:
        return None
    return {k: ann[k] for k in names.HOLD_ANNOTATIONS if k in ann}


def until(obj: Obj | None) -> datetime | None:
    """The hold's end (None: no hold, or one without an end)."""
    return parse_time(annotations_of(obj).get(names.HOLD_UNTIL))


def kueue_holder(trainjob: Obj | None, workload: Obj | None) -> Obj | None:
    """Kueue mode: the object whose record holds the job. The Workload's when it carries
    one (the seed's record), else the TrainJob's (a Workload re-made under a hold, before
    the controller has put the hold back); None when neither holds."""
    if instance(workload):
        return workload
    if instance(trainjob):
        return trainjob
    return None


def of_trainjob(workload: Obj, trainjob: Obj | None) -> Obj | None:
    """``trainjob`` when it is the one that owns ``workload`` (its controller reference's
    UID; a Workload without one is taken as the TrainJob's), else None: an earlier attempt's
    TrainJob of the same name must not lend its hold to a later attempt's Workload."""
    if trainjob is None:
        return None
    owner = controller_uid(workload, "TrainJob")
    return trainjob if owner in ("", meta(trainjob).get("uid")) else None


def lacks_hold(trainjob: Obj | None, workload: Obj) -> bool:
    """Kueue mode: the TrainJob records a hold and its Workload (live, not being deleted)
    carries none, or carries it but is active again (resumed outside dispatch: kueuectl
    resume workload, a patch): the controller must put the hold back before anything else.
    Dispatch's own writes never leave that second state: its hold deactivates and records
    in one patch, its release clears the TrainJob's record before it reactivates."""
    return bool(instance(of_trainjob(workload, trainjob))) \
        and (not instance(workload) or (workload.get("spec") or {}).get("active") is not False) \
        and not meta(workload).get("deletionTimestamp")


def keep_patch(workload: Obj, held: Mapping[str, str]) -> dict[str, Any]:
    """Merge patch: the Workload deactivated with the TrainJob's record ``held``. Fenced by
    the resourceVersion of the Workload judged: a Workload released or changed since then
    answers 409 and is judged again."""
    return {"metadata": {"resourceVersion": meta(workload).get("resourceVersion"),
                         "annotations": dict(held)},
            "spec": {"active": False}}


def clear_patch(obj: Obj) -> dict[str, Any]:
    """Merge patch: every hold annotation removed, only on this exact version (its
    resourceVersion), so a hold placed again meanwhile is never cleared."""
    return {"metadata": {"resourceVersion": meta(obj).get("resourceVersion"),
                         "annotations": dict.fromkeys(names.HOLD_ANNOTATIONS)}}

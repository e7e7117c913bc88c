"""The admission count A: how it is read, which admission raised it, and the patch that
raises it. The rules of both modes, pure (no I/O).

A lives on the TrainJob (``dispatch.phpboyscout.uk/admission-count``), next to the token
of the admission that raised it last (``dispatch.phpboyscout.uk/admission-token``), so that
whoever raises A never raises it twice for one admission:

* Kueue mode: the admission controller raises A when it approves a Workload; the token is
  ``<workload uid>/<evictions>`` (:func:`admission_token`), and :func:`plan_admission`
  decides from it whether this admission raised A already.
* plain mode: the adapter raises A with every unsuspend; the token is ``plain/<n>``, n
  counting the adapter's unsuspends of the TrainJob (:func:`plain_admission_patch`).

Every raise is one merge patch guarded by the TrainJob's resourceVersion
(:func:`raise_patch`): a concurrent writer makes it fail with 409, never raise twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.identity import IdentityError, parse_count
from dispatch_kubeflow.core.kueue import multikueue_remote
from dispatch_kubeflow.core.objects import annotations_of, labels_of, meta

Obj = Mapping[str, Any]

PLAIN_TOKEN_PREFIX = "plain/"


def admissions(trainjob: Obj | None) -> int:
    """A, from the TrainJob's admission-count annotation (unreadable counts as 0)."""
    try:
        return parse_count(annotations_of(trainjob).get(names.ADMISSION_COUNT), "admission-count")
    except IdentityError:
        return 0


def token_parts(token: str | None) -> tuple[str, int] | None:
    """``<who>/<n>`` as (who, n); None when the token does not have that shape."""
    who, sep, n = (token or "").rpartition("/")
    return (who, int(n)) if sep and who and n.isdigit() else None


def raise_patch(trainjob: Obj, count: int, token: str,
                annotations: Mapping[str, str | None] | None = None) -> dict[str, Any]:
    """The merge patch that sets A to ``count`` and records ``token``, only on this version
    of the TrainJob (its resourceVersion), with any other annotation changes."""
    ann: dict[str, str | None] = dict(annotations or {})
    ann[names.ADMISSION_COUNT] = str(count)
    ann[names.ADMISSION_TOKEN] = token
    return {"metadata": {"resourceVersion": meta(trainjob).get("resourceVersion"),
                         "annotations": ann}}


# --- plain mode ---------------------------------------------------------------------------


def plain_unsuspends(trainjob: Obj) -> int:
    """n of the recorded ``plain/<n>`` token (0 when none)."""
    token = annotations_of(trainjob).get(names.ADMISSION_TOKEN, "")
    if token.startswith(PLAIN_TOKEN_PREFIX):
        tail = token[len(PLAIN_TOKEN_PREFIX):]
        if tail.isdigit():
            return int(tail)
    return 0


def plain_admission_patch(trainjob: Obj,
                          annotations: Mapping[str, str | None] | None = None,
                          step: int = 1) -> dict[str, Any]:
    """The merge patch that admits the suspended TrainJob once more: A + ``step``, token
    ``plain/<n + 1>``, any other annotation changes, and ``spec.suspend=false``."""
    patch = raise_patch(trainjob, admissions(trainjob) + step,
                        f"{PLAIN_TOKEN_PREFIX}{plain_unsuspends(trainjob) + 1}", annotations)
    patch["spec"] = {"suspend": False}
    return patch


# --- Kueue mode ---------------------------------------------------------------------------


def eviction_count(wl: Obj) -> int:
    """Total evictions of this Workload (``status.schedulingStats.evictions[].count``)."""
    stats = (wl.get("status") or {}).get("schedulingStats") or {}
    return sum(int(e.get("count") or 0) for e in stats.get("evictions") or [])


W = TypeVar("W", bound=Mapping[str, Any])


def newest_workload(items: Iterable[W]) -> W | None:
    """A TrainJob's current Workload: the newest not being deleted (else the newest)."""
    items = list(items)
    live = [w for w in items if not meta(w).get("deletionTimestamp")] or items
    return max(live, key=lambda w: str(meta(w).get("creationTimestamp", "")), default=None)


def unapproved_admission(trainjob: Obj, workloads: Iterable[Obj]) -> str:
    """Why the Kueue-mode job's current admission is not the one dispatch's gate approved
    ("" when it is, or when the TrainJob records no approval: never admitted, plain mode,
    or approved by a controller before tokens). Its Workload's admission token (UID and
    evictions) must be the one recorded with A: a ClusterQueue that stopped listing the
    check, or a Workload re-made and admitted without it, would otherwise run the job again
    at the same identity once the old pods are gone.

    A MultiKueue remote (a TrainJob a manager put in this worker) is not judged here: its
    token names the manager's admission, which the manager's gate judged, and the worker's
    Workload of it is another object; its pods start only on the worker's permit, each once
    the manager confirms its identity live (docs/multikueue-fence.md)."""
    approved = annotations_of(trainjob).get(names.ADMISSION_TOKEN)
    if not approved or not labels_of(trainjob).get(names.QUEUE_NAME_LABEL):
        return ""
    if multikueue_remote(trainjob):
        return ""
    current = newest_workload(workloads)
    if current is None:
        return f"it has no Workload; the gate approved admission {approved}"
    token = admission_token(current)
    if token != approved:
        return (f"its Workload's admission {token} is not the one dispatch's gate approved "
                f"({approved}): admitted without the check")
    return ""


def admission_token(wl: Obj) -> str:
    """``<workload uid>/<evictions>``: names one admission of one Workload."""
    return f"{meta(wl).get('uid', '')}/{eviction_count(wl)}"


@dataclass(frozen=True, slots=True)
class AdmissionPlan:
    """What to do to the TrainJob before the check goes Ready."""

    ok: bool
    reason: str = ""
    raise_a: bool = False
    count: int = 0
    """A after the plan (raised or not)."""
    patch: dict[str, Any] = field(default_factory=dict)
    stale: bool = False
    """The TrainJob records a newer admission than the Workload we judged: judge again."""


def plan_admission(trainjob: Obj, token: str,
                   also: Mapping[str, str | None] | None = None, step: int = 1) -> AdmissionPlan:
    """Raise A by one unless this admission (``token``) or a newer one already raised it.

    Tokens of one Workload are ordered by their eviction count: a recorded token with a
    higher count than ``token`` means our Workload read is older than the TrainJob read,
    and raising would give one execution a second A (variant TOKENEQ of the model). The
    patch carries the TrainJob's resourceVersion, so it applies only to the TrainJob this
    plan was made from: a racing writer makes it fail with 409, never raise twice.
    ``also``: annotations written in the same patch (the approval's JobSet, core.execution);
    ``step``: by how much A rises (more than one when the JobSet was re-made, see
    :func:`dispatch_kubeflow.core.execution.raise_step`).
    """
    if not labels_of(trainjob).get(names.JOB_ID_LABEL):
        return AdmissionPlan(False, f"TrainJob has no {names.JOB_ID_LABEL} label: not dispatch's")
    annotations = annotations_of(trainjob)
    try:
        a = parse_count(annotations.get(names.ADMISSION_COUNT), names.ADMISSION_COUNT)
    except IdentityError as exc:
        return AdmissionPlan(False, f"malformed admission count: {exc}")
    recorded = annotations.get(names.ADMISSION_TOKEN)
    if recorded == token:
        return AdmissionPlan(True, "A was raised for this admission already", False, a)
    theirs, ours = token_parts(recorded), token_parts(token)
    if theirs is not None and ours is not None and theirs[0] == ours[0] \
            and theirs[1] > ours[1]:
        return AdmissionPlan(True, f"A was raised for a newer admission ({recorded})", False,
                             a, stale=True)
    return AdmissionPlan(True, "new admission", True, a + step,
                         raise_patch(trainjob, a + step, token, also))

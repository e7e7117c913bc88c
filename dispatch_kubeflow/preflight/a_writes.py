"""Proof 5b, who may write A: the execution's identity must be one nobody else can lower.

While the probe exists, two server-side dry-run patches of it: one of its A
(``dispatch.phpboyscout.uk/admission-count``) and one of another annotation. In Kueue mode
the first must be refused (403 Forbidden or 422 Invalid, about the probe) while the second
is admitted: ValidatingAdmissionPolicy ``dispatch-admission-count`` is in force, so only the
admission controller raises A. In plain mode the library raises A itself, so both must be
admitted.

The same policy guards the paths that would run a dispatch TrainJob past the gate: two more
dry-run patches of the probe, one taking its ``kueue.x-k8s.io/queue-name`` label off and one
resuming it (``spec.suspend: false``). In Kueue mode both must be refused (only Kueue,
Trainer and the controller may); in plain mode the library resumes what it admits, so the
resume must be admitted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import KubeAPI, Resource
from dispatch_kubeflow.kube.resources import TRAINJOB
from dispatch_kubeflow.model import CapabilityStatus
from dispatch_kubeflow.preflight.mode import Proofs
from dispatch_kubeflow.preflight.verdicts import no, unknown, yes

A_POLICY = "dispatch-admission-count"
"""The ValidatingAdmissionPolicy of deploy/admission/admission-count-policy.yaml."""
A_CONTROL_ANNOTATION = f"{names.DOMAIN}/preflight-probe"
"""Set by the control patch: an annotation anybody who may patch the probe may write."""
SELF_SUBJECT_REVIEW = Resource("authentication.k8s.io", "v1", "selfsubjectreviews",
                               "SelfSubjectReview", namespaced=False)
# How a ValidatingAdmissionPolicy denies: the reason its validation names (the shipped one
# says Forbidden), 422 Invalid when it names none (apiserver's validating dispatcher).
POLICY_DENIALS = frozenset({(403, "Forbidden"), (422, "Invalid")})


def a_binding(kueue: bool) -> str:
    """The policy's binding, and its ConfigMap of writers in dispatch-system, for the mode."""
    return f"{A_POLICY}-{'kueue' if kueue else 'plain'}"


def a_write_patch() -> dict[str, Any]:
    """The dry-run merge patch that raises the probe's A (never admitted, so 0) to 1 (pure)."""
    return {"metadata": {"annotations": {names.ADMISSION_COUNT: "1"}}}


def control_patch() -> dict[str, Any]:
    """The dry-run merge patch of another annotation: the policy must admit it (pure)."""
    return {"metadata": {"annotations": {A_CONTROL_ANNOTATION: "dry-run"}}}


def unqueue_patch() -> dict[str, Any]:
    """The dry-run merge patch that takes the probe out of Kueue's hands (pure)."""
    return {"metadata": {"labels": {names.QUEUE_NAME_LABEL: None}}}


def resume_patch() -> dict[str, Any]:
    """The dry-run merge patch that resumes the (suspended) probe (pure)."""
    return {"spec": {"suspend": False}}


def refused_by_policy(exc: errors.KubeError, probe_name: str) -> bool:
    """Whether a refusal has the shape of an admission policy's denial of the probe (pure).

    Decided from the Status (code, reason, details), never its message: a policy's denial
    names the resource (``trainjobs``) and the object, as RBAC's does, which the control
    patch, admitted, rules out; a webhook's or the CRD schema's 422 names the kind instead.
    """
    if (exc.status, exc.reason) not in POLICY_DENIALS:
        return False
    details = exc.body.get("details") or {}
    return (details.get("group") == names.TRAINER_GROUP and details.get("kind") == "trainjobs"
            and details.get("name") == probe_name)


def judge_kueue_a_writes(probe: str, who: str, a_write: errors.KubeError | None,
                         control: errors.KubeError | None) -> CapabilityStatus:
    """Kueue mode: only the admission controller may raise A, so the A patch must be
    refused by the policy and the control patch admitted (pure).

    ``a_write`` and ``control`` are the refusals of the patches (None: admitted).
    """
    a = names.ADMISSION_COUNT
    params = f"ConfigMap {names.CONTROLLER_NAMESPACE}/{a_binding(True)}"
    if control is not None:
        return _unproven(probe, control)
    if a_write is None:
        return no(f"{who} may set {a} on probe TrainJob {probe} (a dry-run patch was "
                  "admitted), so an execution's identity could be lowered: "
                  f"ValidatingAdmissionPolicy {A_POLICY} with binding {a_binding(True)} "
                  "is not in force. Apply deploy/admission (admission-count-policy.yaml), "
                  f"and list only the admission controller in {params}")
    if refused_by_policy(a_write, probe):
        return yes(f"only the admission controller may raise A: a dry-run patch of {a} "
                   f"on probe TrainJob {probe} by {who} was refused ({a_write.status} "
                   f"{a_write.reason}) and one of another annotation admitted: "
                   f"ValidatingAdmissionPolicy {A_POLICY} is in force")
    return unknown(f"could not prove who may write A: a dry-run patch of {a} on probe "
                   f"TrainJob {probe} was refused, but not as ValidatingAdmissionPolicy "
                   f"{A_POLICY} refuses (403 Forbidden or 422 Invalid, about the probe): "
                   f"{a_write}")


def judge_plain_a_writes(probe: str, who: str, a_write: errors.KubeError | None,
                         control: errors.KubeError | None) -> CapabilityStatus:
    """Plain mode: the library raises A itself, so both patches must be admitted (pure)."""
    a = names.ADMISSION_COUNT
    params = f"ConfigMap {names.CONTROLLER_NAMESPACE}/{a_binding(False)}"
    if control is not None:
        return _unproven(probe, control)
    if a_write is None:
        return yes(f"plain mode: the library raises A itself, and {who} may: a dry-run patch "
                   f"of {a} on probe TrainJob {probe} was admitted. ValidatingAdmissionPolicy "
                   f"{A_POLICY} admits only the identities listed in {params}")
    return no(f"plain mode: the library raises A itself, but a dry-run patch of {a} on probe "
              f"TrainJob {probe} by {who} was refused{_list_me(a_write, probe, who)}")


def judge_kueue_guard(probe: str, who: str, unqueue: errors.KubeError | None,
                      resume: errors.KubeError | None) -> CapabilityStatus:
    """Kueue mode: only Kueue, Trainer and the controller may resume a dispatch TrainJob or
    take its queue label off, so both dry-run patches must be refused by the policy (pure)."""
    params = f"ConfigMap {names.CONTROLLER_NAMESPACE}/{a_binding(True)}"
    for what, exc in (("take the queue label off", unqueue), ("resume", resume)):
        if exc is None:
            return no(f"{who} may {what} probe TrainJob {probe} (a dry-run patch was "
                      "admitted), so a dispatch job could run past the readmission gate: "
                      f"ValidatingAdmissionPolicy {A_POLICY} is not in force, or {params} "
                      f"lists {who} (keys writers, resumers). Apply deploy/admission "
                      "(admission-count-policy.yaml) and list only Kueue, Trainer and the "
                      "admission controller there")
        if not refused_by_policy(exc, probe):
            return unknown(f"could not prove who may {what} a dispatch TrainJob: a dry-run "
                           f"patch of probe TrainJob {probe} was refused, but not as "
                           f"ValidatingAdmissionPolicy {A_POLICY} refuses: {exc}")
    return yes(f"nobody else may resume a dispatch TrainJob or take its queue label off: "
               f"dry-run patches doing so to probe TrainJob {probe} by {who} were refused "
               f"by ValidatingAdmissionPolicy {A_POLICY}")


def judge_plain_guard(probe: str, who: str, unqueue: errors.KubeError | None,
                      resume: errors.KubeError | None) -> CapabilityStatus:
    """Plain mode: the library resumes what it admits, so the resume must be admitted (a
    plain job has no queue label: what the unqueue patch met proves nothing here)."""
    if resume is None:
        return yes(f"plain mode: the library resumes the jobs it admits, and {who} may: a "
                   f"dry-run resume of probe TrainJob {probe} was admitted")
    return no(f"plain mode: the library resumes the jobs it admits, but a dry-run resume of "
              f"probe TrainJob {probe} by {who} was refused{_list_me(resume, probe, who)}")


def _list_me(exc: errors.KubeError, probe: str, who: str) -> str:
    """Plain mode: what to do about a refusal of the library's own write (pure)."""
    if not refused_by_policy(exc, probe):
        return f": {exc}"
    params = f"ConfigMap {names.CONTROLLER_NAMESPACE}/{a_binding(False)}"
    return (f" ({exc.status} {exc.reason}): add {who} to {params} (key writers) of "
            f"ValidatingAdmissionPolicy {A_POLICY}")


def _unproven(probe: str, control: errors.KubeError) -> CapabilityStatus:
    return unknown(f"could not prove who may write A: a dry-run patch of another "
                   f"annotation of probe TrainJob {probe} was refused: {control}")


async def _who_am_i(kube: KubeAPI) -> str:
    try:
        review = await kube.create(SELF_SUBJECT_REVIEW, {})
    except errors.KubeError:
        return "this identity"
    user = (review.get("status") or {}).get("userInfo") or {}
    return str(user.get("username") or "this identity")


async def _dry_run_patch(kube: KubeAPI, namespace: str, name: str,
                         patch: Mapping[str, Any]) -> errors.KubeError | None:
    try:
        # A dry run persists nothing, so it needs no precondition.
        await kube.patch(TRAINJOB, name, dict(patch), namespace, dry_run=True)
    except errors.KubeError as exc:
        return exc
    return None


async def check_a_writes(kube: KubeAPI, ns: str, probe_name: str,
                         proofs: Proofs) -> CapabilityStatus:
    """Who may write the probe's A (in Kueue mode only the controller, in plain mode we),
    and who may resume it or take its queue label off."""
    who, a_write, control, unqueue, resume = await asyncio.gather(
        _who_am_i(kube), _dry_run_patch(kube, ns, probe_name, a_write_patch()),
        _dry_run_patch(kube, ns, probe_name, control_patch()),
        _dry_run_patch(kube, ns, probe_name, unqueue_patch()),
        _dry_run_patch(kube, ns, probe_name, resume_patch()))
    writes = proofs.judge_a_writes(probe_name, who, a_write, control)
    if not writes.ok:
        return writes
    guard = proofs.judge_guard(probe_name, who, unqueue, resume)
    if not guard.ok:
        return guard
    return yes(f"{writes.reason}\n{guard.reason}")

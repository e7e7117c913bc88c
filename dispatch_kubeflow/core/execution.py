"""What makes a pod part of an approved execution: the last fence, at the pod.

An *execution* of a job is one run of its pods: the pods of one JobSet (its UID), one
admission count A and one JobSet restart count J. The readmission gate decides when a new
execution may begin (no pod of the previous one alive, then A rises); but pods are also made
on paths that never pass the gate — Trainer re-making a deleted JobSet under a Workload Kueue
still holds admitted, Kueue admitting once a ClusterQueue no longer lists the check, a user
unsuspending a TrainJob. So the pod webhook judges every dispatch pod at its creation by the
rule here, which both the controller and the library read:

* a pod is **alive** while it may still run or is still being torn down: any phase but
  ``Succeeded`` and ``Failed``, or any phase at all once it is being deleted (a pod in its
  TERM handler, or one whose containers ended on TERM and that is not gone yet: the gate
  has always waited for those to go). A finished pod nobody deletes — a rank that ended
  before a hold, which its suspended Job keeps — is not alive, and never blocks anything;
* the gate's approval names the JobSet the execution runs as: the raise of A records the
  JobSet's UID on the TrainJob (``dispatch.phpboyscout.uk/approved-jobset``), in the same
  fenced patch (:func:`approval_annotations`);
* a pod is admitted only when its JobSet is the approved one (a JobSet re-made since is a
  new execution, which the controller approves by raising A for it, :func:`plan_rebind`),
  no alive pod of the job belongs to another execution, and no alive pod of the job has the
  same rank (:func:`judge_pod`). The last rule is the checker's own (two pods of a job may
  overlap only as different ranks of one execution): it refuses the second pod of a rank
  whatever identity both would carry — a replacement made while the pod it replaces is still
  in its TERM handler, or a pod of an admission the gate never saw (a user unsuspending a
  held TrainJob, a ClusterQueue that stopped listing the check) beside the old one.

Pure: no I/O. The webhook (``admission.pod_identity``) reads the TrainJob and the job's pods
live for each pod it judges.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dispatch_kubeflow.core import hold, names
from dispatch_kubeflow.core.admission_count import unapproved_admission
from dispatch_kubeflow.core.identity import IdentityError, parse_count, split_attempt_id
from dispatch_kubeflow.core.objects import annotations_of, labels_of, meta

Obj = Mapping[str, Any]

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


def is_alive(pod: Obj) -> bool:
    """Whether the pod may still run or is still being torn down: not Succeeded or Failed,
    or being deleted (until it is gone). Stricter than "not finished" alone, which the model
    checks (verify/): a finished pod being deleted still counts, as it always did."""
    return (pod.get("status") or {}).get("phase") not in FINISHED_PHASES \
        or bool(meta(pod).get("deletionTimestamp"))


def alive(pods: Iterable[Obj]) -> list[Obj]:
    """The pods of ``pods`` that are alive (:func:`is_alive`)."""
    return [p for p in pods if is_alive(p)]


@dataclass(frozen=True, slots=True)
class Execution:
    """Which execution a pod belongs to. ``admissions`` is None when the pod carries no
    identity of ours (not admitted by the webhook: only such a pod lacks it)."""

    jobset_uid: str
    admissions: int | None
    restarts: int

    def describe(self) -> str:
        a = "?" if self.admissions is None else str(self.admissions)
        return f"JobSet {self.jobset_uid or '?'} A={a} J={self.restarts}"


def _env_value(pod: Obj, name: str) -> str | None:
    spec = pod.get("spec") or {}
    for field in ("containers", "initContainers"):
        for c in spec.get(field) or []:
            for e in c.get("env") or []:
                if e.get("name") == name:
                    value = e.get("value")
                    return str(value) if value is not None else None
    return None


def execution_of(pod: Obj) -> Execution:
    """The execution a pod that exists belongs to: its JobSet UID and J from JobSet's labels,
    A from the ``DISPATCH_ATTEMPT`` the webhook gave it."""
    a: int | None = None  # no identity of ours: never equal to an admitted pod's
    with contextlib.suppress(IdentityError):
        a = split_attempt_id(_env_value(pod, names.ENV_ATTEMPT) or "")[3]
    return Execution(jobset_uid_of(pod), a, _restarts(labels_of(pod)))


def _marked(pod: Obj, key: str) -> str:
    """A JobSet or Job controller key, from the pod's labels or else its annotations (both
    carry them)."""
    return str(labels_of(pod).get(key) or annotations_of(pod).get(key) or "")


def jobset_uid_of(pod: Obj) -> str:
    """The UID of the JobSet that made the pod."""
    return _marked(pod, names.JOBSET_UID_LABEL)


def approved_jobset(trainjob: Obj | None) -> str:
    """The UID of the JobSet the gate approved the current execution as ("" when none is
    recorded: never approved, or approved by a controller older than this rule)."""
    return str(annotations_of(trainjob).get(names.APPROVED_JOBSET) or "")


def approval_annotations(jobset_uid: str) -> dict[str, str | None]:
    """The annotations the raise of A writes beside A and the token."""
    return {names.APPROVED_JOBSET: jobset_uid}


@dataclass(frozen=True, slots=True)
class PodVerdict:
    """The webhook's judgement of one pod: admitted, or refused with a message for people."""

    allowed: bool
    reason: str = ""


def judge_pod(pod: Obj, trainjob: Obj, admissions: int, pods: Sequence[Obj], *,
              workloads: Sequence[Obj] = (), dry_run: bool = False) -> PodVerdict:
    """Whether ``pod`` (being created, for ``trainjob`` whose A is ``admissions``) is part of
    the execution the gate approved, with ``pods`` the job's pods that exist now.

    Refused: a pod of a job the gate never approved (A = 0); a pod of a held or suspended
    TrainJob; in Kueue mode, a pod of an admission the gate did not approve (``workloads``,
    the TrainJob's Workloads, :func:`~dispatch_kubeflow.core.admission_count.
    unapproved_admission`); a pod of a JobSet other than
    the approved one; a pod while an alive pod of another execution of the job, or of the
    same rank, is still there. A dry-run creates nothing, so there is nothing to fence: it
    passes, and shows the identity a pod would get (the preflight's injection proof).
    """
    if dry_run:
        return PodVerdict(True)
    labels = labels_of(pod)
    tj_name = str(meta(trainjob).get("name") or "")
    job = f"job {labels.get(names.JOB_ID_LABEL)} (TrainJob {tj_name})"
    jobset = jobset_uid_of(pod)
    approved = approved_jobset(trainjob)
    if admissions == 0:
        return PodVerdict(False, f"{job} was never admitted through dispatch's gate "
                                 "(admission count A = 0): no pod of it may run yet")
    # The pod's submission and attempt are the ones its identity will say: they must be its
    # TrainJob's (read live). A pod built from another attempt's runtime copy of the same
    # name (a stale copy in Trainer's cache, after StopJob and a new attempt) would run
    # at an earlier attempt's epoch; the fault campaign saw it (seed 1865, mix 2).
    for key in (names.SUBMISSION_LABEL, names.ATTEMPT_LABEL):
        want = labels_of(trainjob).get(key)
        if want and labels.get(key) != want:
            return PodVerdict(False, f"{job}: the pod's {key}={labels.get(key)!r} is not its "
                                     f"TrainJob's {want!r} (made from another attempt's "
                                     "runtime copy): no pod may run with an identity its "
                                     "TrainJob does not have")
    # A held or suspended job makes no new pod: its Job may still be creating the ranks it
    # had not made yet when the hold (or Kueue's eviction) came, and they would start after
    # Inspect said held.
    held = hold.instance(trainjob)
    if held:
        return PodVerdict(False, f"{job} is held (hold instance {held}): no pod of it may "
                                 "start until it is released")
    if ((trainjob.get("spec") or {}).get("suspend")):
        return PodVerdict(False, f"{job}: its TrainJob is suspended (a hold or Kueue's "
                                 "eviction): no pod of it may start until it resumes")
    unapproved = unapproved_admission(trainjob, workloads)
    if unapproved:
        return PodVerdict(False, f"{job}: {unapproved}; no pod of it may run until the gate "
                                 "approves an admission")
    if approved and jobset != approved:
        return PodVerdict(False, f"{job}: the gate approved JobSet {approved}, this pod is of "
                                 f"JobSet {jobset or '(none)'}; waiting for dispatch-admission "
                                 "to approve the new JobSet once the old one's pods are gone")
    mine = Execution(jobset, admissions, _restarts(labels))
    rank = rank_of(pod)
    others = [p for p in alive(pods) if execution_of(p) != mine or rank_of(p) == rank]
    if others:
        names_ = tuple(sorted(str(meta(p).get("name") or "") for p in others))
        shown = ", ".join(names_[:3]) + (", ..." if len(names_) > 3 else "")
        first = execution_of(others[0]).describe()
        return PodVerdict(False, f"{job}: waiting for {len(others)} pods of another execution "
                                 f"or of the same rank to go ({shown}; {first}) before this "
                                 f"pod of {mine.describe()} may run: two pods of a job run at "
                                 "once only as different ranks of one execution")
    return PodVerdict(True)


def rank_of(pod: Obj) -> tuple[str, str, str]:
    """Which rank a pod runs: its replicated job, Job index and completion index (JobSet's
    and the Job controller's labels; annotations where a label is missing)."""
    return (_marked(pod, names.REPLICATED_JOB_LABEL), _marked(pod, names.JOB_INDEX_LABEL),
            _marked(pod, names.COMPLETION_INDEX_LABEL))


def _restarts(labels: Mapping[str, str]) -> int:
    """J from JobSet's label; -1 when unreadable, never equal to a readable J, so such a pod
    counts as another execution."""
    try:
        return parse_count(labels.get(names.RESTART_ATTEMPT_LABEL), names.RESTART_ATTEMPT_LABEL)
    except IdentityError:
        return -1


def max_restarts(jobset: Obj | None) -> int:
    """The most restarts JobSet makes of this JobSet (``failurePolicy.maxRestarts``; 0
    without a failure policy): the highest J any of its pods can carry."""
    policy = ((jobset or {}).get("spec") or {}).get("failurePolicy") or {}
    try:
        return max(0, int(policy.get("maxRestarts") or 0))
    except (TypeError, ValueError):
        return 0


UNBOUNDED_RESTARTS = "RestartJobSetAndIgnoreMaxRestarts"
"""JobSet's failure-policy action whose restarts do not count towards maxRestarts."""


def unbounded_restarts(jobset_spec: Obj | None) -> str:
    """The field (under the JobSet spec) that lets J grow past ``maxRestarts`` ("" when
    none does): a failure-policy rule whose action is ``RestartJobSetAndIgnoreMaxRestarts``.
    Such a JobSet's J has no bound, so no raise of A is known to pass every J its old
    execution reached (:func:`raise_step`), and R = A + J may outgrow the epoch's span."""
    rules = (((jobset_spec or {}).get("failurePolicy") or {}).get("rules")) or []
    for i, rule in enumerate(rules):
        if isinstance(rule, Mapping) and rule.get("action") == UNBOUNDED_RESTARTS:
            return f"failurePolicy.rules[{i}].action"
    return ""


def raise_step(trainjob: Obj, jobset_uid: str, jobset: Obj | None) -> int:
    """By how much A rises when the gate approves an execution as ``jobset_uid``.

    One, while the JobSet is the one approved before (its J goes on counting, so R = A + J
    rises). A JobSet re-made since starts again at J = 0: raising A by one would give its
    first execution (A + 1, J = 0) the epoch an execution of the old JobSet already had
    after a restart (A, J = 1) — found by the model (verify/, variant ``rebindbyone``). So A
    rises past every J the old JobSet could have reached: by 1 + its maxRestarts, the same
    runtime's as the new one's (``jobset``, read live)."""
    approved = approved_jobset(trainjob)
    if not approved or approved == jobset_uid:
        return 1
    return 1 + max_restarts(jobset)


@dataclass(frozen=True, slots=True)
class RebindPlan:
    """A new execution of an admitted job as a JobSet re-made under it: raise A and record
    the new JobSet, once no alive pod of another execution is left."""

    needed: bool
    reason: str = ""
    patch: dict[str, Any] | None = None
    count: int = 0


def plan_rebind(trainjob: Obj, admissions: int, jobset: Obj, others_alive: int) -> RebindPlan:
    """Whether the TrainJob's current JobSet (``jobset``, read live) is not the one the gate
    approved, and the merge patch that approves it: A raised past every identity of the old
    JobSet (:func:`raise_step`) and the new JobSet's UID, on this version of
    the TrainJob only (its resourceVersion: a concurrent writer makes it fail with 409, so
    two replicas never raise A twice for one JobSet). The token is left as it is: the
    Workload's admission has not changed."""
    approved = approved_jobset(trainjob)
    jobset_uid = str(meta(jobset).get("uid") or "")
    if not jobset_uid or not approved or approved == jobset_uid:
        return RebindPlan(False, "the approved JobSet is the current one")
    if others_alive:
        return RebindPlan(False, f"JobSet {jobset_uid} replaces the approved {approved}; "
                                 f"waiting for {others_alive} pods of the previous execution "
                                 "to go")
    count = admissions + raise_step(trainjob, jobset_uid, jobset)
    patch = {"metadata": {"resourceVersion": meta(trainjob).get("resourceVersion"),
                          "annotations": {names.ADMISSION_COUNT: str(count),
                                          **approval_annotations(jobset_uid)}}}
    return RebindPlan(True, f"JobSet {jobset_uid} replaces the approved {approved}", patch,
                      count)

"""Inspect's state: a pure function of the TrainJob, its Workload and its pods.

:func:`observe` reads nothing but its arguments (and ``now``), so the table below is the
whole rule. ``pods`` are the pods that still exist of the job's submission (terminating
ones included), as selected by ``jobset.sigs.k8s.io/jobset-name=<TrainJob name>``. Kueue
mode is recognised from the TrainJob itself (its ``kueue.x-k8s.io/queue-name`` label);
plain mode has no Workload. The first row that matches wins:

=====  =================================================================  ==========  ====
row    condition                                                          state       hold
=====  =================================================================  ==========  ====
1      no TrainJob                                                        gone        0
2      TrainJob has a deletionTimestamp                                   gone        0
3      TrainJob condition ``Complete=True``                               succeeded   0
4      TrainJob condition ``Failed=True``                                 failed      0
5      dispatch's hold annotations (Kueue: on the Workload, else on the   holding if  n
       TrainJob; plain: on the TrainJob), hold-instance n                 alive pods
                                                                          or not sus-
                                                                          pended, else
                                                                          held
6      Kueue: Workload ``spec.active=false`` without dispatch's hold;     holding /   0
       plain: ``spec.suspend=true`` after the job was opened (A > 0)      held (as 5)
       without dispatch's hold — someone else stopped it (kueuectl
       stop workload, a patch); the cause names the object and how to
       resume it
7      Kueue: ``kueue.x-k8s.io/admission-gated-by`` on the TrainJob       gated       0
       non-empty; plain: ``spec.suspend=true`` and never opened (A = 0)
8      Kueue: no Workload yet                                             queued      0
9      Kueue: Workload ``Evicted=True``                                   queued      0
10     Kueue: ``Admitted=True`` and the TrainJob still suspended          admitting   0
11     Kueue: ``Admitted=True``                                           running     0
12     Kueue: ``QuotaReserved=True`` (admission checks not all Ready)     admitting   0
13     Kueue: otherwise (waiting for quota)                               queued      0
14     plain: not suspended                                               running     0
=====  =================================================================  ==========  ====

The cause's ``detail`` explains for people: empty for dispatch's own gate, ``gated by
<their gates>`` for anybody else's gate (even when dispatch's is there too), the messages
of admission checks that are not Ready while admitting, Kueue's QuotaReserved message
while queued, the hold's who and reason, how many pods are still there while holding,
and while running how many pods run (``no pod running yet`` between admission and the
first pod's start; ``Observation.pods_running`` carries the count).

:func:`observe_listed` applies the same table to many jobs at once, from objects listed
once per kind (``Backend.jobs``), so listing a namespace costs one request per kind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from dispatch_kubeflow.core import hold, names
from dispatch_kubeflow.core.admission_count import admissions, newest_workload
from dispatch_kubeflow.core.execution import alive
from dispatch_kubeflow.core.identity import IdentityError, parse_count
from dispatch_kubeflow.core.objects import annotations_of, condition, is_true, labels_of, meta
from dispatch_kubeflow.core.times import parse_time
from dispatch_kubeflow.model import Cause, ObjectState, Observation

Obj = Mapping[str, Any]
T = TypeVar("T")


# What :func:`observe` reads of each object besides its metadata, as dotted paths: all a
# cache of objects it judges must keep (dispatch_kubeflow.informer's ``Feed.keep``; the rest,
# a pod template mostly, is most of each object). tests/unit/test_state.py records every
# field observe reads and fails on one not listed here.
TRAINJOB_READS = ("spec.suspend", "status.conditions")
WORKLOAD_READS = ("spec.active", "status.conditions", "status.admissionChecks",
                  "status.clusterName")
POD_READS = ("status.phase",)


# --- small readers of the job's objects (the generic ones are dispatch_kubeflow.core's) -----


def parse_gates(value: str | None) -> list[str]:
    """Kueue's comma-separated admission gates (spaces around names ignored, as Kueue does)."""
    if not value or not value.strip():
        return []
    return [g.strip() for g in value.split(",")]


def gates(trainjob: Obj | None) -> list[str]:
    return parse_gates(annotations_of(trainjob).get(names.ADMISSION_GATED_BY))


def is_kueue(trainjob: Obj | None) -> bool:
    return bool(labels_of(trainjob).get(names.QUEUE_NAME_LABEL))


def suspended(trainjob: Obj | None) -> bool:
    return bool(((trainjob or {}).get("spec") or {}).get("suspend"))


def restarts(pod: Obj) -> int:
    """J of a pod: its JobSet restart-attempt label."""
    try:
        return parse_count(labels_of(pod).get(names.RESTART_ATTEMPT_LABEL), "restart-attempt")
    except IdentityError:
        return 0


# --- the table ---------------------------------------------------------------------------------


def observe(trainjob: Obj | None, workload: Obj | None, pods: Sequence[Obj]) -> Observation:
    """The job's state by the table in this module's docstring."""
    n_pods = len(pods)
    # A finished rank (its suspended Job keeps it) is no pod to wait for: held, not holding.
    n_alive = len(alive(pods))
    running = running_pods(pods)
    j = max((restarts(p) for p in pods), default=0)
    if trainjob is None:
        return Observation(ObjectState.GONE, Cause(_left("TrainJob not found", n_pods), "NotFound"),
                           pods=n_pods, restarts=j, pods_running=running)
    a = admissions(trainjob)

    cluster = dispatched_to(workload)

    def obs(state: ObjectState, detail: str = "", reason: str = "", hold: int = 0,
            until: datetime | None = None) -> Observation:
        return Observation(state, Cause(detail, reason), hold_instance=hold, hold_until=until,
                           admissions=a, restarts=j, pods=n_pods, pods_running=running,
                           cluster=cluster)

    if meta(trainjob).get("deletionTimestamp"):
        return obs(ObjectState.GONE, _left("TrainJob is being deleted", n_pods), "Deleting")
    for kind, state in (("Complete", ObjectState.SUCCEEDED), ("Failed", ObjectState.FAILED)):
        cond = condition(trainjob, kind)
        if cond is not None and cond.get("status") == "True":
            return obs(state, str(cond.get("message") or ""), str(cond.get("reason") or kind))

    kueue = is_kueue(trainjob)
    # Kueue mode: the Workload's record, else the TrainJob's (it outlives a re-made Workload).
    holder = hold.kueue_holder(trainjob, workload) if kueue else trainjob
    record = hold.record(holder)
    # Held once nothing runs and nothing more can start: no alive pod, and the TrainJob
    # suspended (Kueue suspends it when it evicts the deactivated Workload; until then its
    # Job may still be making pods).
    stopping = ObjectState.HOLDING if n_alive or not suspended(trainjob) else ObjectState.HELD
    if record is not None:
        who = record.get(names.HOLD_WHO, "")
        why = record.get(names.HOLD_REASON, "")
        detail = f"held by {who}" if who else "held"
        if why:
            detail += f": {why}"
        if n_alive:
            detail += f"; waiting for {n_alive} pods to go"
        elif not suspended(trainjob):
            detail += "; waiting for the TrainJob to be suspended"
        return obs(stopping, detail, "Held", hold=hold.instance(holder),
                   until=parse_time(record.get(names.HOLD_UNTIL)))

    # Someone stopped it with Kueue's or Kubernetes' own tools (kueuectl stop workload, a
    # patch): dispatch never undoes that, so the cause names the object and how to resume.
    if kueue and workload is not None and (workload.get("spec") or {}).get("active") is False:
        wl = meta(workload).get("name", "")
        detail = (f"stopped outside dispatch: Workload {wl} has spec.active=false; "
                  f"kueuectl resume workload {wl} runs it again")
        return obs(stopping, _left(detail, n_alive), "Deactivated")
    if not kueue and suspended(trainjob) and a > 0:
        detail = ("stopped outside dispatch: TrainJob spec.suspend=true; setting it false "
                  "runs it again")
        return obs(stopping, _left(detail, n_alive), "Suspended")

    if kueue:
        gated_by = gates(trainjob)
        if gated_by:
            theirs = [g for g in gated_by if g != names.GATE]
            return obs(ObjectState.GATED, f"gated by {','.join(theirs)}" if theirs else "",
                       "AdmissionGated")
        return _kueue_state(trainjob, workload, pods, obs)
    if suspended(trainjob):
        return obs(ObjectState.GATED, "", "Suspended")
    return obs(ObjectState.RUNNING, _pods_running(pods), "Running")


def _kueue_state(trainjob: Obj, workload: Obj | None, pods: Sequence[Obj],
                 obs: Callable[..., Observation]) -> Observation:
    if workload is None:
        return obs(ObjectState.QUEUED, "waiting for Kueue to create the Workload", "NoWorkload")
    evicted = condition(workload, "Evicted")
    if evicted is not None and evicted.get("status") == "True":
        detail = f"evicted ({evicted.get('reason', '')}): {evicted.get('message', '')}"
        return obs(ObjectState.QUEUED, detail.rstrip(": "), "Evicted")
    if is_true(workload, "Admitted"):
        if suspended(trainjob):
            return obs(ObjectState.ADMITTING, "admitted; waiting for the TrainJob to resume",
                       "Admitted")
        return obs(ObjectState.RUNNING, _pods_running(pods), "Admitted")
    if is_true(workload, "QuotaReserved"):
        return obs(ObjectState.ADMITTING, _checks_waiting(workload), "QuotaReserved")
    cond = condition(workload, "QuotaReserved") or {}
    return obs(ObjectState.QUEUED, str(cond.get("message") or ""),
               str(cond.get("reason") or "Pending"))


def _checks_waiting(workload: Obj) -> str:
    waiting = []
    for check in (workload.get("status") or {}).get("admissionChecks") or []:
        if check.get("state") != "Ready":
            msg = check.get("message") or str(check.get("state") or "Pending")
            waiting.append(f"{check.get('name')}: {msg}")
    return "; ".join(waiting)


def running_pods(pods: Sequence[Obj]) -> int:
    """How many of ``pods`` are in phase Running (and not being deleted)."""
    return sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running"
               and not meta(p).get("deletionTimestamp"))


def _pods_running(pods: Sequence[Obj]) -> str:
    running = running_pods(pods)
    if not running:
        # Admitted (or unsuspended), but nothing runs yet: say so rather than "running".
        return f"no pod running yet ({len(pods)} starting)" if pods else "no pod running yet"
    return f"{running} of {len(pods)} pods running"


def dispatched_to(workload: Obj | None) -> str:
    """MultiKueue: the worker the Workload was dispatched to, its ``status.clusterName`` (""
    when none, and in any other mode)."""
    return str(((workload or {}).get("status") or {}).get("clusterName") or "")


def pods_where(workload: Obj | None, workers: Mapping[str, T]) -> Mapping[str, T]:
    """Of MultiKueue's ``workers`` (by MultiKueueCluster name), those whose pods count for the
    job of ``workload``: the worker its ``status.clusterName`` names, else every one — not
    dispatched, or no longer (evicted: MultiKueue clears the name while the last
    execution's pods may still be going), or to a worker not among them — so that nothing
    says held while a pod is left anywhere. Inspect reads there, and a listing counts there."""
    cluster = dispatched_to(workload)
    if cluster in workers:
        return {cluster: workers[cluster]}
    return workers


def _by_jobset(pods: Iterable[Obj]) -> dict[str, list[Obj]]:
    out: dict[str, list[Obj]] = {}
    for p in pods:
        name = labels_of(p).get(names.JOBSET_NAME_LABEL)
        if name:
            out.setdefault(name, []).append(p)
    return out


def observe_listed(trainjobs: Iterable[Obj], workloads: Iterable[Obj],
                   pods: Iterable[Obj], worker_pods: Mapping[str, Iterable[Obj]] | None = None
                   ) -> dict[str, Observation]:
    """:func:`observe` for every TrainJob of one namespace, by TrainJob name (pure).

    ``workloads`` and ``pods`` are whole lists of the namespace (any selection that holds
    the jobs' own): each Workload goes to the TrainJob whose UID its
    ``kueue.x-k8s.io/job-uid`` label names, each pod to the TrainJob its
    ``jobset.sigs.k8s.io/jobset-name`` label names, the same selection :func:`observe`'s
    callers make per job. ``worker_pods`` (MultiKueue mode): each worker's pods of the
    namespace, counted for a job where :func:`pods_where` says, as Inspect reads them.
    """
    by_uid: dict[str, list[Obj]] = {}
    for w in workloads:
        uid = labels_of(w).get(names.KUEUE_JOB_UID_LABEL)
        if uid:
            by_uid.setdefault(uid, []).append(w)
    by_jobset = _by_jobset(pods)
    in_worker = {c: _by_jobset(ps) for c, ps in (worker_pods or {}).items()}
    out: dict[str, Observation] = {}
    for tj in trainjobs:
        m = meta(tj)
        name = str(m.get("name", ""))
        workload = newest_workload(by_uid.get(str(m.get("uid", "")), ())) \
            if is_kueue(tj) else None
        mine = list(by_jobset.get(name, []))
        for there in pods_where(workload, in_worker).values():
            mine += there.get(name, [])
        out[name] = observe(tj, workload, mine)
    return out


def _left(detail: str, n_pods: int) -> str:
    return f"{detail}; {n_pods} pods still there" if n_pods else detail

"""The readmission's decision about one Workload, judged from the objects alone (pure).

:func:`decide` says what to do with a Workload (wait, approve, rebind, put a hold back, warn
that its queue dropped the check, or nothing); :func:`check_apply` is the one body that
writes our check's entry, fenced by the resourceVersion of the Workload judged. The I/O
that reads the objects and carries a decision out is :mod:`admission.readmission`; the
admission count rules both sides read are in :mod:`dispatch_kubeflow.core.admission_count`
and :mod:`dispatch_kubeflow.core.execution`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from admission.intake import Obj
from dispatch_kubeflow.core import hold, names
from dispatch_kubeflow.core.admission_count import admission_token
from dispatch_kubeflow.core.execution import approved_jobset
from dispatch_kubeflow.core.kueue import trainjob_of
from dispatch_kubeflow.core.objects import (
    annotations_of,
    condition,
    is_true,
    labels_of,
)
from dispatch_kubeflow.core.times import format_time, parse_time
from dispatch_kubeflow.kube.resources import WORKLOAD

PENDING, READY = "Pending", "Ready"

def waiting_message(n: int) -> str:
    return f"waiting for {n} pods of the previous execution to go"


def ready_message(a: int) -> str:
    return f"no pod of the previous execution is left; admission count A = {a}"


def unguarded_message(cluster_queue: str) -> str:
    return (f"ClusterQueue {cluster_queue} does not list dispatch's admission check: Kueue "
            "admits this dispatch job without the readmission gate (A is not raised). The pod "
            "webhook still refuses a pod beside an alive pod of another execution or of the "
            "same rank; list the check again to restore the gate")


def no_jobset_message(trainjob: str) -> str:
    return f"waiting for Trainer to make JobSet {trainjob}, which the approval names"


REMOTE_HERE = ("this TrainJob was put here by a manager's MultiKueue: its admission and its A "
               "are the manager's, approved by the manager's dispatch-admission, so this "
               "cluster's never approves it; a worker's ClusterQueue for MultiKueue must not "
               "list dispatch's check (docs/multikueue-fence.md)")


def check_entry(wl: Obj, check_names: frozenset[str]) -> Obj | None:
    for c in (wl.get("status") or {}).get("admissionChecks") or []:
        if c.get("name") in check_names:
            return dict(c)
    return None


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with one Workload, judged from the objects.

    ``ignore``: not ours (no check of ours on it). ``skip``: ours but unusable; log why.
    ``idle``: ours, nothing to do now. ``wait``: old pods remain (or the JobSet the approval
    must name is not there yet). ``approve``: raise A (if the token says so) and set the
    check Ready. ``rebind``: admitted, but the TrainJob's JobSet is not the one approved (it
    was re-made): raise A for it once the old execution's pods are gone (core.execution).
    ``unguarded``: a dispatch job's Workload has quota reserved with no check of ours on it
    (its ClusterQueue stopped listing the check): Kueue admits it without the gate; say so.
    ``hold``: the TrainJob records a hold its Workload does not carry (the Workload was
    re-made under the hold): put the hold back on it (core.hold).
    """

    kind: Literal["ignore", "skip", "idle", "wait", "approve", "rebind", "unguarded", "hold"]
    reason: str = ""
    check: str = ""
    trainjob: str = ""
    pods: int = 0
    message: str = ""
    write: bool = False
    """For ``wait``: whether the check's message must change."""


def decide(wl: Obj, *, check_names: frozenset[str], cluster_queues: Mapping[str, frozenset[str]],
           pods_left: int, jobset_uid: str | None, trainjob: Obj | None = None,
           waiting: str | None = None) -> Decision:
    """Judge a Workload. ``cluster_queues`` maps a ClusterQueue to the checks it lists;
    ``pods_left`` counts what is left of the job's previous executions (its alive pods; or,
    for a job MultiKueue runs in worker clusters, the workers not proven free of them), and
    ``waiting`` says so for people (default: :func:`waiting_message`); ``jobset_uid`` (the
    UID of the TrainJob's JobSet as indexed, None when none is) and ``trainjob`` (as
    indexed) are read only to notice a JobSet re-made under an admitted Workload."""
    entry = check_entry(wl, check_names)
    if entry is None:
        cq = str(((wl.get("status") or {}).get("admission") or {}).get("clusterQueue") or "")
        # Only once the ClusterQueue (as indexed) lists none of our checks: right after the
        # reservation Kueue may not have added our entry yet.
        if trainjob is not None and labels_of(trainjob).get(names.JOB_ID_LABEL) \
                and is_true(wl, "QuotaReserved") and cq in cluster_queues \
                and not cluster_queues[cq] & check_names:
            return Decision("unguarded", unguarded_message(cq), trainjob=trainjob_of(wl) or "")
        return Decision("ignore", "no check of ours on it")
    check = str(entry["name"])
    tj = trainjob_of(wl)
    if tj is None:
        return Decision("skip", "not owned by a TrainJob", check=check)
    # A held job is never approved, whatever its Workload says: the hold outlives a
    # Workload re-made under it (core.hold). Before the rebind and the approval.
    held = hold.instance(hold.of_trainjob(wl, trainjob))
    if held:
        if hold.lacks_hold(trainjob, wl):
            return Decision("hold", f"TrainJob {tj} is held (instance {held}) and its "
                            "Workload is not", check=check, trainjob=tj)
        return Decision("idle", f"TrainJob {tj} is held (instance {held})", check=check,
                        trainjob=tj)
    if entry.get("state") == READY and _rebound(wl, trainjob, jobset_uid):
        return Decision("rebind", f"JobSet {jobset_uid} is not the approved "
                        f"{approved_jobset(trainjob)}", check=check, trainjob=tj)
    if entry.get("state") != PENDING:
        return Decision("idle", f"check is {entry.get('state')}", check=check, trainjob=tj)
    if (wl.get("spec") or {}).get("active") is False:
        return Decision("idle", "Workload is deactivated", check=check, trainjob=tj)
    if not is_true(wl, "QuotaReserved"):
        return Decision("idle", "quota not reserved", check=check, trainjob=tj)
    if is_true(wl, "Evicted"):
        # Kueue keeps QuotaReserved while it tears an evicted reservation down (until the
        # job is stopped) and sets Evicted=False with the next reservation. Approving in
        # between would leave the check Ready for that next reservation, admitted at once,
        # while the torn-down execution's late pods get the new A (found by the model,
        # verify/readmission.pml, variant NOEVICTGUARD).
        return Decision("idle", "Workload is being evicted", check=check, trainjob=tj)
    cq = str(((wl.get("status") or {}).get("admission") or {}).get("clusterQueue") or "")
    if not cq:
        return Decision("skip", "quota reserved but status.admission names no ClusterQueue",
                        check=check, trainjob=tj)
    if cq not in cluster_queues:
        return Decision("skip", f"ClusterQueue {cq} is unknown", check=check, trainjob=tj)
    if check not in cluster_queues[cq]:
        return Decision("skip", f"ClusterQueue {cq} does not list check {check}",
                        check=check, trainjob=tj)
    if pods_left > 0:
        msg = waiting or waiting_message(pods_left)
        return Decision("wait", msg, check=check, trainjob=tj, pods=pods_left, message=msg,
                        write=entry.get("message") != msg)
    return Decision("approve", "no pod of the previous execution is left", check=check,
                    trainjob=tj)


def _rebound(wl: Obj, trainjob: Obj | None, jobset_uid: str | None) -> bool:
    """The Workload's admission is the one the TrainJob's A was raised for, it is admitted
    and running, and the TrainJob's JobSet is not the one that admission approved."""
    if trainjob is None or not jobset_uid:
        return False
    approved = approved_jobset(trainjob)
    if not approved or approved == jobset_uid:
        return False
    if (wl.get("spec") or {}).get("active") is False or is_true(wl, "Evicted") \
            or not is_true(wl, "Admitted"):
        return False
    return annotations_of(trainjob).get(names.ADMISSION_TOKEN) == admission_token(wl)


def check_apply(wl: Obj, check: str, state: str, message: str, now: datetime, *,
                fenced: bool = True) -> Obj:
    """The server-side apply body that sets only our check's entry.

    lastTransitionTime moves only when the state changes (Kueue's own rule). The body
    carries the resourceVersion of ``wl``, the Workload version the decision was judged
    from: the API server applies it only to that version and answers 409 otherwise. That is
    the fence leader election cannot give (client-go: "does not guarantee that only one
    client is acting as a leader"): a leader that stalled between confirming its Lease and
    this write, while another judged, approved and the job was held and released, writes
    nothing. ``fenced=False`` exists only for the test that shows the stale write.
    """
    entry = check_entry(wl, frozenset({check})) or {}
    ltt = entry.get("lastTransitionTime")
    if entry.get("state") != state or not ltt:
        ltt = format_time(now)
    meta = wl.get("metadata") or {}
    return {
        "apiVersion": WORKLOAD.api_version,
        "kind": WORKLOAD.kind,
        "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"),
                     **({"resourceVersion": meta.get("resourceVersion")} if fenced else {})},
        "status": {"admissionChecks": [
            {"name": check, "state": state, "message": message, "lastTransitionTime": ltt},
        ]},
    }


def quota_reserved_at(wl: Obj) -> datetime | None:
    return parse_time((condition(wl, "QuotaReserved") or {}).get("lastTransitionTime"))

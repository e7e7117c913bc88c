"""The readmission decision table (pure: no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from admission.decision import check_apply, decide, waiting_message
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.admission_count import admission_token, eviction_count, plan_admission

CHECKS = frozenset({"dispatch-admission"})
CQS = {"cq": frozenset({"dispatch-admission"}), "other": frozenset({"x"})}


def workload(*, state: str = "Pending", reserved: bool = True, active: bool | None = None,
             owner: str | None = "dj-a-s1", cq: str = "cq", check: str = "dispatch-admission",
             message: str = "", evictions: list[int] | None = None,
             evicted: bool | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "trainjob-dj-a-s1-abcde", "namespace": "ns", "uid": "u1",
                            "resourceVersion": "4711"}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "trainer.kubeflow.org/v1alpha1",
                                    "kind": "TrainJob", "name": owner, "controller": True,
                                    "uid": "t1"}]
    status: dict[str, Any] = {
        "admissionChecks": [{"name": check, "state": state, "message": message,
                             "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "conditions": [{"type": "QuotaReserved", "status": "True" if reserved else "False",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    }
    if reserved:
        status["admission"] = {"clusterQueue": cq}
    if evicted is not None:
        status["conditions"].append({"type": "Evicted", "status": str(evicted),
                                     "reason": "Preempted" if evicted else "QuotaReserved"})
    if evictions:
        status["schedulingStats"] = {"evictions": [
            {"reason": f"r{i}", "underlyingCause": "", "count": n}
            for i, n in enumerate(evictions)]}
    spec: dict[str, Any] = {"queueName": "lq"}
    if active is not None:
        spec["active"] = active
    return {"metadata": meta, "spec": spec, "status": status}


@pytest.mark.parametrize(("wl", "pods", "kind"), [
    (workload(), 0, "approve"),
    (workload(), 2, "wait"),
    (workload(check="someone-else"), 0, "ignore"),
    (workload(state="Ready"), 0, "idle"),
    (workload(state="Retry"), 0, "idle"),
    (workload(reserved=False), 0, "idle"),
    (workload(active=False), 0, "idle"),
    (workload(active=True), 0, "approve"),
    (workload(evicted=True), 0, "idle"),  # Kueue is tearing this reservation down
    (workload(evicted=False), 0, "approve"),  # reserved again after an eviction
    (workload(owner=None), 0, "skip"),
    (workload(cq="missing"), 0, "skip"),
    (workload(cq="other"), 0, "skip"),
])
def test_decision_table(wl: dict[str, Any], pods: int, kind: str) -> None:
    assert decide(wl, check_names=CHECKS, cluster_queues=CQS, pods_left=pods,
                  jobset_uid="js1").kind == kind


def test_wait_says_what_it_waits_for_and_writes_only_on_change() -> None:
    d = decide(workload(), check_names=CHECKS, cluster_queues=CQS, pods_left=2,
               jobset_uid="js1")
    assert d.message == "waiting for 2 pods of the previous execution to go"
    assert d.write
    same = decide(workload(message=waiting_message(2)), check_names=CHECKS,
                  cluster_queues=CQS, pods_left=2, jobset_uid="js1")
    assert not same.write


def test_token_counts_every_eviction() -> None:
    assert admission_token(workload()) == "u1/0"
    assert eviction_count(workload(evictions=[1, 2])) == 3
    assert admission_token(workload(evictions=[1, 2])) == "u1/3"


def trainjob(**annotations: str) -> dict[str, Any]:
    return {"metadata": {"name": "dj-a-s1", "namespace": "ns", "resourceVersion": "42",
                         "labels": {names.JOB_ID_LABEL: "A"}, "annotations": annotations}}


def test_first_admission_raises_a_to_one_with_precondition() -> None:
    plan = plan_admission(trainjob(), "u1/0")
    assert plan.ok
    assert plan.raise_a
    assert plan.count == 1
    assert plan.patch == {"metadata": {"resourceVersion": "42", "annotations": {
        names.ADMISSION_COUNT: "1", names.ADMISSION_TOKEN: "u1/0"}}}


def test_readmission_raises_once_per_token() -> None:
    tj = trainjob(**{names.ADMISSION_COUNT: "1", names.ADMISSION_TOKEN: "u1/0"})
    again = plan_admission(tj, "u1/0")  # a new leader finishing the same admission
    assert again.ok
    assert not again.raise_a
    assert again.count == 1
    nxt = plan_admission(tj, "u1/1")
    assert nxt.raise_a
    assert nxt.count == 2


def test_a_decision_older_than_the_recorded_admission_raises_nothing() -> None:
    """A Workload read from before a hold and release, a TrainJob read after the newer
    admission raised A: raising again would give that execution a second A."""
    tj = trainjob(**{names.ADMISSION_COUNT: "2", names.ADMISSION_TOKEN: "u1/1"})
    old = plan_admission(tj, "u1/0")
    assert old.ok
    assert old.stale
    assert not old.raise_a
    other_workload = plan_admission(tj, "u2/0")  # a Workload made anew: a new admission
    assert other_workload.raise_a
    assert not other_workload.stale
    plain = plan_admission(trainjob(**{names.ADMISSION_COUNT: "1",
                                       names.ADMISSION_TOKEN: "plain/1"}), "u1/0")
    assert plain.raise_a


@pytest.mark.parametrize("tj", [
    {"metadata": {"name": "x", "labels": {}}},
    trainjob(**{names.ADMISSION_COUNT: "minus one"}),
    trainjob(**{names.ADMISSION_COUNT: "-1"}),
])
def test_not_ours_or_malformed_trainjob_is_skipped(tj: dict[str, Any]) -> None:
    assert not plan_admission(tj, "u1/0").ok


def test_check_apply_writes_only_our_entry_and_keeps_transition_time() -> None:
    now = datetime(2026, 2, 3, 4, 5, 6, tzinfo=UTC)
    body = check_apply(workload(), "dispatch-admission", "Pending", "m", now)
    assert body["status"] == {"admissionChecks": [{
        "name": "dispatch-admission", "state": "Pending", "message": "m",
        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    assert set(body) == {"apiVersion", "kind", "metadata", "status"}
    # The fence: applied only to the Workload version the decision was judged from.
    assert body["metadata"] == {"name": "trainjob-dj-a-s1-abcde", "namespace": "ns",
                                "resourceVersion": "4711"}
    unfenced = check_apply(workload(), "dispatch-admission", "Pending", "m", now, fenced=False)
    assert "resourceVersion" not in unfenced["metadata"]
    ready = check_apply(workload(), "dispatch-admission", "Ready", "ok", now)
    assert ready["status"]["admissionChecks"][0]["lastTransitionTime"] == "2026-02-03T04:05:06Z"


def admitted(**kw: Any) -> dict[str, Any]:
    wl = workload(state="Ready", **kw)
    wl["status"]["conditions"].append({"type": "Admitted", "status": "True"})
    return wl


def approved_trainjob(jobset: str | None, token: str = "u1/0") -> dict[str, Any]:
    ann = {names.ADMISSION_COUNT: "1", names.ADMISSION_TOKEN: token}
    if jobset is not None:
        ann[names.APPROVED_JOBSET] = jobset
    return {"metadata": {"name": "dj-a-s1", "annotations": ann,
                         "labels": {names.JOB_ID_LABEL: "A"}}}


@pytest.mark.parametrize(("wl", "tj", "jobset", "kind"), [
    # The JobSet was re-made under the admitted Workload: a new execution to approve.
    (admitted(), approved_trainjob("js1"), "js2", "rebind"),
    (admitted(), approved_trainjob("js1"), "js1", "idle"),  # the approved JobSet runs
    (admitted(), approved_trainjob("js1"), None, "idle"),  # no JobSet (yet)
    (admitted(), approved_trainjob(None), "js2", "idle"),  # approved before the record
    (admitted(), approved_trainjob("js1", token="u1/1"), "js2", "idle"),  # other admission
    (admitted(evicted=True), approved_trainjob("js1"), "js2", "idle"),  # being evicted
    (admitted(active=False), approved_trainjob("js1"), "js2", "idle"),  # held
    (workload(state="Ready"), approved_trainjob("js1"), "js2", "idle"),  # not admitted
])
def test_a_jobset_remade_under_an_admitted_workload_is_rebound(
        wl: dict[str, Any], tj: dict[str, Any], jobset: str | None, kind: str) -> None:
    d = decide(wl, check_names=CHECKS, cluster_queues=CQS, pods_left=0, jobset_uid=jobset,
               trainjob=tj)
    assert d.kind == kind


def test_a_dispatch_job_reserved_without_our_check_is_reported() -> None:
    # Issue 26, case 6: the ClusterQueue stopped listing the check, Kueue dropped our entry.
    wl = workload(check="someone-else", cq="other")
    tj = approved_trainjob("js1")
    d = decide(wl, check_names=CHECKS, cluster_queues=CQS, pods_left=0, jobset_uid="js1",
               trainjob=tj)
    assert d.kind == "unguarded"
    assert "ClusterQueue other does not list dispatch's admission check" in d.reason
    # The queue lists our check, Kueue has not added the entry yet: nothing to say (a false
    # alarm seen on the cluster right after a reservation).
    assert decide(workload(check="someone-else"), check_names=CHECKS, cluster_queues=CQS,
                  pods_left=0, jobset_uid="js1", trainjob=tj).kind == "ignore"
    # Not a dispatch job, or no quota: nothing to say.
    assert decide(wl, check_names=CHECKS, cluster_queues=CQS, pods_left=0, jobset_uid=None,
                  trainjob=None).kind == "ignore"
    assert decide(workload(check="x", reserved=False), check_names=CHECKS, cluster_queues=CQS,
                  pods_left=0, jobset_uid=None, trainjob=tj).kind == "ignore"

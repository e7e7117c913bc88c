"""The state table of dispatch_kubeflow.state, row by row, on realistic objects.

Field names follow Kueue v1beta2 (Workload) and Trainer v1alpha1 (TrainJob).
"""

from __future__ import annotations

from typing import Any

import pytest

from dispatch_kubeflow.core import names
from dispatch_kubeflow.model import ObjectState
from dispatch_kubeflow.state import observe

JOB = "01KQ7ZJ8C5T9W1XG8M2N3P4R5S"
TJ = f"dj-{JOB.lower()}-s1"
UID = "5f0c1a2e-0000-4000-8000-000000000001"


def cond(kind: str, status: str, reason: str = "", message: str = "") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason or kind, "message": message,
            "lastTransitionTime": "2026-05-01T12:00:00Z", "observedGeneration": 1}


def trainjob(*, kueue: bool = True, suspend: bool = True, gate: str | None = None,
             ann: dict[str, str] | None = None, conditions: list[dict[str, Any]] | None = None,
             deleting: bool = False) -> dict[str, Any]:
    labels = {names.JOB_ID_LABEL: JOB, names.SUBMISSION_LABEL: "1", names.ATTEMPT_LABEL: "1",
              names.MANAGED_BY_LABEL: names.MANAGED_BY}
    annotations = {names.SPEC_HASH: "sha256:x", **(ann or {})}
    if kueue:
        labels[names.QUEUE_NAME_LABEL] = "lq"
        labels[names.PRIORITY_CLASS_LABEL] = "low"
    if gate is not None:
        annotations[names.ADMISSION_GATED_BY] = gate
    meta: dict[str, Any] = {"name": TJ, "namespace": "tutorial", "uid": UID,
                            "labels": labels, "annotations": annotations,
                            "resourceVersion": "100"}
    if deleting:
        meta["deletionTimestamp"] = "2026-05-01T12:05:00Z"
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": meta,
        "spec": {"runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime",
                                "name": TJ},
                 "trainer": {"image": "localhost/dispatch-busybox:kind",
                             "command": ["/bin/sh", "-c", "true"], "numNodes": 2},
                 "suspend": suspend,
                 "runtimePatches": [{"manager": "kueue.x-k8s.io/manager"}] if kueue else []},
        "status": {"conditions": conditions or [],
                   "jobsStatus": [{"name": "node", "ready": 0, "succeeded": 0, "failed": 0,
                                   "active": 0, "suspended": 1}]},
    }


def workload(*, active: bool = True, ann: dict[str, str] | None = None,
             conditions: list[dict[str, Any]] | None = None,
             checks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": f"trainjob-{TJ}-1a2b3", "namespace": "tutorial",
                     "labels": {names.KUEUE_JOB_UID_LABEL: UID},
                     "annotations": ann or {},
                     "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1",
                                          "kind": "TrainJob", "name": TJ, "uid": UID,
                                          "controller": True}]},
        "spec": {"active": active, "queueName": "lq",
                 "podSets": [{"name": "node", "count": 2, "template": {}}],
                 "priorityClassRef": {"group": "kueue.x-k8s.io",
                                      "kind": "WorkloadPriorityClass", "name": "low"}},
        "status": {"conditions": conditions or [], "admissionChecks": checks or []},
    }


def pod(phase: str = "Running", index: str = "0", restarts: str = "0") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{TJ}-node-0-{index}-abcde", "namespace": "tutorial",
                         "labels": {names.JOBSET_NAME_LABEL: TJ,
                                    names.RESTART_ATTEMPT_LABEL: restarts,
                                    names.COMPLETION_INDEX_LABEL: index,
                                    names.JOB_ID_LABEL: JOB}},
            "status": {"phase": phase}}


HOLD = {names.HOLD_INSTANCE: "1", names.HOLD_SINCE: "2026-05-01T12:00:00Z",
        names.HOLD_WHO: "human:tutorial", names.HOLD_UNTIL: "2026-05-01T13:00:00Z",
        names.HOLD_REASON: "the tutorial's hold"}
CHECK_PENDING = {"name": "dispatch-admission", "state": "Pending",
                 "lastTransitionTime": "2026-05-01T12:00:00Z",
                 "message": "waiting for 2 pods of the previous execution to go"}
GATED_QR = cond("QuotaReserved", "False", "AdmissionGated",
                f"Admission is gated by: {names.GATE}")
ADMITTED = [cond("QuotaReserved", "True", "QuotaReserved"), cond("Admitted", "True", "Admitted")]

ROWS: list[tuple[str, Any, Any, list[Any], ObjectState, str, int]] = [
    ("1 no trainjob", None, None, [], ObjectState.GONE, "TrainJob not found", 0),
    ("1 no trainjob, pods left", None, None, [pod()], ObjectState.GONE, "1 pods still there", 0),
    ("2 deleting", trainjob(deleting=True), workload(), [], ObjectState.GONE, "being deleted", 0),
    ("3 complete", trainjob(suspend=False, conditions=[cond("Complete", "True", "Completed",
                                                             "jobset completed")]),
     workload(conditions=ADMITTED), [], ObjectState.SUCCEEDED, "jobset completed", 0),
    ("4 failed", trainjob(suspend=False, conditions=[cond("Failed", "True", "DeadlineExceeded",
                                                           "deadline")]),
     workload(conditions=ADMITTED), [], ObjectState.FAILED, "deadline", 0),
    ("5 holding", trainjob(suspend=True), workload(active=False, ann=HOLD), [pod()],
     ObjectState.HOLDING, "held by human:tutorial: the tutorial's hold; waiting for 1 pods", 1),
    ("5 held", trainjob(suspend=True), workload(active=False, ann=HOLD), [],
     ObjectState.HELD, "held by human:tutorial: the tutorial's hold", 1),
    # A rank that finished before the hold stays (its suspended Job keeps it): held, not
    # holding forever (issue 26, case 3).
    ("5 held with a finished rank", trainjob(suspend=True), workload(active=False, ann=HOLD),
     [pod(phase="Succeeded", index="1")], ObjectState.HELD,
     "held by human:tutorial: the tutorial's hold", 1),
    ("5 holding beside a finished rank", trainjob(suspend=True),
     workload(active=False, ann=HOLD), [pod(), pod(phase="Failed", index="1")],
     ObjectState.HOLDING, "waiting for 1 pods", 1),
    ("5 held while gated", trainjob(gate=names.GATE), workload(active=False, ann=HOLD), [],
     ObjectState.HELD, "held by", 1),
    ("6 deactivated by someone else", trainjob(suspend=True),
     workload(active=False, conditions=[cond("Evicted", "True", "Deactivated",
                                             "The workload is deactivated")]), [],
     ObjectState.HELD, f"stopped outside dispatch: Workload trainjob-{TJ}-1a2b3 has "
     f"spec.active=false; kueuectl resume workload trainjob-{TJ}-1a2b3 runs it again", 0),
    ("6 stopped outside dispatch, pods still going", trainjob(suspend=True),
     workload(active=False), [pod()], ObjectState.HOLDING,
     "runs it again; 1 pods still there", 0),
    ("7 our gate", trainjob(gate=names.GATE), workload(conditions=[GATED_QR]), [],
     ObjectState.GATED, "", 0),
    ("7 their gate", trainjob(gate="example.com/theirs"), workload(), [],
     ObjectState.GATED, "gated by example.com/theirs", 0),
    ("7 both gates", trainjob(gate=f"{names.GATE}, example.com/theirs"), workload(), [],
     ObjectState.GATED, "gated by example.com/theirs", 0),
    ("7 gated, no workload yet", trainjob(gate=names.GATE), None, [], ObjectState.GATED, "", 0),
    ("8 no workload", trainjob(), None, [], ObjectState.QUEUED, "create the Workload", 0),
    ("9 evicted", trainjob(suspend=False),
     workload(conditions=[cond("Evicted", "True", "Preempted", "Preempted by a higher one")]),
     [pod()], ObjectState.QUEUED, "evicted (Preempted): Preempted by a higher one", 0),
    ("10 admitted, still suspended", trainjob(suspend=True), workload(conditions=ADMITTED), [],
     ObjectState.ADMITTING, "waiting for the TrainJob to resume", 0),
    ("11 running", trainjob(suspend=False), workload(conditions=ADMITTED),
     [pod(), pod("Pending", "1")], ObjectState.RUNNING, "1 of 2 pods running", 0),
    ("11 admitted, no pod yet", trainjob(suspend=False), workload(conditions=ADMITTED), [],
     ObjectState.RUNNING, "no pod running yet", 0),
    ("11 admitted, pods starting", trainjob(suspend=False), workload(conditions=ADMITTED),
     [pod("Pending"), pod("Pending", "1")], ObjectState.RUNNING,
     "no pod running yet (2 starting)", 0),
    ("12 admitting", trainjob(suspend=True),
     workload(conditions=[cond("QuotaReserved", "True"),
                          cond("Admitted", "False", "UnsatisfiedAdmissionChecks")],
              checks=[CHECK_PENDING]), [pod("Running")],
     ObjectState.ADMITTING, "dispatch-admission: waiting for 2 pods of the previous", 0),
    ("13 queued", trainjob(suspend=True),
     workload(conditions=[cond("QuotaReserved", "False", "Pending",
                               "couldn't assign flavors to pod set node")]), [],
     ObjectState.QUEUED, "couldn't assign flavors", 0),
    ("5 plain held", trainjob(kueue=False, suspend=True, ann={**HOLD,
                                                               names.ADMISSION_COUNT: "1"}),
     None, [], ObjectState.HELD, "held by human:tutorial", 1),
    ("5 plain holding", trainjob(kueue=False, suspend=True, ann=HOLD), None, [pod()],
     ObjectState.HOLDING, "waiting for 1 pods", 1),
    ("5 plain held with a finished rank", trainjob(kueue=False, suspend=True, ann=HOLD), None,
     [pod(phase="Succeeded")], ObjectState.HELD, "held by human:tutorial", 1),
    ("6 plain suspended by someone else",
     trainjob(kueue=False, suspend=True, ann={names.ADMISSION_COUNT: "1"}), None, [],
     ObjectState.HELD, "stopped outside dispatch: TrainJob spec.suspend=true; setting it "
     "false runs it again", 0),
    ("7 plain gated", trainjob(kueue=False, suspend=True), None, [], ObjectState.GATED, "", 0),
    ("14 plain running", trainjob(kueue=False, suspend=False, ann={names.ADMISSION_COUNT: "1"}),
     None, [pod()], ObjectState.RUNNING, "1 of 1 pods running", 0),
]


@pytest.mark.parametrize(("trainjob_", "workload_", "pods", "state", "detail", "instance"),
                         [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_table(trainjob_: Any, workload_: Any, pods: list[Any], state: ObjectState,
               detail: str, instance: int) -> None:
    obs = observe(trainjob_, workload_, pods)
    assert obs.state is state
    if detail:
        assert detail in obs.cause.detail
    else:
        assert obs.cause.detail == ""
    assert obs.hold_instance == instance
    assert obs.pods == len(pods)


def test_counts_and_until() -> None:
    tj = trainjob(suspend=False, ann={names.ADMISSION_COUNT: "2"})
    obs = observe(tj, workload(conditions=ADMITTED), [pod(restarts="3")])
    assert (obs.admissions, obs.restarts) == (2, 3)
    held = observe(tj, workload(active=False, ann=HOLD), [])
    assert held.hold_until is not None
    assert held.hold_until.hour == 13


def test_garbage_counts_read_as_zero() -> None:
    tj = trainjob(suspend=False, ann={names.ADMISSION_COUNT: "many"})
    assert observe(tj, workload(conditions=ADMITTED), []).admissions == 0


def test_pods_running_counts_running_pods_only() -> None:
    tj = trainjob(suspend=False)
    going = pod("Running", "1")
    going["metadata"]["deletionTimestamp"] = "2026-05-01T12:05:00Z"
    obs = observe(tj, workload(conditions=ADMITTED), [pod(), pod("Pending", "2"), going])
    assert (obs.pods, obs.pods_running) == (3, 1)
    assert observe(tj, workload(conditions=ADMITTED), []).pods_running == 0


def test_observe_listed_matches_observe_per_job() -> None:
    from dispatch_kubeflow.state import observe_listed

    other_uid = "5f0c1a2e-0000-4000-8000-000000000002"
    running = trainjob(suspend=False)
    gated = trainjob(gate=names.GATE)
    gated["metadata"] = {**gated["metadata"], "name": "dj-other-s1", "uid": other_uid}
    wl_gated = workload(conditions=[GATED_QR])
    wl_gated["metadata"] = {**wl_gated["metadata"], "name": "trainjob-dj-other-s1-x",
                            "labels": {names.KUEUE_JOB_UID_LABEL: other_uid}}
    stranger = pod()
    stranger["metadata"] = {**stranger["metadata"], "name": "x",
                            "labels": {names.JOBSET_NAME_LABEL: "someone-else"}}
    pods = [pod(), pod("Pending", "1"), stranger]
    out = observe_listed([running, gated], [workload(conditions=ADMITTED), wl_gated], pods)
    assert out[TJ] == observe(running, workload(conditions=ADMITTED), pods[:2])
    assert out["dj-other-s1"] == observe(gated, wl_gated, [])
    assert out[TJ].state is ObjectState.RUNNING
    assert out["dj-other-s1"].state is ObjectState.GATED


# --- what observe reads: all a cache of the objects it judges keeps -----------------------


class _Recorded(dict[str, Any]):
    """A dict that records, in ``reads``, the dotted path of every field read from it (and
    from the dicts and lists beneath it, wrapped alike)."""

    def __init__(self, obj: dict[str, Any], path: str, reads: set[str]) -> None:
        super().__init__(obj)
        self._path, self._reads = path, reads

    def _wrap(self, key: str, value: Any) -> Any:
        path = f"{self._path}.{key}" if self._path else key
        self._reads.add(path)
        if isinstance(value, dict):
            return _Recorded(value, path, self._reads)
        if isinstance(value, list):
            return [_Recorded(v, f"{path}[]", self._reads) if isinstance(v, dict) else v
                    for v in value]
        return value

    def __getitem__(self, key: str) -> Any:
        return self._wrap(key, super().__getitem__(key))

    def get(self, key: str, default: Any = None) -> Any:
        return self._wrap(key, super().get(key, default))


def _within(path: str, kept: tuple[str, ...]) -> bool:
    """Whether ``path`` is in the metadata, on the way to a kept field or beneath one."""
    bare = path.replace("[]", "")
    return bare == "metadata" or bare.startswith("metadata.") or any(
        bare == k or k.startswith(f"{bare}.") or bare.startswith(f"{k}.") for k in kept)


def _project(obj: Any, kept: tuple[str, ...]) -> Any:
    from dispatch_kubeflow.core.objects import project

    return None if obj is None else project(obj, kept)


@pytest.mark.parametrize(("trainjob_", "workload_", "pods"), [r[1:4] for r in ROWS],
                         ids=[r[0] for r in ROWS])
def test_observe_reads_only_what_a_cache_keeps(trainjob_: Any, workload_: Any,
                                               pods: list[Any]) -> None:
    """Every field the table reads is among state's ``*_READS`` (or metadata), and the table
    says the same of the objects cut down to them, as the Backend's informers keep them."""
    from dispatch_kubeflow.state import POD_READS, TRAINJOB_READS, WORKLOAD_READS

    reads: dict[str, set[str]] = {"trainjob": set(), "workload": set(), "pod": set()}
    tj = None if trainjob_ is None else _Recorded(trainjob_, "", reads["trainjob"])
    wl = None if workload_ is None else _Recorded(workload_, "", reads["workload"])
    ps = [_Recorded(p, "", reads["pod"]) for p in pods]
    assert observe(tj, wl, ps) == observe(trainjob_, workload_, pods)
    for what, kept in (("trainjob", TRAINJOB_READS), ("workload", WORKLOAD_READS),
                       ("pod", POD_READS)):
        assert {p for p in reads[what] if not _within(p, kept)} == set(), what
    assert observe(_project(trainjob_, TRAINJOB_READS), _project(workload_, WORKLOAD_READS),
                   [_project(p, POD_READS) for p in pods]) == observe(trainjob_, workload_, pods)


def test_the_recorder_sees_a_field_not_kept() -> None:
    """The guard above can fail: a read of the TrainJob's spec.trainer is seen."""
    reads: set[str] = set()
    tj = _Recorded(trainjob(), "", reads)
    assert tj["spec"]["trainer"]["numNodes"] == 2
    assert "spec.trainer.numNodes" in reads
    assert not _within("spec.trainer.numNodes", ("spec.suspend", "status.conditions"))
    assert _within("status.conditions[].type", ("status.conditions",))


def test_project_keeps_metadata_and_the_paths_given() -> None:
    from dispatch_kubeflow.core.objects import project

    tj = trainjob(suspend=False)
    tj["metadata"]["managedFields"] = [{"manager": "kueue"}]
    out = project(tj, ("spec.suspend", "status.conditions", "status.absent", "x.y.z"))
    assert out == {"metadata": {k: v for k, v in tj["metadata"].items()
                                if k != "managedFields"},
                   "spec": {"suspend": False}, "status": {"conditions": []}}
    assert project(None, ("spec.suspend",)) == {"metadata": {}}
    assert project({"spec": None}, ("spec.suspend",)) == {"metadata": {}}
    assert project({"spec": {"trainer": {}}}, ("spec.suspend",)) == {"metadata": {}}
    wl = {"spec": {"podSets": [{"name": "a", "template": {"metadata": {"labels": {"x": "1"}},
                                                          "spec": {"containers": []}}},
                               {"name": "b", "count": 2}]}}
    assert project(wl, ("spec.podSets[].template.metadata.labels", "spec.podSets[].name")) == {
        "metadata": {}, "spec": {"podSets": [
            {"template": {"metadata": {"labels": {"x": "1"}}}, "name": "a"}, {"name": "b"}]}}

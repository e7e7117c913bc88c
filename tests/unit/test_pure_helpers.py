"""Pure pieces of gate, hold, preflight and output."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dispatch_kubeflow.backend import select_mode
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.admission_count import plain_admission_patch as admission_patch
from dispatch_kubeflow.errors import SpecError
from dispatch_kubeflow.gate import removal_patch
from dispatch_kubeflow.hold import hold_annotations, release_patch, validate_hold
from dispatch_kubeflow.model import Actor, ActorKind, CallMeta, HoldMeta, JobID
from dispatch_kubeflow.output import current_pod
from dispatch_kubeflow.preflight import (
    check_injected,
    check_queue,
    dry_run_pod,
    lease_fresh,
    permissions,
    probe_body,
)
from dispatch_kubeflow.settings import Settings

GATE_PATH = "/metadata/annotations/kueue.x-k8s.io~1admission-gated-by"
NOW = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
SETTINGS = Settings.parse({"namespace": "tutorial",
                           "probeRuntime": {"name": "dispatch-kind"},
                           "kueue": {"localQueue": "lq"}})


def test_gate_removal_only_ours() -> None:
    assert removal_patch(names.GATE) == [
        {"op": "test", "path": GATE_PATH, "value": names.GATE},
        {"op": "remove", "path": GATE_PATH}]
    value = f"example.com/a, {names.GATE},example.com/b"
    assert removal_patch(value) == [
        {"op": "test", "path": GATE_PATH, "value": value},
        {"op": "replace", "path": GATE_PATH, "value": "example.com/a,example.com/b"}]
    assert removal_patch("example.com/a") is None
    assert removal_patch("") is None


def test_hold_annotations_and_release_patch() -> None:
    hold = HoldMeta(3, Actor(ActorKind.HUMAN, "tutorial"), CallMeta(NOW),
                    until=NOW + timedelta(hours=1), reason="why")
    ann = hold_annotations(hold, NOW)
    assert ann == {names.HOLD_INSTANCE: "3", names.HOLD_SINCE: "2026-05-01T12:00:00Z",
                   names.HOLD_WHO: "human:tutorial", names.HOLD_UNTIL: "2026-05-01T13:00:00Z",
                   names.HOLD_REASON: "why"}
    wl = {"metadata": {"annotations": {**ann, "other": "x"}}}
    ops = release_patch(wl, 3, reactivate=True)
    assert ops[0] == {"op": "test",
                      "path": "/metadata/annotations/dispatch.phpboyscout.uk~1hold-instance",
                      "value": "3"}
    assert {o["path"].rsplit("~1", 1)[-1] for o in ops[1:-1]} == {
        "hold-instance", "hold-since", "hold-who", "hold-until", "hold-reason"}
    assert ops[-1] == {"op": "add", "path": "/spec/active", "value": True}
    assert release_patch(wl, 3, reactivate=False)[-1]["op"] == "remove"


def test_plain_admission_patch_raises_a_once() -> None:
    tj = {"metadata": {"resourceVersion": "7", "annotations": {
        names.ADMISSION_COUNT: "1", names.ADMISSION_TOKEN: "plain/1"}}}
    patch = admission_patch(tj, {names.HOLD_INSTANCE: None})
    assert patch == {"metadata": {"resourceVersion": "7", "annotations": {
        names.HOLD_INSTANCE: None, names.ADMISSION_COUNT: "2",
        names.ADMISSION_TOKEN: "plain/2"}}, "spec": {"suspend": False}}
    first = admission_patch({"metadata": {"resourceVersion": "1"}})
    assert first["metadata"]["annotations"][names.ADMISSION_COUNT] == "1"
    assert first["metadata"]["annotations"][names.ADMISSION_TOKEN] == "plain/1"


def lease(holder: str, renewed: datetime, duration: int = 15) -> dict[str, Any]:
    return {"spec": {"holderIdentity": holder, "leaseDurationSeconds": duration,
                     "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}}


def test_lease_freshness() -> None:
    assert lease_fresh(lease("pod-a", NOW - timedelta(seconds=5)), NOW)[0]
    fresh, why = lease_fresh(lease("pod-a", NOW - timedelta(seconds=40)), NOW)
    assert not fresh
    assert "longer than its leaseDurationSeconds (15s)" in why
    assert lease_fresh(lease("", NOW), NOW) == (False, "has no holder")


def cq(checks: list[dict[str, Any]]) -> dict[str, Any]:
    return {"metadata": {"name": "tutorial"},
            "spec": {"admissionChecksStrategy": {"admissionChecks": checks}}}


def test_cluster_queue_check_rules() -> None:
    assert check_queue(cq([{"name": "dispatch-admission"}]), "dispatch-admission") is None
    flavors = check_queue(cq([{"name": "dispatch-admission", "onFlavors": ["f1"]}]),
                          "dispatch-admission")
    assert flavors is not None
    assert "a check limited to some flavors lets workloads on other flavors be admitted " \
           "without it" in flavors
    missing = check_queue(cq([]), "dispatch-admission")
    assert missing is not None
    assert "does not list AdmissionCheck dispatch-admission" in missing


def test_probe_is_closed_and_unschedulable() -> None:
    job = JobID.new(NOW)
    runtime = {"spec": {"template": {"spec": {"replicatedJobs": [{"name": "node"}]}}}}
    body = probe_body(SETTINGS, select_mode(SETTINGS).proofs(), runtime, job)
    assert body["metadata"]["name"] == f"dj-probe-{job.lower()}"
    assert len(body["metadata"]["name"]) <= 63
    assert body["metadata"]["annotations"][names.ADMISSION_GATED_BY] == names.GATE
    assert body["spec"]["suspend"] is True
    rj = body["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"][
        "replicatedJobs"][0]
    assert rj["template"]["spec"]["template"]["spec"]["nodeSelector"]
    pod = dry_run_pod(job, body["metadata"]["name"])
    assert pod["metadata"]["labels"][names.JOBSET_NAME_LABEL] == body["metadata"]["name"]


def test_injection_check() -> None:
    job = JobID.new(NOW)
    good = {"spec": {"containers": [{"name": "node", "env": [
        {"name": names.ENV_ATTEMPT, "value": f"{job}.1.1.0.0"},
        {"name": names.ENV_EPOCH, "value": "1000000"}]}],
        "schedulingGates": [{"name": names.EXECUTION_GATE}]}}
    assert check_injected(good, job) is None
    ungated = {"spec": {"containers": good["spec"]["containers"]}}
    old_controller = check_injected(ungated, job)
    assert old_controller is not None
    assert names.EXECUTION_GATE in old_controller
    assert "upgrade it" in old_controller
    missing = check_injected({"spec": {"containers": [{"name": "node"}]}}, job)
    assert missing is not None
    assert "MutatingWebhookConfiguration" in missing


def test_every_permission_names_a_capability() -> None:
    perms = permissions(SETTINGS, select_mode(SETTINGS))
    assert all(p.needed_by for p in perms)
    assert "patch workloads.kueue.x-k8s.io in tutorial" in {str(p) for p in perms}
    assert "get leases.coordination.k8s.io in dispatch-system" in {str(p) for p in perms}


def rank_pod(name: str, a: int, j: int, created: str, sub: str = "1",
             env: bool = True) -> dict[str, Any]:
    envs = [{"name": names.ENV_ATTEMPT, "value": f"J.{sub}.1.{a}.{j}"}] if env else []
    return {"metadata": {"name": name, "creationTimestamp": created,
                         "labels": {names.SUBMISSION_LABEL: sub,
                                    names.RESTART_ATTEMPT_LABEL: str(j)}},
            "spec": {"containers": [{"name": "node", "env": envs}]}}


@pytest.mark.parametrize(("pods", "a_by_sub", "want"), [
    ([rank_pod("old", 1, 0, "2026-05-01T12:00:00Z"), rank_pod("new", 2, 0,
                                                             "2026-05-01T11:00:00Z")], {}, "new"),
    ([rank_pod("j1", 1, 1, "2026-05-01T12:00:00Z"), rank_pod("j0", 1, 0,
                                                            "2026-05-01T12:01:00Z")], {}, "j1"),
    ([rank_pod("s2", 1, 0, "t", sub="2"), rank_pod("s1", 5, 0, "t")], {}, "s2"),
    ([rank_pod("x", 0, 0, "a", env=False), rank_pod("y", 0, 1, "a", env=False)], {1: 2}, "y"),
])
def test_current_pod(pods: list[dict[str, Any]], a_by_sub: dict[int, int], want: str) -> None:
    got = current_pod(pods, a_by_sub)
    assert got is not None
    assert got["metadata"]["name"] == want


def test_orphaned_workload_belongs_to_its_job() -> None:
    from dispatch_kubeflow.find import belongs, trainjob_name_pattern
    from dispatch_kubeflow.kube.resources import WORKLOAD

    job, other = JobID.new(), JobID.new()
    orphan = {"metadata": {"name": "trainjob-x", "labels": {names.KUEUE_JOB_UID_LABEL: "gone"}},
              "spec": {"podSets": [{"name": "node", "template": {"metadata": {"labels": {
                  names.JOB_ID_LABEL: str(job)}}}}]}}
    assert belongs(WORKLOAD, orphan, job, set(), trainjob_name_pattern(job))
    assert not belongs(WORKLOAD, orphan, other, set(), trainjob_name_pattern(other))


def test_newest_workload_prefers_live() -> None:
    from dispatch_kubeflow.core.admission_count import newest_workload

    old = {"metadata": {"name": "a", "creationTimestamp": "2026-01-01T00:00:00Z"}}
    going = {"metadata": {"name": "b", "creationTimestamp": "2026-01-02T00:00:00Z",
                          "deletionTimestamp": "2026-01-03T00:00:00Z"}}
    assert newest_workload([old, going]) is old
    assert newest_workload([going]) is going
    assert newest_workload([]) is None


@pytest.mark.parametrize(("field", "meta"), [
    ("hold.reason", HoldMeta(1, Actor(ActorKind.HUMAN, "alice"), reason="r" * 5000)),
    ("hold.by.id", HoldMeta(1, Actor(ActorKind.HUMAN, "a" * 5000))),
])
def test_a_hold_too_long_to_record_is_a_spec_error(field: str, meta: HoldMeta) -> None:
    with pytest.raises(SpecError) as err:
        validate_hold(meta)
    assert err.value.field == field
    assert "4,096" in str(err.value)

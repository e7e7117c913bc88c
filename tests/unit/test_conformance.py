"""The conformance suite's pure parts: the registry, identities, the release watch's verdict,
the summary."""

from __future__ import annotations

from typing import Any

import pytest

from dispatch_kubeflow.conformance import CHECKS, CheckResult, Summary
from dispatch_kubeflow.conformance.__main__ import parser
from dispatch_kubeflow.conformance.checks.overlap import Mark, ReleaseWatch
from dispatch_kubeflow.conformance.identity import Identity
from dispatch_kubeflow.conformance.registry import CheckFailed
from dispatch_kubeflow.model import JobID

JOB = JobID("01J0000000000000000000000A")


def pod(uid: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": f"pod-{uid}", "resourceVersion": rv}}


def workload(rv: str, state: str, reserved: bool, message: str = "") -> dict[str, Any]:
    return {"metadata": {"resourceVersion": rv}, "status": {
        "admissionChecks": [{"name": "dispatch-admission", "state": state, "message": message}],
        "conditions": [{"type": "QuotaReserved", "status": "True" if reserved else "False"}]}}


def test_identity_from_a_log() -> None:
    log = (f"DISPATCH_ATTEMPT={JOB}.1.1.2.0\nDISPATCH_EPOCH=1000002\nDISPATCH_JOB_ID={JOB}\n"
           "DISPATCH_SUBMISSION=1\nconformance-ready\n")
    ident = Identity.parse(log, JOB)
    assert (ident.admissions, ident.restarts, ident.epoch) == (2, 0, 1000002)
    with pytest.raises(CheckFailed):
        Identity.parse("conformance-ready\n", JOB)
    with pytest.raises(CheckFailed):
        Identity.parse(log.replace(f"{JOB}.1.1", "OTHER.1.1"), JOB)


def test_marks_order_by_resource_version_else_arrival() -> None:
    assert Mark("20", 1).after(Mark("10", 2))
    assert not Mark("10", 9).after(Mark("20", 1))
    assert Mark("", 3).after(Mark("20", 2))


def released_watch() -> ReleaseWatch:
    w = ReleaseWatch("dispatch-admission")
    w.on_pods("SYNC", {}, (pod("a", "5"), pod("b", "6")))
    w.on_workload("SYNC", {}, (workload("7", "Pending", False),))
    w.released = True
    return w


def test_approval_after_the_last_old_pod_is_no_overlap() -> None:
    w = released_watch()
    w.on_workload("MODIFIED", workload("8", "Pending", True, "waiting for 2 pods of the "
                                                             "previous execution to go"), ())
    w.on_pods("DELETED", pod("a", "9"), ())
    w.on_pods("DELETED", pod("b", "10"), ())
    w.on_workload("MODIFIED", workload("11", "Ready", True), ())
    assert w.approval == Mark("11", w.approval.seq if w.approval else 0)
    assert w.old_left == []
    assert w.overlap() == []
    assert w.messages == ["waiting for 2 pods of the previous execution to go"]


def test_approval_while_an_old_pod_exists_is_overlap() -> None:
    w = released_watch()
    w.on_pods("DELETED", pod("a", "9"), ())
    w.on_workload("MODIFIED", workload("10", "Ready", True), ())
    w.on_pods("DELETED", pod("b", "11"), ())
    assert w.overlap() == ["pod-b"]


def test_a_late_watch_event_is_judged_by_resource_version() -> None:
    """The workload event arrives first, but the pod was deleted at an earlier revision."""
    w = released_watch()
    w.on_workload("MODIFIED", workload("12", "Ready", True), ())
    w.on_pods("DELETED", pod("a", "9"), ())
    w.on_pods("DELETED", pod("b", "10"), ())
    assert w.overlap() == []


def test_ready_without_quota_is_not_an_approval() -> None:
    w = released_watch()
    w.on_workload("MODIFIED", workload("8", "Ready", False), ())
    assert w.approval is None


def test_summary_line() -> None:
    results = [CheckResult(name, True, "ok") for name, _ in CHECKS]
    assert Summary(tuple(results)).line == f"{len(CHECKS)} passed, 0 failed"
    assert Summary(tuple(results)).ok
    mixed = [CheckResult("preflight", False, "no"),
             *(CheckResult(name, None, "not run") for name, _ in CHECKS[1:])]
    s = Summary(tuple(mixed))
    assert s.line == f"0 passed, 1 failed, {len(CHECKS) - 1} not run"
    assert not s.ok
    assert mixed[0].line == "FAIL preflight: no"
    assert not Summary(tuple(results), ("Namespace x was still there",)).ok


def test_command_line() -> None:
    args = parser().parse_args(["--kubeconfig", "/k", "--namespace", "ns", "--keep-going"])
    assert (args.kubeconfig, args.namespace, args.keep_going) == ("/k", "ns", True)

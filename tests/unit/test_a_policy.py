"""Who may write A: the preflight's pure judgement, and the shape of the shipped policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatch_kubeflow import errors, preflight
from dispatch_kubeflow.backend import select_mode
from dispatch_kubeflow.core import names
from dispatch_kubeflow.model import Capability, CapabilityValue
from dispatch_kubeflow.settings import Settings

REPO = Path(__file__).resolve().parents[2]
POLICY = REPO / "deploy/admission/admission-count-policy.yaml"
PROBE = "dj-probe-01jq8z6w3k9v7tq2m5xh4n0rcb"


def denial(status: int, reason: str, kind: str = "trainjobs", name: str = PROBE,
           group: str = names.TRAINER_GROUP) -> errors.KubeError:
    """A refusal as the API server's Status body carries it."""
    body: dict[str, Any] = {"kind": "Status", "code": status, "reason": reason,
                            "message": "anything at all",
                            "details": {"group": group, "kind": kind, "name": name}}
    return errors.kube_error(status, body)


# --- classifying a refusal ----------------------------------------------------------------------

@pytest.mark.parametrize(("exc", "want"), [
    (denial(403, "Forbidden"), True),
    (denial(422, "Invalid"), True),  # a policy whose validation names no reason
    (denial(422, "Invalid", kind="TrainJob"), False),  # a webhook's or the schema's field error
    (denial(403, "Forbidden", name="dj-probe-other"), False),
    (denial(403, "Forbidden", group="kueue.x-k8s.io"), False),
    (denial(403, "Invalid"), False),  # code and reason must agree
    (denial(409, "Conflict"), False),
    (errors.kube_error(403, {"reason": "Forbidden", "message": "denied"}), False),  # no details
    (errors.KubeError("unreachable", status=0, reason="Unreachable"), False),
])
def test_refused_by_policy_reads_the_status_not_the_message(exc: errors.KubeError,
                                                             want: bool) -> None:
    assert preflight.refused_by_policy(exc, PROBE) is want


# --- judging the two dry-run patches -----------------------------------------------------------

def judge(kueue: bool, a_write: errors.KubeError | None,
          control: errors.KubeError | None = None) -> tuple[CapabilityValue, str]:
    judge_a_writes = preflight.judge_kueue_a_writes if kueue else preflight.judge_plain_a_writes
    st = judge_a_writes(PROBE, "system:serviceaccount:t:svc", a_write, control)
    return st.value, st.reason


def test_kueue_mode_refused_by_the_policy_is_yes() -> None:
    value, reason = judge(True, denial(403, "Forbidden"))
    assert value is CapabilityValue.YES
    assert reason.startswith("only the admission controller may raise A")
    assert "(403 Forbidden)" in reason
    assert "system:serviceaccount:t:svc" in reason
    assert "ValidatingAdmissionPolicy dispatch-admission-count is in force" in reason


def test_kueue_mode_admitted_is_no_and_says_how_to_install() -> None:
    value, reason = judge(True, None)
    assert value is CapabilityValue.NO
    assert "ValidatingAdmissionPolicy dispatch-admission-count with binding " \
           "dispatch-admission-count-kueue is not in force" in reason
    assert "deploy/admission (admission-count-policy.yaml)" in reason
    assert "ConfigMap dispatch-system/dispatch-admission-count-kueue" in reason


def test_kueue_mode_refused_otherwise_is_unknown() -> None:
    value, reason = judge(True, denial(422, "Invalid", kind="TrainJob"))
    assert value is CapabilityValue.UNKNOWN
    assert reason.startswith("could not prove who may write A")


@pytest.mark.parametrize("kueue", [True, False])
def test_a_refused_control_patch_proves_nothing(kueue: bool) -> None:
    value, reason = judge(kueue, denial(403, "Forbidden"), control=denial(403, "Forbidden"))
    assert value is CapabilityValue.UNKNOWN
    assert "another annotation" in reason


def test_plain_mode_admitted_is_yes_and_names_the_list() -> None:
    value, reason = judge(False, None)
    assert value is CapabilityValue.YES
    assert reason.startswith("plain mode: the library raises A itself")
    assert "ConfigMap dispatch-system/dispatch-admission-count-plain" in reason


def test_plain_mode_refused_by_the_policy_says_whom_to_list() -> None:
    value, reason = judge(False, denial(403, "Forbidden"))
    assert value is CapabilityValue.NO
    assert ("add system:serviceaccount:t:svc to ConfigMap "
            "dispatch-system/dispatch-admission-count-plain (key writers)") in reason


def test_plain_mode_refused_otherwise_is_no_with_the_error() -> None:
    value, reason = judge(False, errors.KubeError("boom", status=500, reason="InternalError"))
    assert value is CapabilityValue.NO
    assert reason.endswith("was refused: boom")


def test_the_patches() -> None:
    a = preflight.a_write_patch()["metadata"]["annotations"]
    assert a == {names.ADMISSION_COUNT: "1"}
    control = preflight.control_patch()["metadata"]["annotations"]
    assert not set(control) & {names.ADMISSION_COUNT, names.ADMISSION_TOKEN}


@pytest.mark.parametrize("kueue", [True, False])
def test_the_dry_run_patches_need_patch_trainjobs(kueue: bool) -> None:
    settings = Settings.parse({"namespace": "ns", "probeRuntime": {"name": "r"},
                               **({"kueue": {"localQueue": "lq"}} if kueue else {})})
    patch = next(p for p in preflight.permissions(settings, select_mode(settings))
                 if (p.verb, p.resource) == ("patch", "trainjobs"))
    assert Capability.ATTEMPT_INJECTION in patch.needed_by


# --- the shipped policy -----------------------------------------------------------------------

def docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(POLICY.read_text()) if d]


def test_the_policy_file_is_in_the_kustomization() -> None:
    kustomization = yaml.safe_load((POLICY.parent / "kustomization.yaml").read_text())
    assert POLICY.name in kustomization["resources"]


def test_the_policy_guards_both_annotations_of_trainjobs_only_on_writes() -> None:
    policy = next(d for d in docs() if d["kind"] == "ValidatingAdmissionPolicy")
    assert policy["metadata"]["name"] == preflight.A_POLICY
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["paramKind"] == {"apiVersion": "v1", "kind": "ConfigMap"}
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == [names.TRAINER_GROUP]
    assert rule["resources"] == ["trainjobs"]  # not trainjobs/status: it cannot change metadata
    assert sorted(rule["operations"]) == ["CREATE", "UPDATE"]  # deletes are never refused
    keys = next(v for v in spec["variables"] if v["name"] == "keys")["expression"]
    assert f"'{names.ADMISSION_COUNT}'" in keys
    assert f"'{names.ADMISSION_TOKEN}'" in keys
    a_rule, guard = spec["validations"]
    for validation in (a_rule, guard):
        assert validation["reason"] == "Forbidden"
        assert (403, validation["reason"]) in preflight.POLICY_DENIALS
    # The guard: queue label removal and resume, by the binding's writers and resumers only.
    assert "variables.unqueued || variables.resumed" in guard["expression"]
    assert "variables.resumers" in guard["expression"]
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    assert f"'{names.JOB_ID_LABEL}' in oldObject.metadata.labels" in variables["dispatchJob"]
    assert f"'{names.QUEUE_NAME_LABEL}' in oldObject.metadata.labels" in variables["unqueued"]
    assert "oldObject.spec.?suspend.orValue(false) == true" in variables["resumed"]
    kueue = next(d for d in docs() if d["kind"] == "ConfigMap"
                 and d["metadata"]["name"] == preflight.a_binding(True))
    assert "kueue-system:kueue-controller-manager" in kueue["data"]["resumers"]


def test_the_bindings_split_every_trainjob_and_fail_closed() -> None:
    all_docs = docs()
    bindings = {d["metadata"]["name"]: d["spec"] for d in all_docs
                if d["kind"] == "ValidatingAdmissionPolicyBinding"}
    assert set(bindings) == {preflight.a_binding(True), preflight.a_binding(False)}
    operators = {}
    for name, spec in bindings.items():
        assert spec["policyName"] == preflight.A_POLICY
        assert spec["validationActions"] == ["Deny"]
        assert spec["paramRef"] == {"name": name, "namespace": names.CONTROLLER_NAMESPACE,
                                    "parameterNotFoundAction": "Deny"}
        (expr,) = spec["matchResources"]["objectSelector"]["matchExpressions"]
        assert expr["key"] == names.QUEUE_NAME_LABEL
        assert "namespaceSelector" not in spec["matchResources"]
        operators[name] = expr["operator"]
    # Together the two halves cover every TrainJob, labelled or not.
    assert operators == {preflight.a_binding(True): "Exists",
                         preflight.a_binding(False): "DoesNotExist"}
    # Each binding's list exists, and comes before any binding in the file.
    kinds = [d["kind"] for d in all_docs]
    assert kinds.index("ValidatingAdmissionPolicyBinding") > max(
        i for i, k in enumerate(kinds) if k == "ConfigMap")


def test_the_shipped_lists() -> None:
    lists = {d["metadata"]["name"]: d for d in docs() if d["kind"] == "ConfigMap"}
    sa = yaml.safe_load((POLICY.parent / "serviceaccount.yaml").read_text())["metadata"]
    for cm in lists.values():
        assert cm["metadata"]["namespace"] == names.CONTROLLER_NAMESPACE
    kueue = lists[preflight.a_binding(True)]["data"]["writers"].split("\n")
    assert [w for w in kueue if w.strip()] == [
        f"system:serviceaccount:{sa['namespace']}:{sa['name']}"]
    plain = lists[preflight.a_binding(False)]["data"]["writers"]
    assert plain.strip() == ""  # nobody until the operator names the library's identity


# --- the guard: resuming and unqueueing a dispatch TrainJob -------------------------------------

def test_kueue_mode_guard_needs_both_refused_by_the_policy() -> None:
    who = "system:serviceaccount:t:svc"
    ok = preflight.judge_kueue_guard(PROBE, who, denial(403, "Forbidden"),
                                     denial(403, "Forbidden"))
    assert ok.value is CapabilityValue.YES
    assert ok.reason.startswith("nobody else may resume a dispatch TrainJob")
    resumable = preflight.judge_kueue_guard(PROBE, who, denial(403, "Forbidden"), None)
    assert resumable.value is CapabilityValue.NO
    assert resumable.reason.startswith(f"{who} may resume probe TrainJob {PROBE}")
    assert "keys writers, resumers" in resumable.reason
    unqueued = preflight.judge_kueue_guard(PROBE, who, None, denial(403, "Forbidden"))
    assert unqueued.value is CapabilityValue.NO
    assert "take the queue label off" in unqueued.reason
    other = preflight.judge_kueue_guard(PROBE, who, denial(422, "Invalid", kind="TrainJob"),
                                        denial(403, "Forbidden"))
    assert other.value is CapabilityValue.UNKNOWN


def test_plain_mode_guard_needs_the_resume_admitted() -> None:
    who = "system:serviceaccount:t:svc"
    assert preflight.judge_plain_guard(PROBE, who, None, None).value is CapabilityValue.YES
    # A plain job has no queue label: what the unqueue patch met proves nothing.
    assert preflight.judge_plain_guard(PROBE, who, denial(403, "Forbidden"),
                                       None).value is CapabilityValue.YES
    refused = preflight.judge_plain_guard(PROBE, who, None, denial(403, "Forbidden"))
    assert refused.value is CapabilityValue.NO
    assert "(key writers)" in refused.reason


def test_the_guard_patches() -> None:
    assert preflight.unqueue_patch() == {"metadata": {"labels": {names.QUEUE_NAME_LABEL: None}}}
    assert preflight.resume_patch() == {"spec": {"suspend": False}}

"""The public API is exactly this: a change here is a change users see."""

from __future__ import annotations

import dispatch_kubeflow
from dispatch_kubeflow import AdapterConfig, Backend, errors, registered
from dispatch_kubeflow.core import errors as core_errors

EXPECTED = {
    "KIND_CLUSTER_TRAINING_RUNTIME", "KIND_TRAINING_RUNTIME", "NAME",
    "Actor", "ActorKind", "AdapterConfig", "Backend", "CallMeta", "Capability",
    "CapabilitySource", "CapabilityStatus", "CapabilityValue", "Cause", "ConflictError",
    "DeadlineExceeded", "DispatchError", "Extension", "HoldError", "HoldMeta", "Image",
    "JobEvent", "JobID", "JobInfo", "JobSpec", "KubeError", "LogStream", "NotFound",
    "ObjectRef", "ObjectState", "Observation", "ObserveOnlyError", "OutputStream",
    "ReleaseOutcome", "RuntimeRef", "Settings",
    "SettingsError", "SpecError", "StartRequest", "StopReport", "UnsupportedError",
    "factory", "open_backend", "register", "registered", "__version__",
}

BACKEND_PUBLIC = {"connect", "close", "capabilities", "start", "open", "inspect", "hold",
                  "release", "wait", "stop_job", "find", "output", "jobs", "watch_jobs",
                  "events", "kube", "workers", "observe_only", "observe_only_reasons"}
"""Every public attribute of Backend: its methods and properties."""

ERRORS = {
    "DispatchError", "SettingsError", "SpecError", "ObserveOnlyError", "ConflictError",
    "HoldError", "DeadlineExceeded", "NotFound", "UnsupportedError", "KubeError",
    "KubeNotFound", "KubeConflict", "KubeGone", "KubeForbidden", "KubeInvalid",
    "KubeWebhookDenied", "KubeNoAnswer", "KubeUnreachable", "KubeStreamBroken",
    "KubeBadResponse", "StatusCause", "kube_error",
}


def test_all_is_exactly_the_expected_set() -> None:
    assert set(dispatch_kubeflow.__all__) == EXPECTED
    assert len(dispatch_kubeflow.__all__) == len(EXPECTED)
    for name in EXPECTED:
        assert hasattr(dispatch_kubeflow, name), name


def test_backend_methods() -> None:
    assert {n for n in dir(Backend) if not n.startswith("_")} == BACKEND_PUBLIC
    assert {"__aenter__", "__aexit__"} <= set(vars(Backend))


def test_the_error_tree_is_exactly_this() -> None:
    assert set(errors.__all__) == ERRORS
    assert len(errors.__all__) == len(ERRORS)
    for name in ERRORS:
        assert getattr(errors, name) is getattr(core_errors, name), name


def test_kubeflow_is_registered() -> None:
    assert dispatch_kubeflow.NAME == "kubeflow"
    assert "kubeflow" in registered()
    assert AdapterConfig("kubeflow").settings == {}


def test_capabilities_and_states() -> None:
    assert {c.value for c in dispatch_kubeflow.Capability} == {
        "ReadmissionGate", "AttemptInjection", "HoldCapability", "StartGate"}
    assert {s.value for s in dispatch_kubeflow.ObjectState} == {
        "gated", "queued", "admitting", "running", "holding", "held", "succeeded", "failed",
        "gone"}


def test_release_outcomes() -> None:
    assert {o.value for o in dispatch_kubeflow.ReleaseOutcome} == {"released", "not-held"}

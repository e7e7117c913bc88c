"""The public API is exactly this: a change here is a change users see."""

from __future__ import annotations

import dispatch_kubeflow
from dispatch_kubeflow import AdapterConfig, Backend, registered

EXPECTED = {
    "KIND_CLUSTER_TRAINING_RUNTIME", "KIND_TRAINING_RUNTIME", "NAME",
    "Actor", "ActorKind", "AdapterConfig", "Backend", "CallMeta", "Capability",
    "CapabilitySource", "CapabilityStatus", "CapabilityValue", "Cause", "ConflictError",
    "DeadlineExceeded", "DispatchError", "Extension", "HoldError", "HoldMeta", "Image",
    "JobEvent", "JobID", "JobInfo", "JobSpec", "KubeError", "LogStream", "NotFound",
    "ObjectRef", "ObjectState", "Observation", "ObserveOnlyError", "OutputStream",
    "ReleaseOutcome", "RuntimeRef", "Settings",
    "SettingsError", "SpecError", "StartRequest", "StopReport", "UnsupportedError",
    "factory", "open_backend", "register", "registered",
}

BACKEND_METHODS = {"connect", "close", "capabilities", "start", "open", "inspect", "hold",
                   "release", "stop_job", "find", "output", "jobs", "watch_jobs", "events",
                   "__aenter__", "__aexit__"}


def test_all_is_exactly_the_expected_set() -> None:
    assert set(dispatch_kubeflow.__all__) == EXPECTED
    assert len(dispatch_kubeflow.__all__) == len(EXPECTED)
    for name in EXPECTED:
        assert hasattr(dispatch_kubeflow, name), name


def test_backend_methods() -> None:
    assert set(dir(Backend)) >= BACKEND_METHODS


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

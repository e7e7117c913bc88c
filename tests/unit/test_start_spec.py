"""Start's validation and the objects it would write (pure: nothing is sent anywhere)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from dispatch_kubeflow.backend import select_mode
from dispatch_kubeflow.core import names
from dispatch_kubeflow.errors import SpecError
from dispatch_kubeflow.model import (
    Image,
    JobID,
    JobSpec,
    RuntimeRef,
    StartRequest,
)
from dispatch_kubeflow.settings import Settings
from dispatch_kubeflow.start import runtime_copy, spec_hash, trainjob_body, validate

JOB = JobID.new(datetime(2026, 5, 1, tzinfo=UTC), bytes(10))
IMAGE = Image("localhost/dispatch-busybox:kind", "IfNotPresent")
RUNTIME = RuntimeRef("ClusterTrainingRuntime", "dispatch-kind")
SETTINGS = Settings.parse({
    "namespace": "tutorial",
    "probeRuntime": {"kind": "ClusterTrainingRuntime", "name": "dispatch-kind"},
    "kueue": {"localQueue": "lq", "priorityClass": "low"},
})


def request(**over: Any) -> StartRequest:
    spec = over.pop("spec", JobSpec(["/bin/sh", "-c", "echo hi"], 2, [IMAGE, RUNTIME]))
    return StartRequest(**{"job": JOB, "submission": 1, "attempt": 1, "spec": spec, **over})


def test_valid() -> None:
    v = validate(request())
    assert v.name == f"dj-{JOB.lower()}-s1"
    assert (v.image, v.runtime) == (IMAGE, RUNTIME)
    assert v.request.job is JOB
    assert v.digest == spec_hash(request())
    assert validate(v) is v  # validated once: a Validated passes as it is


def test_string_job_is_normalised() -> None:
    req = validate(request(job=str(JOB).lower())).request
    assert isinstance(req.job, JobID)
    assert req.job == JOB


@pytest.mark.parametrize(("over", "field"), [
    ({"spec": JobSpec(["x"], 1, [RUNTIME])}, "spec.extensions.Image"),
    ({"spec": JobSpec(["x"], 1, [IMAGE])}, "spec.extensions.RuntimeRef"),
    ({"spec": JobSpec(["x"], 0, [IMAGE, RUNTIME])}, "spec.nodes"),
    ({"spec": JobSpec(["x"], -2, [IMAGE, RUNTIME])}, "spec.nodes"),
    ({"spec": JobSpec(["x"], 2**31, [IMAGE, RUNTIME])}, "spec.nodes"),
    ({"spec": JobSpec(["x"], True, [IMAGE, RUNTIME])}, "spec.nodes"),
    ({"spec": JobSpec([], 1, [IMAGE, RUNTIME])}, "spec.command"),
    ({"spec": JobSpec([""], 1, [IMAGE, RUNTIME])}, "spec.command[0]"),
    ({"spec": JobSpec(["x"], 1, [IMAGE, IMAGE, RUNTIME])}, "spec.extensions"),
    ({"spec": JobSpec(["x"], 1, [Image(""), RUNTIME])}, "spec.extensions.Image.ref"),
    ({"spec": JobSpec(["x"], 1, [Image("a b"), RUNTIME])}, "spec.extensions.Image.ref"),
    ({"spec": JobSpec(["x"], 1, [Image("a", "Sometimes"), RUNTIME])},
     "spec.extensions.Image.pull_policy"),
    ({"spec": JobSpec(["x"], 1, [IMAGE, RuntimeRef("Runtime", "r")])},
     "spec.extensions.RuntimeRef.kind"),
    ({"spec": JobSpec(["x"], 1, [IMAGE, RuntimeRef("TrainingRuntime", "Bad_Name")])},
     "spec.extensions.RuntimeRef.runtime"),
    ({"submission": 0}, "submission"),
    ({"attempt": 0}, "attempt"),
    ({"submission": 10**40}, "submission"),  # the TrainJob name would pass 63 characters
    ({"job": "not-a-job-id"}, "job"),
    # Recorded in an annotation: Kubernetes caps an object's annotations at 256 KiB.
    ({"spec": JobSpec(["/bin/sh", "-c", "x" * 210_000], 1, [IMAGE, RUNTIME])}, "spec.command"),
])
def test_invalid(over: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as err:
        validate(request(**over))
    assert err.value.field == field
    assert str(err.value).startswith(field), "the message names the field as well"


def test_hash_tracks_the_request() -> None:
    assert spec_hash(request()) == spec_hash(request())
    assert spec_hash(request()) != spec_hash(request(attempt=2))
    other = JobSpec(["/bin/sh", "-c", "echo other"], 2, [IMAGE, RUNTIME])
    assert spec_hash(request()) != spec_hash(request(spec=other))


def test_trainjob_is_closed_and_labelled() -> None:
    v = validate(request())
    name = v.name
    body = trainjob_body(v, SETTINGS, select_mode(SETTINGS))
    meta = body["metadata"]
    assert meta["annotations"][names.ADMISSION_GATED_BY] == names.GATE
    assert meta["annotations"][names.SPEC_HASH] == v.digest
    assert meta["labels"][names.QUEUE_NAME_LABEL] == "lq"
    assert meta["labels"][names.PRIORITY_CLASS_LABEL] == "low"
    assert meta["labels"][names.JOB_ID_LABEL] == str(JOB)
    assert body["spec"]["suspend"] is True
    assert body["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org",
                                          "kind": "TrainingRuntime", "name": name}
    assert body["spec"]["trainer"]["numNodes"] == 2


def test_plain_trainjob_has_no_kueue_marks() -> None:
    plain = Settings.parse({"namespace": "t", "probeRuntime": {"name": "r"}})
    body = trainjob_body(validate(request()), plain, select_mode(plain))
    assert names.ADMISSION_GATED_BY not in body["metadata"]["annotations"]
    assert names.QUEUE_NAME_LABEL not in body["metadata"]["labels"]
    assert body["spec"]["suspend"] is True


def test_runtime_copy_labels_every_template() -> None:
    source: dict[str, Any] = {"metadata": {"name": "dispatch-kind", "labels": {"a": "b"}}, "spec": {
        "mlPolicy": {"numNodes": 1},
        "template": {"spec": {"replicatedJobs": [
            {"name": "node", "template": {"spec": {"template": {"spec": {
                "containers": [{"name": "node", "image": "x"}]}}}}},
            {"name": "init", "template": {"metadata": {"labels": {"k": "v"}}}},
        ]}}}}
    v = validate(request())
    labels = v.labels
    copy = runtime_copy(source, v, "ns")
    assert copy["kind"] == "TrainingRuntime"
    assert copy["metadata"]["name"] == v.name
    assert copy["metadata"]["annotations"][names.SPEC_HASH] == v.digest
    assert copy["metadata"]["labels"] == {"a": "b", **labels}
    assert copy["spec"]["template"]["metadata"]["labels"] == labels
    for rj in copy["spec"]["template"]["spec"]["replicatedJobs"]:
        assert rj["template"]["metadata"]["labels"][names.JOB_ID_LABEL] == str(JOB)
        assert rj["template"]["spec"]["template"]["metadata"]["labels"] == labels
    node = copy["spec"]["template"]["spec"]["replicatedJobs"][0]
    assert node["template"]["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] \
        == "IfNotPresent"
    assert "metadata" not in source["spec"]["template"]  # the source is not touched


def test_a_command_just_within_the_record_limit_is_taken() -> None:
    v = validate(request(spec=JobSpec(["/bin/sh", "-c", "x" * 150_000], 1, [IMAGE, RUNTIME])))
    assert len(v.recorded) < 200 * 1024

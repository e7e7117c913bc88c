"""What Start writes, judged from the request alone (pure): the request validated once into
a :class:`Validated`, the runtime copy and the TrainJob it would make, and the spec hash that
tells one request's objects from another's. The writes are :mod:`.writes`.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.objects import annotations_of, labels_of, meta
from dispatch_kubeflow.informer import Informers
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.model import (
    KIND_CLUSTER_TRAINING_RUNTIME,
    KIND_TRAINING_RUNTIME,
    Image,
    JobID,
    RuntimeRef,
    StartRequest,
)
from dispatch_kubeflow.settings import Settings

_RFC1035 = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_PULL_POLICIES = ("Always", "IfNotPresent", "Never")
TRAINJOB_API_VERSION = f"{names.TRAINER_GROUP}/{names.TRAINER_VERSION}"
ANNOTATIONS_MAX = 256 * 1024
"""Kubernetes' limit on an object's annotations, keys and values together (bytes)."""
REQUEST_RECORD_MAX = 200 * 1024
"""The most the request annotation may take of them (the rest: the gate, the spec hash, a
hold's five annotations, Kueue's and anyone else's)."""


@dataclass(frozen=True, slots=True, eq=False)
class Validated:
    """A Start request checked once, carrying the parts every later step reads."""

    request: StartRequest
    """The request, its job id normalised to a JobID."""
    name: str
    """The TrainJob's name, which its runtime copy shares."""
    image: Image
    runtime: RuntimeRef
    doc: Mapping[str, Any]
    """Everything in the request that shapes the job (:func:`request_doc`)."""
    recorded: str
    """``doc`` as the request annotation records it (canonical JSON)."""
    digest: str
    """The spec hash of ``doc``: which request a copy or a TrainJob was made for."""

    @property
    def labels(self) -> dict[str, str]:
        """dispatch's labels, on the TrainJob and on every template of the runtime copy."""
        return job_labels(self.request)



def validate(req: StartRequest | Validated) -> Validated:
    """Check a request before anything is written (once: a Validated is returned as is)."""
    if isinstance(req, Validated):
        return req
    if not isinstance(req, StartRequest):
        raise errors.SpecError("request: must be a StartRequest", field="request")
    if not isinstance(req.job, JobID):
        req = dataclasses.replace(req, job=JobID(req.job))
    req.validate()
    image = req.spec.extension(Image)
    if image is None:
        raise errors.SpecError(
            "spec.extensions.Image: missing; the kubeflow backend needs an Image extension "
            "(Image(ref='registry/image:tag'))", field="spec.extensions.Image")
    if not image.ref or any(c.isspace() for c in image.ref):
        raise errors.SpecError(f"spec.extensions.Image.ref: {image.ref!r} is not an image "
                               "reference", field="spec.extensions.Image.ref")
    if image.pull_policy is not None and image.pull_policy not in _PULL_POLICIES:
        raise errors.SpecError(
            f"spec.extensions.Image.pull_policy: must be one of {', '.join(_PULL_POLICIES)}, "
            f"got {image.pull_policy!r}", field="spec.extensions.Image.pull_policy")
    runtime = req.spec.extension(RuntimeRef)
    if runtime is None:
        raise errors.SpecError(
            "spec.extensions.RuntimeRef: missing; the kubeflow backend needs a RuntimeRef "
            "extension "
            "(RuntimeRef(kind='ClusterTrainingRuntime', runtime='<name>'))",
            field="spec.extensions.RuntimeRef")
    if runtime.kind not in (KIND_CLUSTER_TRAINING_RUNTIME, KIND_TRAINING_RUNTIME):
        raise errors.SpecError(
            f"spec.extensions.RuntimeRef.kind: must be {KIND_CLUSTER_TRAINING_RUNTIME} or "
            f"{KIND_TRAINING_RUNTIME}, got {runtime.kind!r}",
            field="spec.extensions.RuntimeRef.kind")
    if not isinstance(runtime.runtime, str) or not _SUBDOMAIN.match(runtime.runtime):
        raise errors.SpecError(
            f"spec.extensions.RuntimeRef.runtime: {runtime.runtime!r} is not a Kubernetes "
            "name", field="spec.extensions.RuntimeRef.runtime")
    name = names.trainjob_name(req.job, req.submission)
    if len(name) > 63 or not _RFC1035.match(name):
        raise errors.SpecError(
            f"submission: the TrainJob name {name!r} would be {len(name)} characters; a "
            "TrainJob name must be an RFC 1035 label of at most 63", field="submission")
    doc = request_doc(req)
    recorded = _canonical(doc)
    size = len(names.REQUEST) + len(recorded.encode())
    if size > REQUEST_RECORD_MAX:
        # Kubernetes refuses an object whose annotations pass 256 KiB in all; found at the
        # TrainJob's create, after the runtime copy was made, that would leave the copy.
        raise errors.SpecError(
            f"spec.command: the request would be recorded in a {size:,}-byte annotation, "
            f"more than the {REQUEST_RECORD_MAX:,} bytes dispatch allows it (Kubernetes "
            f"allows {ANNOTATIONS_MAX:,} bytes of annotations per object in all, and the "
            "gate, the hold and Kueue need the rest); shorten the command: pass large "
            "arguments in a file (in the image, or a ConfigMap the runtime mounts)",
            field="spec.command")
    return Validated(req, name, image, runtime, MappingProxyType(doc), recorded,
                     "sha256:" + hashlib.sha256(recorded.encode()).hexdigest())


def request_doc(req: StartRequest) -> dict[str, Any]:
    """Everything in the request that shapes the job (what the spec hash digests)."""
    image = req.spec.extension(Image)
    runtime = req.spec.extension(RuntimeRef)
    return {
        "job": str(req.job), "submission": req.submission, "attempt": req.attempt,
        "command": list(req.spec.command), "nodes": req.spec.nodes,
        "image": image.ref if image else None,
        "pullPolicy": image.pull_policy if image else None,
        "runtime": [runtime.kind, runtime.runtime] if runtime else None,
    }


def _canonical(doc: Mapping[str, Any]) -> str:
    return json.dumps(dict(doc), sort_keys=True, separators=(",", ":"))


def spec_hash(req: StartRequest) -> str:
    """A digest of everything in the request that shapes the job."""
    return validate(req).digest


def what_differs(obj: Mapping[str, Any], mine: Mapping[str, Any]) -> str:
    """Name what differs between the request ``obj`` was made from and ``mine`` (pure)."""
    raw = annotations_of(obj).get(names.REQUEST)
    try:
        theirs = json.loads(raw) if raw else None
    except ValueError:
        theirs = None
    if not isinstance(theirs, dict):  # made before the request was recorded
        return f"its spec-hash is {annotations_of(obj).get(names.SPEC_HASH) or 'none'}"
    diffs = [f"{k} {theirs.get(k)!r} there, {mine.get(k)!r} here"
             for k in sorted(set(theirs) | set(mine)) if theirs.get(k) != mine.get(k)]
    return "; ".join(diffs) or "its spec-hash differs"


def job_labels(req: StartRequest) -> dict[str, str]:
    return {
        names.JOB_ID_LABEL: str(req.job),
        names.SUBMISSION_LABEL: str(req.submission),
        names.ATTEMPT_LABEL: str(req.attempt),
        names.MANAGED_BY_LABEL: names.MANAGED_BY,
    }


def runtime_copy(source: Mapping[str, Any], start: Validated, namespace: str) -> dict[str, Any]:
    """The namespaced TrainingRuntime copy of ``source`` for ``start``, with dispatch's
    labels on every template (pure)."""
    labels, image = start.labels, start.image
    spec = copy.deepcopy(source.get("spec") or {})
    # The JobSet's own metadata comes from the template's, so StopJob finds it by label too.
    jobset_tpl = spec.setdefault("template", {})
    jobset_tpl.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
    for rj in (((spec.get("template") or {}).get("spec") or {}).get("replicatedJobs") or []):
        job_tpl = rj.setdefault("template", {})
        job_tpl.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
        pod_tpl = job_tpl.setdefault("spec", {}).setdefault("template", {})
        pod_tpl.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
        if image.pull_policy:
            for container in (pod_tpl.get("spec") or {}).get("containers") or []:
                if container.get("name") == names.TRAINER_CONTAINER:
                    container["imagePullPolicy"] = image.pull_policy
    return {
        "apiVersion": TRAINJOB_API_VERSION,
        "kind": names.KIND_TRAINING_RUNTIME,
        "metadata": {
            "name": start.name, "namespace": namespace,
            "labels": {**(labels_of(source)), **labels},
            "annotations": {names.SPEC_HASH: start.digest, names.REQUEST: start.recorded},
        },
        "spec": spec,
    }


class StartMode(Protocol):
    """What Start needs of the mode."""

    def trainjob_labels(self) -> dict[str, str]:
        """The labels a TrainJob carries in this mode (Kueue's queue and priority class)."""
        ...

    def closed_annotations(self) -> dict[str, str]:
        """The annotations a new TrainJob carries so it starts closed (Kueue's gate)."""
        ...

    def trainjob_spec(self) -> dict[str, Any]:
        """What the mode adds to a new TrainJob's spec (MultiKueue: ``managedBy``)."""
        ...

    async def started(self, kube: KubeAPI, trainjob: Mapping[str, Any],
                      shared: Informers | None = None) -> None:
        """What Start waits for once the TrainJob is made (Kueue: its Workload), watching
        through ``shared`` (the Backend's informers) when given."""
        ...


def trainjob_body(start: Validated, settings: Settings, mode: StartMode) -> dict[str, Any]:
    """The TrainJob, created suspended and closed (pure)."""
    req, name, image = start.request, start.name, start.image
    labels = {**start.labels, **mode.trainjob_labels()}
    return {
        "apiVersion": TRAINJOB_API_VERSION,
        "kind": "TrainJob",
        "metadata": {
            "name": name, "namespace": settings.namespace, "labels": labels,
            "annotations": {**mode.closed_annotations(),
                            names.SPEC_HASH: start.digest,
                            names.REQUEST: start.recorded},
        },
        "spec": {
            "runtimeRef": {"apiGroup": names.TRAINER_GROUP, "kind": names.KIND_TRAINING_RUNTIME,
                           "name": name},
            "trainer": {"image": image.ref, "command": list(req.spec.command),
                        "numNodes": req.spec.nodes},
            "suspend": True,
            **mode.trainjob_spec(),
        },
    }


def owner_reference(trainjob: Mapping[str, Any]) -> dict[str, Any]:
    return {"apiVersion": TRAINJOB_API_VERSION, "kind": "TrainJob",
            "name": meta(trainjob)["name"], "uid": meta(trainjob)["uid"], "controller": True}

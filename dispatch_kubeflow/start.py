"""Start: a runtime copy and a closed TrainJob, then wait for Kueue's Workload.

Order of writes, after every input was validated and the source runtime read:

1. the runtime copy — a namespaced TrainingRuntime named as the TrainJob, copied from the
   named (Cluster)TrainingRuntime, with dispatch's labels added to every replicatedJob's
   Job and pod template so every Job and pod of the job carries them. It must exist before
   the TrainJob: Trainer's TrainJob webhook refuses a TrainJob whose TrainingRuntime is
   not there ("specified trainingRuntime must be created before the TrainJob is created").
2. the TrainJob, suspended, closed by the start gate (Kueue: ``admission-gated-by``), with
   dispatch's labels, Kueue's queue and priority-class labels, and the spec hash.
3. the copy's ownerReference to the TrainJob, so the garbage collector removes it.

A Start interrupted between these steps leaves objects labelled with the job id, which
``find``/StopJob find, and which a repeated Start completes. The same request again
returns the same reference; a different request under the same job and submission is a
ConflictError. In Kueue mode Start returns once Kueue made the Workload
(``kueue.x-k8s.io/job-uid=<TrainJob uid>``).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import hashlib
import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names
from dispatch_kubeflow.gate import closed_annotations
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube.resources import (
    CLUSTER_TRAINING_RUNTIME,
    TRAINING_RUNTIME,
    TRAINJOB,
    WORKLOAD,
)
from dispatch_kubeflow.model import (
    KIND_CLUSTER_TRAINING_RUNTIME,
    KIND_TRAINING_RUNTIME,
    Image,
    JobID,
    ObjectRef,
    RuntimeRef,
    StartRequest,
)
from dispatch_kubeflow.settings import Settings
from dispatch_kubeflow.state import annotations_of, labels_of, meta
from dispatch_kubeflow.waits import deadline_after, wait_for, within

_RFC1035 = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_PULL_POLICIES = ("Always", "IfNotPresent", "Never")
TRAINJOB_API_VERSION = f"{names.TRAINER_GROUP}/{names.TRAINER_VERSION}"
log = logging.getLogger(__name__)


# --- validation (pure) ------------------------------------------------------------------------


def validate(req: StartRequest) -> tuple[StartRequest, str, Image, RuntimeRef]:
    """Check a request before anything is written.

    Returns the request with its job id normalised, the TrainJob name, image and runtime.
    """
    if not isinstance(req, StartRequest):
        raise errors.SpecError("request: must be a StartRequest", field="request")
    if not isinstance(req.job, JobID):
        req = dataclasses.replace(req, job=JobID(req.job))
    req.validate()
    image = req.spec.extension(Image)
    if image is None:
        raise errors.SpecError(
            "spec.extensions: the kubeflow backend needs an Image extension "
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
            "spec.extensions: the kubeflow backend needs a RuntimeRef extension "
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
    return req, name, image, runtime


def spec_hash(req: StartRequest) -> str:
    """A digest of everything in the request that shapes the job."""
    image = req.spec.extension(Image)
    runtime = req.spec.extension(RuntimeRef)
    doc = {
        "job": str(req.job), "submission": req.submission, "attempt": req.attempt,
        "command": list(req.spec.command), "nodes": req.spec.nodes,
        "image": image.ref if image else None,
        "pullPolicy": image.pull_policy if image else None,
        "runtime": [runtime.kind, runtime.runtime] if runtime else None,
    }
    raw = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def job_labels(req: StartRequest) -> dict[str, str]:
    return {
        names.JOB_ID_LABEL: str(req.job),
        names.SUBMISSION_LABEL: str(req.submission),
        names.ATTEMPT_LABEL: str(req.attempt),
        names.MANAGED_BY_LABEL: names.MANAGED_BY,
    }


def runtime_copy(source: Mapping[str, Any], *, name: str, namespace: str,
                 labels: Mapping[str, str], digest: str, image: Image) -> dict[str, Any]:
    """The namespaced TrainingRuntime copy of ``source`` with dispatch's labels (pure)."""
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
            "name": name, "namespace": namespace,
            "labels": {**(labels_of(source)), **labels},
            "annotations": {names.SPEC_HASH: digest},
        },
        "spec": spec,
    }


def trainjob_body(req: StartRequest, settings: Settings, *, name: str, image: Image,
                  digest: str) -> dict[str, Any]:
    """The TrainJob, created suspended and closed (pure)."""
    labels = job_labels(req)
    if settings.kueue is not None:
        labels[names.QUEUE_NAME_LABEL] = settings.kueue.local_queue
        if settings.kueue.priority_class:
            labels[names.PRIORITY_CLASS_LABEL] = settings.kueue.priority_class
    return {
        "apiVersion": TRAINJOB_API_VERSION,
        "kind": "TrainJob",
        "metadata": {
            "name": name, "namespace": settings.namespace, "labels": labels,
            "annotations": {**closed_annotations(settings.kueue is not None),
                            names.SPEC_HASH: digest},
        },
        "spec": {
            "runtimeRef": {"apiGroup": names.TRAINER_GROUP, "kind": names.KIND_TRAINING_RUNTIME,
                           "name": name},
            "trainer": {"image": image.ref, "command": list(req.spec.command),
                        "numNodes": req.spec.nodes},
            "suspend": True,
        },
    }


def owner_reference(trainjob: Mapping[str, Any]) -> dict[str, Any]:
    return {"apiVersion": TRAINJOB_API_VERSION, "kind": "TrainJob",
            "name": meta(trainjob)["name"], "uid": meta(trainjob)["uid"], "controller": True}


# --- the writes --------------------------------------------------------------------------------


# Trainer's TrainJob webhook looks the runtime up in its informer cache, which may not have
# seen a copy created a moment ago: it then denies with "runtime '<name>' not found".
_RUNTIME_LAG_RETRIES = 8


async def create_trainjob(kube: Kube, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    """Create a TrainJob, waiting out Trainer's cache lag for a runtime just created."""
    delay = 0.1
    for attempt in range(_RUNTIME_LAG_RETRIES + 1):
        try:
            created: dict[str, Any] = await kube.create(
                TRAINJOB, body, ns, field_manager=names.ADAPTER_FIELD_MANAGER)
            return created
        except errors.KubeForbidden as exc:
            lagging = "runtime" in str(exc) and "not found" in str(exc)
            if not lagging or attempt == _RUNTIME_LAG_RETRIES:
                raise
            log.debug("Trainer has not seen the runtime copy yet; retrying in %.1fs", delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
    raise AssertionError("unreachable")


async def start(kube: Kube, settings: Settings, req: StartRequest) -> ObjectRef:
    """Start ``req`` closed; see the module docstring."""
    req, name, image, runtime = validate(req)
    ns = settings.namespace
    digest = spec_hash(req)
    labels = job_labels(req)

    existing = await kube.get_or_none(TRAINJOB, name, ns)
    if existing is not None:
        _same_or_conflict(existing, digest, f"TrainJob {ns}/{name}")
    source = await _read_runtime(kube, ns, runtime)
    wanted_copy = runtime_copy(source, name=name, namespace=ns, labels=labels, digest=digest,
                               image=image)
    rt = await _ensure_copy(kube, ns, name, wanted_copy, digest)
    if existing is None:
        try:
            existing = await create_trainjob(
                kube, ns, trainjob_body(req, settings, name=name, image=image, digest=digest))
        except errors.KubeConflict:
            existing = await kube.get(TRAINJOB, name, ns)
            _same_or_conflict(existing, digest, f"TrainJob {ns}/{name}")
    if not any(o.get("uid") == meta(existing)["uid"]
               for o in meta(rt).get("ownerReferences") or []):
        await kube.patch(TRAINING_RUNTIME, name, {"metadata": {
            "ownerReferences": [owner_reference(existing)]}}, ns)
    if settings.kueue is not None:
        await _wait_for_workload(kube, settings, existing)
    return ObjectRef(namespace=ns, name=name, kind="TrainJob", api_version=TRAINJOB_API_VERSION,
                     uid=str(meta(existing)["uid"]))


def _same_or_conflict(obj: Mapping[str, Any], digest: str, what: str) -> None:
    if meta(obj).get("deletionTimestamp"):
        raise errors.ConflictError(f"{what} is being deleted; wait for StopJob to finish")
    theirs = annotations_of(obj).get(names.SPEC_HASH)
    if theirs != digest:
        raise errors.ConflictError(
            f"{what} exists with a different spec (spec-hash {theirs or 'none'}); the same "
            "job and submission can be started only with the same request")


async def _read_runtime(kube: Kube, namespace: str, runtime: RuntimeRef) -> dict[str, Any]:
    if runtime.kind == KIND_CLUSTER_TRAINING_RUNTIME:
        found = await kube.get_or_none(CLUSTER_TRAINING_RUNTIME, runtime.runtime)
    else:
        found = await kube.get_or_none(TRAINING_RUNTIME, runtime.runtime, namespace)
    if found is None:
        where = "" if runtime.kind == KIND_CLUSTER_TRAINING_RUNTIME else f" in {namespace}"
        raise errors.SpecError(
            f"spec.extensions.RuntimeRef: {runtime.kind} {runtime.runtime}{where} not found",
            field="spec.extensions.RuntimeRef")
    return found


async def _ensure_copy(kube: Kube, namespace: str, name: str, wanted: dict[str, Any],
                       digest: str) -> dict[str, Any]:
    for _ in range(3):
        have = await kube.get_or_none(TRAINING_RUNTIME, name, namespace)
        if have is None:
            try:
                created: dict[str, Any] = await kube.create(
                    TRAINING_RUNTIME, wanted, namespace, field_manager=names.ADAPTER_FIELD_MANAGER)
                return created
            except errors.KubeConflict:
                continue
        if annotations_of(have).get(names.SPEC_HASH) == digest:
            return have
        if labels_of(have).get(names.JOB_ID_LABEL) != labels_of(wanted).get(names.JOB_ID_LABEL) \
                or meta(have).get("ownerReferences"):
            raise errors.ConflictError(
                f"TrainingRuntime {namespace}/{name} exists and is not this request's copy")
        # A copy left by an interrupted Start of a different request, never owned: replace it.
        await kube.delete(TRAINING_RUNTIME, name, namespace, uid=meta(have)["uid"])
    raise errors.ConflictError(f"TrainingRuntime {namespace}/{name} kept changing")


async def _wait_for_workload(kube: Kube, settings: Settings, trainjob: Mapping[str, Any]) -> None:
    uid = meta(trainjob)["uid"]
    async with within(deadline_after(settings.timeouts.start),
                      f"Start of TrainJob {meta(trainjob)['name']}: waiting for Kueue's "
                      f"Workload ({settings.timeouts.start})"):
        await wait_for(kube, WORKLOAD, settings.namespace, lambda wls: True if wls else None,
                       label_selector=f"{names.KUEUE_JOB_UID_LABEL}={uid}")

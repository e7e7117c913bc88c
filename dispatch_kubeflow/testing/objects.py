"""The fake's objects: one submission's TrainJob, Workload and pods, as the API server holds
them, in memory.

The fake keeps the very fields the library reads (:data:`dispatch_kubeflow.state.TRAINJOB_READS`
and its kin) in the shape Kubernetes gives them, so that the library's own pure functions judge
them: :func:`dispatch_kubeflow.state.observe` says the state, :func:`dispatch_kubeflow.jobs.listing`
lists, :func:`dispatch_kubeflow.output.current_pod` picks the pod a log is read from. The
TrainJob is the one Start would create (:func:`dispatch_kubeflow.start.trainjob_body`), and each
pod carries the identity the admission webhook would inject
(:class:`dispatch_kubeflow.core.identity.ExecutionIdentity`). What is modelled is what those
functions read; the rest (pod templates, JobSet and Job bodies) is left out.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from dispatch_kubeflow import state
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.admission_count import admissions
from dispatch_kubeflow.core.execution import is_alive
from dispatch_kubeflow.core.identity import ExecutionIdentity
from dispatch_kubeflow.core.times import format_microtime, format_time
from dispatch_kubeflow.kube.resources import JOB, JOBSET, POD, TRAINING_RUNTIME, TRAINJOB, WORKLOAD
from dispatch_kubeflow.model import ObjectRef, Observation, OutputStream
from dispatch_kubeflow.start import Validated

Obj = dict[str, Any]
_serial = itertools.count(1)
NODE = "fake-node"
"""The node every pod of the fake runs on."""


def now_text() -> str:
    """Now, as a creationTimestamp with microseconds (so objects made in one second order)."""
    return format_microtime(datetime.now(UTC))


def condition(obj: Obj, kind: str, status: bool, reason: str = "", message: str = "") -> None:
    """Set ``obj``'s condition ``kind`` (replacing one of that type)."""
    conds = [c for c in obj.setdefault("status", {}).setdefault("conditions", [])
             if c.get("type") != kind]
    conds.append({"type": kind, "status": "True" if status else "False", "reason": reason,
                  "message": message, "lastTransitionTime": format_time(datetime.now(UTC))})
    obj["status"]["conditions"] = conds


def notes(obj: Obj) -> dict[str, str]:
    """The object's annotations, writable (made when missing)."""
    ann: dict[str, str] = obj.setdefault("metadata", {}).setdefault("annotations", {})
    return ann


@dataclass
class FakeJob:
    """One submission of a job: its objects and its pods' logs.

    ``restarts`` is J, the JobSet's restart count: it rises with each restart and, as JobSet's
    does, survives a suspend and resume (a readmission raises A, not J).
    """

    valid: Validated
    trainjob: Obj
    workload: Obj | None
    pods: dict[str, Obj] = field(default_factory=dict)
    logs: dict[str, list[tuple[OutputStream, bytes]]] = field(default_factory=dict)
    restarts: int = 0
    ever_ran: bool = False
    """Whether an execution's pods were ever made (the JobSet and its Job exist since)."""

    @classmethod
    def made(cls, valid: Validated, body: Obj, kueue: bool) -> FakeJob:
        """The objects Start makes (and, in Kueue mode, Kueue's Workload for the TrainJob)."""
        uid = str(uuid.uuid4())
        body["metadata"].update(uid=uid, creationTimestamp=now_text(),
                                resourceVersion=str(next(_serial)))
        body["status"] = {"conditions": []}
        workload = None
        if kueue:
            name = body["metadata"]["name"]
            workload = {
                "metadata": {"name": f"trainjob-{name}-{uid[:5]}",
                             "namespace": body["metadata"]["namespace"],
                             "uid": str(uuid.uuid4()), "creationTimestamp": now_text(),
                             "labels": {names.KUEUE_JOB_UID_LABEL: uid}, "annotations": {},
                             "ownerReferences": [{"kind": "TrainJob", "name": name,
                                                  "uid": uid, "controller": True}]},
                "spec": {"active": True},
                "status": {"conditions": [], "admissionChecks": []},
            }
        return cls(valid, body, workload)

    # --- what the library reads ---------------------------------------------------------
    @property
    def name(self) -> str:
        return str(self.trainjob["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.trainjob["metadata"]["namespace"])

    @property
    def uid(self) -> str:
        return str(self.trainjob["metadata"]["uid"])

    @property
    def ref(self) -> ObjectRef:
        """What Start returns for this job."""
        return ObjectRef(namespace=self.namespace, name=self.name, kind="TrainJob",
                         api_version=TRAINJOB.api_version, uid=self.uid)

    @property
    def admissions(self) -> int:
        """A, as the TrainJob records it."""
        return admissions(self.trainjob)

    def observe(self) -> Observation:
        """What Inspect says of the job: the library's own table applied to the objects."""
        return state.observe(self.trainjob, self.workload, list(self.pods.values()))

    def alive(self) -> list[Obj]:
        """The pods that still run or are being deleted (the readmission gate's count)."""
        return [p for p in self.pods.values() if is_alive(p)]

    def identity(self) -> ExecutionIdentity:
        """The identity the webhook gives the pods of an execution made now: A from the
        TrainJob, J from the JobSet."""
        req = self.valid.request
        return ExecutionIdentity(str(req.job), req.submission, req.attempt, self.admissions,
                                 self.restarts)

    # --- what controllers do --------------------------------------------------------------
    def set_admissions(self, a: int) -> None:
        notes(self.trainjob)[names.ADMISSION_COUNT] = str(a)

    def make_pods(self) -> None:
        """One pod per rank of a new execution, running, with the execution's identity."""
        ident = self.identity()
        env = [{"name": k, "value": v} for k, v in ident.env().items()]
        labels = {**self.valid.labels, names.JOBSET_NAME_LABEL: self.name,
                  names.RESTART_ATTEMPT_LABEL: str(self.restarts)}
        for rank in range(self.valid.request.spec.nodes):
            pod_name = f"{self.name}-node-0-{rank}-{uuid.uuid4().hex[:5]}"
            self.pods[pod_name] = {
                "metadata": {"name": pod_name, "namespace": self.namespace,
                             "uid": str(uuid.uuid4()), "creationTimestamp": now_text(),
                             "labels": {**labels, names.COMPLETION_INDEX_LABEL: str(rank)}},
                "spec": {"nodeName": NODE,
                         "containers": [{"name": names.TRAINER_CONTAINER, "env": env}]},
                "status": {"phase": "Running"},
            }
            self.logs[pod_name] = []
        self.ever_ran = True

    def end_pods(self, phase: str, *, only_alive: bool = True) -> None:
        """Every pod still running ends in ``phase`` (Succeeded or Failed)."""
        for pod in self.pods.values():
            if not only_alive or pod["status"].get("phase") == "Running":
                pod["status"]["phase"] = phase

    def terminate(self, pods: list[Obj] | None = None) -> list[str]:
        """Mark ``pods`` (default: every alive pod) terminating; their names."""
        chosen = self.alive() if pods is None else pods
        for pod in chosen:
            pod["metadata"].setdefault("deletionTimestamp", format_time(datetime.now(UTC)))
        return [str(p["metadata"]["name"]) for p in chosen]

    def rank_pod(self, rank: int) -> Obj | None:
        """The alive pod of ``rank`` of the current execution."""
        for pod in self.alive():
            if pod["metadata"]["labels"].get(names.COMPLETION_INDEX_LABEL) == str(rank) \
                    and not pod["metadata"].get("deletionTimestamp"):
                return pod
        return None

    def refs(self) -> Iterator[ObjectRef]:
        """Every object of the job that exists, owners first (the order of find's kinds)."""
        ns = self.namespace
        yield self.ref
        if self.workload is not None:
            m = self.workload["metadata"]
            yield ObjectRef(ns, m["name"], WORKLOAD.kind, WORKLOAD.api_version, m["uid"])
        if self.ever_ran:
            yield ObjectRef(ns, self.name, JOBSET.kind, JOBSET.api_version)
            yield ObjectRef(ns, f"{self.name}-node-0", JOB.kind, JOB.api_version)
        yield ObjectRef(ns, self.name, TRAINING_RUNTIME.kind, TRAINING_RUNTIME.api_version)
        for name, pod in sorted(self.pods.items()):
            yield ObjectRef(ns, name, POD.kind, POD.api_version, pod["metadata"]["uid"])

"""What the checks share: one run's connection, backend and job, and the job's spec."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from dispatch_kubeflow.backend import Backend
from dispatch_kubeflow.conformance.failed import CheckFailed
from dispatch_kubeflow.conformance.identity import Identity
from dispatch_kubeflow.conformance.options import MANAGED_BY, Options
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.model import (
    Actor,
    ActorKind,
    CallMeta,
    HoldMeta,
    Image,
    JobID,
    JobSpec,
    ObjectRef,
    RuntimeRef,
)

MARKER = "conformance-ready"
"""What the job's command prints after its identity: the log is complete up to here."""


class Suite:
    """One run of the checks against one cluster: what each check leaves for the next.

    Each check reads what the ones before it made (the backend, the job, the identities
    its executions printed) through the ``need_*`` methods, which fail naming the check
    that should have made it.
    """

    def __init__(self, options: Options, kube: KubeAPI, namespace: str) -> None:
        self.o = options
        self.kube = kube
        self.ns = namespace
        self.backend: Backend | None = None
        self.job: JobID | None = None
        self.ref: ObjectRef | None = None
        self.first: Identity | None = None
        """What the first execution printed (open-running)."""
        self.second: Identity | None = None
        """What the execution after the first release printed (higher-identity)."""
        self.stopped = False

    def need_backend(self) -> Backend:
        if self.backend is None:
            raise CheckFailed("not run: the backend did not open (see preflight)")
        return self.backend

    def need_job(self) -> tuple[Backend, JobID, ObjectRef]:
        backend = self.need_backend()
        if self.job is None or self.ref is None:
            raise CheckFailed("not run: no job was started (see start-gated)")
        return backend, self.job, self.ref

    def settings(self) -> dict[str, Any]:
        cluster: dict[str, Any] = {}
        if self.o.kubeconfig:
            cluster["kubeconfig"] = self.o.kubeconfig
        if self.o.context:
            cluster["context"] = self.o.context
        return {
            "cluster": cluster,
            "namespace": self.ns,
            "probeRuntime": {"kind": "ClusterTrainingRuntime", "name": self.o.runtime},
            "kueue": {"localQueue": "lq", "admissionCheck": self.o.admission_check},
            "timeouts": {"request": "10s", "stopJob": "3m"},
        }

    def spec(self) -> JobSpec:
        linger = max(0, min(self.o.linger, 25))
        command = (f"env | grep '^DISPATCH_' | sort; echo {MARKER}; "
                   f"trap 'sleep {linger}; exit 143' TERM; while :; do sleep 1; done")
        return JobSpec(["/bin/sh", "-c", command], 2,
                       [Image(self.o.image), RuntimeRef("ClusterTrainingRuntime",
                                                        self.o.runtime)])

    def hold_meta(self, instance: int) -> HoldMeta:
        now = datetime.now(UTC)
        return HoldMeta(instance, Actor(ActorKind.SYSTEM, MANAGED_BY),
                        CallMeta(now + timedelta(minutes=1)), until=now + timedelta(hours=1),
                        reason="the conformance suite's hold")

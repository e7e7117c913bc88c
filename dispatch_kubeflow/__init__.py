"""dispatch-kubeflow: run dispatch jobs on Kubernetes as Kubeflow Trainer TrainJobs.

Open a backend from its settings section, start jobs closed, open them, inspect, hold,
release, read their output and stop them; list a namespace's jobs and read their Events::

    from dispatch_kubeflow import AdapterConfig, open_backend

    async with await open_backend(AdapterConfig("kubeflow", settings_json)) as backend:
        ref = await backend.start(StartRequest(job, 1, 1, spec))
        await backend.open(ref)

Everything a caller needs is importable from here; :mod:`dispatch_kubeflow.errors` holds
the error tree.
"""

from dispatch_kubeflow.backend import NAME, Backend, factory
from dispatch_kubeflow.errors import (
    ConflictError,
    DeadlineExceeded,
    DispatchError,
    HoldError,
    KubeError,
    NotFound,
    ObserveOnlyError,
    SettingsError,
    SpecError,
    UnsupportedError,
)
from dispatch_kubeflow.events import JobEvent
from dispatch_kubeflow.jobs import JobInfo
from dispatch_kubeflow.model import (
    KIND_CLUSTER_TRAINING_RUNTIME,
    KIND_TRAINING_RUNTIME,
    Actor,
    ActorKind,
    CallMeta,
    Capability,
    CapabilitySource,
    CapabilityStatus,
    CapabilityValue,
    Cause,
    Extension,
    HoldMeta,
    Image,
    JobID,
    JobSpec,
    ObjectRef,
    ObjectState,
    Observation,
    OutputStream,
    ReleaseOutcome,
    RuntimeRef,
    StartRequest,
    StopReport,
)
from dispatch_kubeflow.output import LogStream
from dispatch_kubeflow.registry import AdapterConfig, open_backend, register, registered
from dispatch_kubeflow.settings import Settings

__all__ = [
    "KIND_CLUSTER_TRAINING_RUNTIME",
    "KIND_TRAINING_RUNTIME",
    "NAME",
    "Actor",
    "ActorKind",
    "AdapterConfig",
    "Backend",
    "CallMeta",
    "Capability",
    "CapabilitySource",
    "CapabilityStatus",
    "CapabilityValue",
    "Cause",
    "ConflictError",
    "DeadlineExceeded",
    "DispatchError",
    "Extension",
    "HoldError",
    "HoldMeta",
    "Image",
    "JobEvent",
    "JobID",
    "JobInfo",
    "JobSpec",
    "KubeError",
    "LogStream",
    "NotFound",
    "ObjectRef",
    "ObjectState",
    "Observation",
    "ObserveOnlyError",
    "OutputStream",
    "ReleaseOutcome",
    "RuntimeRef",
    "Settings",
    "SettingsError",
    "SpecError",
    "StartRequest",
    "StopReport",
    "UnsupportedError",
    "factory",
    "open_backend",
    "register",
    "registered",
]

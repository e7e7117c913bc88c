"""dispatch-kubeflow: run dispatch jobs on Kubernetes as Kubeflow Trainer TrainJobs.

Open a backend from its settings section, start jobs closed, open them, inspect, hold,
release, read their output and stop them; list a namespace's jobs and read their Events::

    from dispatch_kubeflow import AdapterConfig, open_backend

    async with open_backend(AdapterConfig("kubeflow", settings_json)) as backend:
        ref = await backend.start(StartRequest(job, 1, 1, spec))
        await backend.open(ref)

Everything a caller needs is importable from here; `dispatch_kubeflow.errors` holds
the error tree. The API reference (docs/reference/api.md) documents each name.

The names are loaded on first use (PEP 562), so that importing a part of the package, such
as `dispatch_kubeflow.core` and `dispatch_kubeflow.kube` (all the admission
controller uses), does not load the rest of the library.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from typing import TYPE_CHECKING, Any


def _version() -> str:
    try:
        return importlib.metadata.version("dispatch-kubeflow")
    except importlib.metadata.PackageNotFoundError:  # imported from a tree never installed
        return "0+unknown"


__version__ = _version()
"""The installed distribution's version (``pip show dispatch-kubeflow``)."""

if TYPE_CHECKING:
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
        AdapterConfig,
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
    from dispatch_kubeflow.registry import open_backend, register, registered
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
    "__version__",
    "factory",
    "open_backend",
    "register",
    "registered",
]

_WHERE: dict[str, str] = {
    "Backend": "dispatch_kubeflow.backend",
    "NAME": "dispatch_kubeflow.backend",
    "factory": "dispatch_kubeflow.backend",
    "ConflictError": "dispatch_kubeflow.errors",
    "DeadlineExceeded": "dispatch_kubeflow.errors",
    "DispatchError": "dispatch_kubeflow.errors",
    "HoldError": "dispatch_kubeflow.errors",
    "KubeError": "dispatch_kubeflow.errors",
    "NotFound": "dispatch_kubeflow.errors",
    "ObserveOnlyError": "dispatch_kubeflow.errors",
    "SettingsError": "dispatch_kubeflow.errors",
    "SpecError": "dispatch_kubeflow.errors",
    "UnsupportedError": "dispatch_kubeflow.errors",
    "JobEvent": "dispatch_kubeflow.events",
    "JobInfo": "dispatch_kubeflow.jobs",
    "Actor": "dispatch_kubeflow.model",
    "ActorKind": "dispatch_kubeflow.model",
    "CallMeta": "dispatch_kubeflow.model",
    "Capability": "dispatch_kubeflow.model",
    "CapabilitySource": "dispatch_kubeflow.model",
    "CapabilityStatus": "dispatch_kubeflow.model",
    "CapabilityValue": "dispatch_kubeflow.model",
    "Cause": "dispatch_kubeflow.model",
    "Extension": "dispatch_kubeflow.model",
    "HoldMeta": "dispatch_kubeflow.model",
    "Image": "dispatch_kubeflow.model",
    "JobID": "dispatch_kubeflow.model",
    "JobSpec": "dispatch_kubeflow.model",
    "KIND_CLUSTER_TRAINING_RUNTIME": "dispatch_kubeflow.model",
    "KIND_TRAINING_RUNTIME": "dispatch_kubeflow.model",
    "ObjectRef": "dispatch_kubeflow.model",
    "ObjectState": "dispatch_kubeflow.model",
    "Observation": "dispatch_kubeflow.model",
    "OutputStream": "dispatch_kubeflow.model",
    "ReleaseOutcome": "dispatch_kubeflow.model",
    "RuntimeRef": "dispatch_kubeflow.model",
    "StartRequest": "dispatch_kubeflow.model",
    "StopReport": "dispatch_kubeflow.model",
    "LogStream": "dispatch_kubeflow.output",
    "AdapterConfig": "dispatch_kubeflow.model",
    "open_backend": "dispatch_kubeflow.registry",
    "register": "dispatch_kubeflow.registry",
    "registered": "dispatch_kubeflow.registry",
    "Settings": "dispatch_kubeflow.settings",
}
"""Which module defines each public name."""


if not TYPE_CHECKING:  # to mypy the names are the imports above: a typo is an error

    def __getattr__(name: str) -> Any:
        """A public name, or a submodule (``dispatch_kubeflow.errors``), loaded on first
        use."""
        where = _WHERE.get(name)
        if where is not None:
            value = getattr(importlib.import_module(where), name)
        elif not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}"):
            value = importlib.import_module(f"{__name__}.{name}")
        else:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        globals()[name] = value  # loaded once: the next lookup does not come here
        return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

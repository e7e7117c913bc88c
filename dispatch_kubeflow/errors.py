"""The one error tree of dispatch-kubeflow (defined in :mod:`dispatch_kubeflow.core.errors`).

This module is the public name of the tree: ``from dispatch_kubeflow import errors`` and
``dispatch_kubeflow.errors.KubeNotFound`` keep working. The tree itself lives in the core so
that the admission controller can raise and catch the same classes without loading the
library.
"""

from dispatch_kubeflow.core.errors import (
    ConflictError,
    DeadlineExceeded,
    DispatchError,
    HoldError,
    KubeBadResponse,
    KubeConflict,
    KubeError,
    KubeForbidden,
    KubeGone,
    KubeInvalid,
    KubeNoAnswer,
    KubeNotFound,
    KubeStreamBroken,
    KubeUnreachable,
    KubeWebhookDenied,
    NotFound,
    ObserveOnlyError,
    SettingsError,
    SpecError,
    StatusCause,
    UnsupportedError,
    kube_error,
)

__all__ = [
    "ConflictError",
    "DeadlineExceeded",
    "DispatchError",
    "HoldError",
    "KubeBadResponse",
    "KubeConflict",
    "KubeError",
    "KubeForbidden",
    "KubeGone",
    "KubeInvalid",
    "KubeNoAnswer",
    "KubeNotFound",
    "KubeStreamBroken",
    "KubeUnreachable",
    "KubeWebhookDenied",
    "NotFound",
    "ObserveOnlyError",
    "SettingsError",
    "SpecError",
    "StatusCause",
    "UnsupportedError",
    "kube_error",
]

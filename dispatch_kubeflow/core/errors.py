"""The one error tree of dispatch-kubeflow.

::

    DispatchError
    ├── SettingsError          bad settings section: names the field and what it accepts
    ├── SpecError              bad job spec, job id, name or request
    ├── ObserveOnlyError       Start refused: a capability is no or unknown (carries reasons)
    ├── ConflictError          same job and submission, different spec
    ├── HoldError              release of another hold instance, hold in plain mode misuse
    ├── DeadlineExceeded       a call's own deadline passed
    ├── NotFound               the job or object does not exist
    ├── UnsupportedError       the cluster cannot do what was asked (e.g. split stderr)
    └── KubeError              the API server answered with an error (status, reason)
        ├── KubeNotFound       404
        ├── KubeConflict       409 (AlreadyExists or a precondition / version conflict)
        ├── KubeGone           410 (a watch's resourceVersion expired)
        ├── KubeForbidden      401 / 403
        └── KubeInvalid        422 (or a webhook's denial)

Every error carries a message meant for a person: what is wrong and how to fix it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class DispatchError(Exception):
    """Root of every error this package raises."""


class SettingsError(DispatchError):
    """The settings section is invalid. ``field`` is the dotted path of the first problem."""

    def __init__(self, message: str, *, field: str = "", problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.field = field
        self.problems = tuple(problems) or (message,)


class SpecError(DispatchError):
    """A job spec, job id or request is invalid; ``field`` names the part."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


class ObserveOnlyError(DispatchError):
    """The backend is observe-only: a preflight proof failed, so Start refuses."""

    def __init__(self, message: str, *, reasons: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.reasons = tuple(reasons)


class ConflictError(DispatchError):
    """A different spec was started under the same job and submission."""


class HoldError(DispatchError):
    """A hold or release cannot be done as asked (for example another instance's hold)."""


class DeadlineExceeded(DispatchError, TimeoutError):
    """A call's own deadline passed before it finished."""


class NotFound(DispatchError):
    """The job or object does not exist."""


class UnsupportedError(DispatchError):
    """The cluster cannot do what was asked (for example read stderr apart from stdout)."""


class KubeError(DispatchError):
    """The Kubernetes API answered with an error status."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        reason: str = "",
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.body = body or {}


class KubeNotFound(KubeError):
    """404."""


class KubeConflict(KubeError):
    """409: the object exists already, or a precondition or resourceVersion did not match."""


class KubeGone(KubeError):
    """410: the resourceVersion a watch started from is too old; list again."""


class KubeForbidden(KubeError):
    """401 or 403."""


class KubeInvalid(KubeError):
    """422, or an admission webhook's denial (400 with reason BadRequest / Invalid)."""


_BY_STATUS: dict[int, type[KubeError]] = {
    401: KubeForbidden,
    403: KubeForbidden,
    404: KubeNotFound,
    409: KubeConflict,
    410: KubeGone,
    422: KubeInvalid,
}


def kube_error(status: int, body: dict[str, Any] | None, fallback: str = "") -> KubeError:
    """Build the right KubeError from an HTTP status and a metav1.Status body."""
    body = body or {}
    message = str(body.get("message") or fallback or f"HTTP {status}")
    reason = str(body.get("reason") or "")
    cls = _BY_STATUS.get(status, KubeError)
    return cls(f"{message} ({status} {reason})".rstrip(" ()") if reason else message,
               status=status, reason=reason, body=body)

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
    └── KubeError              the API server answered with an error (status, reason, causes)
        ├── KubeNotFound       404
        ├── KubeConflict       409 (AlreadyExists or a precondition / version conflict)
        ├── KubeGone           410 (a watch's resourceVersion expired)
        ├── KubeForbidden      401 / 403 (RBAC, or an admission policy's denial)
        ├── KubeInvalid        400 / 422
        │   └── KubeWebhookDenied  an admission webhook's denial (400, 403 or 422)
        └── KubeNoAnswer       no (whole) answer came: status 0; says if it is transient
            ├── KubeUnreachable   no answer at all (refused, reset, TLS, timed out)
            ├── KubeStreamBroken  the answer broke off or went silent while it was read
            └── KubeBadResponse   the answer was not what the API server sends

Every error carries a message meant for a person: what is wrong and how to fix it. A
`KubeError` is built from the API server's Status object in one place,
`kube_error`: its class from the HTTP status (and the webhook denial), its ``reason``
and ``causes`` (``details.causes``: reason, message and field of each) from the body, so no
caller reads a message to tell errors apart. A failure below HTTP is a `KubeNoAnswer`,
its class chosen by the transport from the network library's exception type.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Self


class DispatchError(Exception):
    """Root of every error this package raises.

    ``str(error)`` is the message for a person: what is wrong and how to fix it.
    """


class SettingsError(DispatchError):
    """The settings section is invalid. ``field`` is the dotted path of the first problem.

    Also raised when the kubeconfig file (``cluster.kubeconfig``) or the pod's service
    account (``cluster.inCluster``) cannot be loaded, and for an unknown backend name.

    Attributes:
        field: The dotted key of the first problem (``timeouts.stopJob``); "" for the
            whole section.
        problems: Every problem found, one line each (``<key>: <what it accepts>``).
    """

    def __init__(self, message: str, *, field: str = "", problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.field = field
        self.problems = tuple(problems) or (message,)


class SpecError(DispatchError):
    """A job spec, job id or request is invalid; ``field`` names the part.

    Raised before anything is written, also by an observe-only backend.

    Attributes:
        field: The part at fault: ``spec.nodes``, ``spec.extensions.Image.ref``, ``job``,
            ``ref``, ``timeout``, ``hold.instance``, ...
    """

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


class ObserveOnlyError(DispatchError):
    """The backend is observe-only: a preflight proof failed, so Start refuses.

    Open and Release refuse too; the other calls work.

    Attributes:
        reasons: Why, one line per capability that is not yes (as
            [observe_only_reasons][dispatch_kubeflow.Backend.observe_only_reasons]).
    """

    def __init__(self, message: str, *, reasons: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.reasons = tuple(reasons)


class ConflictError(DispatchError):
    """A different spec was started under the same job and submission."""


class HoldError(DispatchError):
    """A hold or release cannot be done as asked (for example another instance's hold)."""


class DeadlineExceeded(DispatchError, TimeoutError):
    """A call's own deadline passed before it finished.

    Also a ``TimeoutError``, so ``except TimeoutError`` catches it.
    """


class NotFound(DispatchError):
    """The job or object does not exist."""


class UnsupportedError(DispatchError):
    """The cluster cannot do what was asked (for example read stderr apart from stdout)."""


@dataclass(frozen=True, slots=True)
class StatusCause:
    """One of a Status' ``details.causes``: why, in which field (``spec.runtimeRef``)."""

    reason: str = ""
    """``FieldValueInvalid``, ``FieldValueRequired``, ``FieldValueForbidden``, ..."""
    message: str = ""
    """What is wrong with the field, as the server says it."""
    field: str = ""
    """The field's path (``spec.runtimeRef``), "" when none is named."""


class KubeError(DispatchError):
    """The Kubernetes API answered with an error status.

    ``status`` is the HTTP status (0 when no answer came: the error is then a
    [KubeNoAnswer][dispatch_kubeflow.errors.KubeNoAnswer], and ``reason`` its kind),
    ``reason`` the Status' reason, ``causes`` its ``details.causes`` and ``body`` the whole
    Status object. Tell errors apart by their class (``dispatch_kubeflow.errors``), not
    their message.

    Attributes:
        status: The HTTP status; 0 when no answer came.
        reason: The Status' reason (``NotFound``, ``AlreadyExists``, ``Invalid``, ...), or
            the no-answer kind.
        body: The whole Status object ({} when none came).
        causes: The Status' ``details.causes``.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        reason: str = "",
        body: dict[str, Any] | None = None,
        causes: Sequence[StatusCause] = (),
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.body = body or {}
        self.causes = tuple(causes)

    @property
    def retry_after(self) -> int | None:
        """The Status' ``details.retryAfterSeconds`` (a 429's or a 503's advice), if any.

        None when the Status gives none.
        """
        details = self.body.get("details")
        seconds = details.get("retryAfterSeconds") if isinstance(details, dict) else None
        return seconds if isinstance(seconds, int) and seconds >= 0 else None

    def restated(self, message: str) -> Self:
        """The same failure (class, status, causes; a no-answer's ``transient`` and
        ``sent``) told with another message.

        Args:
            message: The new message.

        Returns:
            A copy of this error with the message.
        """
        new = copy.copy(self)
        new.args = (message,)
        return new

    def names_field(self, path: str) -> bool:
        """Whether a cause names this field or one inside it (case-insensitive, as
        Trainer spells ``spec.RuntimeRef`` in one place).

        Args:
            path: A field's path (``spec.runtimeRef``).

        Returns:
            True when a cause's field is ``path`` or below it (``spec.runtimeRef.name``).
        """
        want = path.lower()
        return any(c.field.lower() == want or c.field.lower().startswith((want + ".", want + "["))
                   for c in self.causes)


class KubeNotFound(KubeError):
    """404: the object (or the kind) does not exist."""


class KubeConflict(KubeError):
    """409: the object exists already, or a precondition or resourceVersion did not match."""


class KubeGone(KubeError):
    """410: the resourceVersion a watch started from is too old; list again."""


class KubeForbidden(KubeError):
    """401 or 403: RBAC refused, or an admission policy (ValidatingAdmissionPolicy) denied."""


class KubeInvalid(KubeError):
    """400 (BadRequest) or 422 (Invalid): the request or the object is not acceptable."""


class KubeWebhookDenied(KubeInvalid):
    """An admission webhook denied the request, whatever code it chose (400, 403 or 422).

    ``webhook`` is its name (``validator.trainjob.trainer.kubeflow.org``), ``denial`` its own
    message, without the API server's prefix.

    Attributes:
        webhook: The webhook's name.
        denial: The webhook's own message (its field errors are also in ``causes``).
    """

    def __init__(self, message: str, *, webhook: str = "", denial: str = "",
                 **kw: Any) -> None:
        super().__init__(message, **kw)
        self.webhook = webhook
        self.denial = denial


class KubeNoAnswer(KubeError):
    """No whole answer came from the API server: ``status`` is 0 and ``reason`` the kind
    (``Unreachable``, ``StreamBroken``, ``BadResponse``), kept for callers that print them.

    ``transient``: whether asking again may bring an answer. ``sent``: whether the request
    may have reached the server, so that a write may have taken effect; one that was never
    sent is safe to send again whatever its verb (`dispatch_kubeflow.kube.retry`).

    Attributes:
        transient: Whether asking again may bring an answer.
        sent: Whether the request may have reached the server (a write may have taken
            effect).
    """

    KIND = ""
    """The ``reason`` of this kind of no-answer."""

    def __init__(self, message: str, *, transient: bool = True, sent: bool = True) -> None:
        super().__init__(message, status=0, reason=self.KIND)
        self.transient = transient
        self.sent = sent


class KubeUnreachable(KubeNoAnswer):
    """No answer at all: the connection was refused, reset, timed out, or its TLS failed.
    ``sent`` is False when no connection was made; a TLS failure is not ``transient`` (a
    certificate the client rejects will not mend by itself)."""

    KIND = "Unreachable"
    """The ``reason`` of this kind: ``Unreachable``."""


class KubeStreamBroken(KubeNoAnswer):
    """The answer broke off, or went silent too long, while its body was read (the request
    was sent)."""

    KIND = "StreamBroken"
    """The ``reason`` of this kind: ``StreamBroken``."""

    def __init__(self, message: str) -> None:
        super().__init__(message, transient=True, sent=True)


class KubeBadResponse(KubeNoAnswer):
    """The body was not what the API server sends (not JSON, not a watch event, an event
    past any object's size): a proxy's page, or a stream cut and joined. Transient as a
    broken stream is: asked again, the server itself may answer."""

    KIND = "BadResponse"
    """The ``reason`` of this kind: ``BadResponse``."""

    def __init__(self, message: str) -> None:
        super().__init__(message, transient=True, sent=True)


_BY_STATUS: dict[int, type[KubeError]] = {
    400: KubeInvalid,
    401: KubeForbidden,
    403: KubeForbidden,
    404: KubeNotFound,
    409: KubeConflict,
    410: KubeGone,
    422: KubeInvalid,
}

# The API server marks a webhook's denial in the message alone: it passes the webhook's own
# Status through (code, reason and details as the webhook chose them) and only prefixes the
# message (k8s.io/apiserver .../webhook/errors ToStatusErr). So that prefix is the one
# sign of a denial, read here and nowhere else.
_WEBHOOK_DENIAL = re.compile(r'admission webhook "(?P<name>[^"]+)" denied the request'
                             r"(?::\s*(?P<denial>.*))?", re.DOTALL)
_DENIAL_CODES = frozenset({400, 403, 422})

# A webhook built on controller-runtime answers the field errors its validator returns as a
# plain denial (403 Forbidden, the errors' text as the message, no details), so their fields
# are only in the text, in apimachinery's field.Error form ``<path>: <type>: <detail>``.
_FIELD_TYPES = {
    "Invalid value": "FieldValueInvalid",
    "Required value": "FieldValueRequired",
    "Unsupported value": "FieldValueNotSupported",
    "Forbidden": "FieldValueForbidden",
    "Duplicate value": "FieldValueDuplicate",
    "Not found": "FieldValueNotFound",
    "Too long": "FieldValueTooLong",
    "Too many": "FieldValueTooMany",
    "Internal error": "InternalError",
    "Invalid value type": "FieldValueTypeInvalid",
}
_FIELD_ERROR = re.compile(r"(?P<field>[A-Za-z_][\w.\[\]-]*): (?P<type>"
                          + "|".join(re.escape(t) for t in _FIELD_TYPES) + r")\b")


def _causes(details: Any) -> list[StatusCause]:
    if not isinstance(details, dict):
        return []
    return [StatusCause(str(c.get("reason") or ""), str(c.get("message") or ""),
                        str(c.get("field") or ""))
            for c in details.get("causes") or [] if isinstance(c, dict)]


# Kueue's TrainJob webhook (vtrainjob.kb.io) refuses a TrainJob whose runtime its cache has
# not seen yet with a bare error and no field (pkg/controller/jobs/trainjob, v0.19:
# "runtime '<name>' not found"); Trainer's own says spec.runtimeRef. Both mean the same.
_KUEUE_RUNTIME_NOT_FOUND = re.compile(r"runtime '[^']*' not found$")


def _denial_causes(denial: str) -> list[StatusCause]:
    """The field errors of a denial's text (each of an aggregate ``[a, b]``)."""
    if _KUEUE_RUNTIME_NOT_FOUND.match(denial):
        return [StatusCause("FieldValueNotFound", denial, "spec.runtimeRef")]
    text = denial[1:-1] if denial.startswith("[") and denial.endswith("]") else denial
    starts = [m for m in _FIELD_ERROR.finditer(text)
              if m.start() == 0 or text[m.start() - 2:m.start()] == ", "]
    if not starts or starts[0].start() != 0:
        return []
    ends = [m.start() for m in starts[1:]] + [len(text)]
    return [StatusCause(_FIELD_TYPES[m["type"]], text[m.start():end].rstrip(", "), m["field"])
            for m, end in zip(starts, ends, strict=True)]


def kube_error(status: int, body: dict[str, Any] | None, fallback: str = "") -> KubeError:
    """The KubeError of an HTTP status and the metav1.Status body the API server sent.

    The message is the Status' message (else ``fallback``, e.g. the request) followed by
    ``(<status> <reason>)``. The library builds every KubeError here; a service meets it
    only to build the same errors in a fake of its own.

    Args:
        status: The HTTP status.
        body: The Status object the server sent (None: none).
        fallback: The message when the Status has none.

    Returns:
        The error of the status's class (a
            [KubeWebhookDenied][dispatch_kubeflow.errors.KubeWebhookDenied] for a webhook's
            denial); not raised.
    """
    body = body or {}
    text = str(body.get("message") or fallback)
    reason = str(body.get("reason") or "")
    code = f"{status} {reason}" if reason else str(status)
    message = f"{text} ({code})" if text else f"HTTP {code}"
    causes = _causes(body.get("details"))
    denied = _WEBHOOK_DENIAL.match(str(body.get("message") or ""))
    if denied is not None and status in _DENIAL_CODES:
        denial = (denied["denial"] or "").strip()
        return KubeWebhookDenied(message, status=status, reason=reason, body=body,
                                 causes=causes or _denial_causes(denial),
                                 webhook=denied["name"], denial=denial)
    cls = _BY_STATUS.get(status, KubeError)
    return cls(message, status=status, reason=reason, body=body, causes=causes)

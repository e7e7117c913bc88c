"""The backend-neutral dispatch model: what a caller hands a backend and gets back.

Every type here is a frozen dataclass (or an enum, or :class:`JobID`, a validated ``str``),
so values can be shared between tasks and used as keys. Nothing here talks to Kubernetes;
backend-specific rules (for example that the Kubeflow backend needs an :class:`Image` and a
:class:`RuntimeRef`) are checked by the backend before it writes anything.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TypeVar

from dispatch_kubeflow.core import identity
from dispatch_kubeflow.errors import SpecError

# --- JobID ---------------------------------------------------------------------------------

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_DECODE = {c: i for i, c in enumerate(_CROCKFORD)}
_JOB_ID_RE = re.compile(r"^[0-7][0-9A-HJKMNP-TV-Z]{25}$")
_TIME_BITS = 48
_RANDOM_BYTES = 10


class JobID(str):
    """A job's identity: 26 upper-case Crockford base32 characters, ULID layout.

    The first 10 characters are the creation time in milliseconds and the remaining 16 are
    80 random bits, so ids sort by creation time as plain strings. Object names carry the
    id in lower case (Kubernetes names must be lower case); labels carry it as given.
    ``JobID("01j...")`` accepts either case and normalises to upper case; anything else
    raises :class:`~dispatch_kubeflow.errors.SpecError`.
    """

    __slots__ = ()

    def __new__(cls, value: str) -> JobID:
        if isinstance(value, JobID):
            return value
        if not isinstance(value, str):
            raise SpecError(f"job: a job id must be a string, got {type(value).__name__}",
                            field="job")
        upper = value.strip().upper()
        if not _JOB_ID_RE.match(upper):
            raise SpecError(
                f"job: {value!r} is not a job id: expected 26 Crockford base32 characters "
                "(0-9, A-Z without I, L, O, U; the first 0-7), as made by JobID.new()",
                field="job",
            )
        return super().__new__(cls, upper)

    @classmethod
    def new(cls, at: datetime | None = None, entropy: bytes | None = None) -> JobID:
        """A new id for time ``at`` (default now) and 10 bytes of ``entropy`` (default random)."""
        when = at or datetime.now(UTC)
        if when.tzinfo is None:
            raise SpecError("at: a job id's time must be timezone-aware", field="at")
        millis = int(when.timestamp() * 1000)
        if not 0 <= millis < 1 << _TIME_BITS:
            raise SpecError(f"at: {when.isoformat()} is outside the range a job id can hold",
                            field="at")
        rand = os.urandom(_RANDOM_BYTES) if entropy is None else entropy
        if len(rand) != _RANDOM_BYTES:
            raise SpecError(f"entropy: need exactly {_RANDOM_BYTES} bytes, got {len(rand)}",
                            field="entropy")
        n = (millis << 80) | int.from_bytes(rand, "big")
        chars = [_CROCKFORD[(n >> (5 * i)) & 31] for i in range(25, -1, -1)]
        return cls("".join(chars))

    @property
    def time(self) -> datetime:
        """When the id was made (millisecond precision, UTC)."""
        n = 0
        for c in self[:10]:
            n = n * 32 + _DECODE[c]
        return datetime.fromtimestamp(n / 1000, UTC)


def as_job_id(value: JobID | str) -> JobID:
    """Accept a JobID or a string form of one (validated)."""
    return value if isinstance(value, JobID) else JobID(value)


# --- job spec --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Extension:
    """Base of the typed extensions a backend may need beyond command and nodes."""


@dataclass(frozen=True, slots=True)
class Image(Extension):
    """The container image to run; ``pull_policy`` (Always, IfNotPresent, Never) optional."""

    ref: str
    pull_policy: str | None = None


KIND_CLUSTER_TRAINING_RUNTIME = "ClusterTrainingRuntime"
KIND_TRAINING_RUNTIME = "TrainingRuntime"


@dataclass(frozen=True, slots=True)
class RuntimeRef(Extension):
    """Which Kubeflow Trainer runtime to run on: a ClusterTrainingRuntime or a
    TrainingRuntime in the backend's namespace, named ``runtime``."""

    kind: str
    runtime: str


E = TypeVar("E", bound=Extension)


@dataclass(frozen=True, slots=True, init=False)
class JobSpec:
    """What to run: a command on ``nodes`` nodes, plus typed extensions.

    Construction only normalises (sequences become tuples); :meth:`validate` and the
    backend's Start check the values, before anything is written.
    """

    command: tuple[str, ...]
    nodes: int = 1
    extensions: tuple[Extension, ...] = ()

    def __init__(self, command: Sequence[str], nodes: int = 1,
                 extensions: Iterable[Extension] = ()) -> None:
        object.__setattr__(self, "command",
                           tuple(command) if not isinstance(command, str) else (command,))
        object.__setattr__(self, "nodes", nodes)
        object.__setattr__(self, "extensions", tuple(extensions))

    def extension(self, kind: type[E]) -> E | None:
        """The extension of this type, or None."""
        for ext in self.extensions:
            if isinstance(ext, kind):
                return ext
        return None

    def validate(self) -> None:
        """Raise SpecError naming the field when the spec cannot be run anywhere."""
        if not self.command:
            raise SpecError("spec.command: must name a program to run", field="spec.command")
        for i, part in enumerate(self.command):
            if not isinstance(part, str):
                raise SpecError(f"spec.command[{i}]: must be a string, got "
                                f"{type(part).__name__}", field=f"spec.command[{i}]")
        if not self.command[0]:
            raise SpecError("spec.command[0]: the program must not be empty",
                            field="spec.command[0]")
        if isinstance(self.nodes, bool) or not isinstance(self.nodes, int):
            raise SpecError(f"spec.nodes: must be an integer, got {self.nodes!r}",
                            field="spec.nodes")
        if not 1 <= self.nodes <= MAX_NODES:
            raise SpecError(f"spec.nodes: must be between 1 and {MAX_NODES}, got {self.nodes}",
                            field="spec.nodes")
        seen: set[type[Extension]] = set()
        for ext in self.extensions:
            if not isinstance(ext, Extension):
                raise SpecError(f"spec.extensions: {ext!r} is not an Extension",
                                field="spec.extensions")
            if type(ext) in seen:
                raise SpecError(f"spec.extensions: more than one {type(ext).__name__}",
                                field="spec.extensions")
            seen.add(type(ext))


MAX_NODES = 2**31 - 1
"""Trainer's numNodes is an int32."""


@dataclass(frozen=True, slots=True)
class StartRequest:
    """Start ``spec`` as attempt ``attempt`` of submission ``submission`` of ``job``."""

    job: JobID
    submission: int
    attempt: int
    spec: JobSpec

    def validate(self) -> None:
        """Raise SpecError naming the field; the spec is validated too."""
        if not isinstance(self.job, JobID):
            as_job_id(self.job)
        for name in ("submission", "attempt"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpecError(f"{name}: must be an integer of at least 1, got {value!r}",
                                field=name)
        if self.attempt > identity.ATTEMPT_MAX:
            # Each attempt owns its own range of DISPATCH_EPOCH (core.identity): past the
            # last one, a later attempt could only reuse an epoch.
            raise SpecError(f"attempt: at most {identity.ATTEMPT_MAX} attempts of a submission "
                            f"fit DISPATCH_EPOCH, got {self.attempt}; start a new submission",
                            field="attempt")
        self.spec.validate()


# --- references and observations -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """A Kubernetes object of a job: ``id`` is ``<namespace>/<name>`` (or ``<name>``)."""

    namespace: str
    name: str
    kind: str = "TrainJob"
    api_version: str = ""
    uid: str = ""

    @property
    def id(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @classmethod
    def parse(cls, ref_id: str, kind: str = "TrainJob") -> ObjectRef:
        """From an ``id`` as returned by Start (``<namespace>/<name>``)."""
        ns, sep, name = ref_id.rpartition("/")
        if not sep or not ns or not name:
            raise SpecError(f"ref: {ref_id!r} is not <namespace>/<name>", field="ref")
        return cls(namespace=ns, name=name, kind=kind)

    def __str__(self) -> str:
        return f"{self.kind} {self.id}"


class ObjectState(StrEnum):
    """Where a started job's object is; see :mod:`dispatch_kubeflow.state` for the table."""

    GATED = "gated"
    QUEUED = "queued"
    ADMITTING = "admitting"
    RUNNING = "running"
    HOLDING = "holding"
    HELD = "held"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    GONE = "gone"


@dataclass(frozen=True, slots=True)
class Cause:
    """Why the object is in its state. ``detail`` is for people ("" when nothing to add)."""

    detail: str = ""
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Observation:
    """What Inspect saw.

    ``hold_instance`` is the instance of dispatch's hold (0: none); ``admissions`` is A,
    ``restarts`` is J of the newest pod; ``pods`` counts pods of the job that still exist,
    ``pods_running`` those of them in phase Running. A job that Kueue admitted is
    ``running`` from then on, so ``pods_running`` tells an execution whose pods are still
    starting (0) from one that runs.
    """

    state: ObjectState
    cause: Cause = field(default_factory=Cause)
    hold_instance: int = 0
    hold_until: datetime | None = None
    admissions: int = 0
    restarts: int = 0
    pods: int = 0
    pods_running: int = 0


# --- capabilities ----------------------------------------------------------------------------


class Capability(StrEnum):
    """What a backend must prove before it may start jobs."""

    READMISSION_GATE = "ReadmissionGate"
    """A new execution is admitted only after every pod of the previous one is gone."""
    ATTEMPT_INJECTION = "AttemptInjection"
    """Every pod gets the execution identity (DISPATCH_ATTEMPT, DISPATCH_EPOCH)."""
    HOLD = "HoldCapability"
    """A hold ends the execution and keeps the job from being admitted until released."""
    START_GATE = "StartGate"
    """A started job stays closed (no admission, no pod) until Open."""


class CapabilityValue(StrEnum):
    YES = "yes"
    NO = "no"
    UNKNOWN = "unknown"


class CapabilitySource(StrEnum):
    PROBED = "probed"
    """Proven against the live cluster by the preflight."""
    MODE = "mode"
    """Follows from the configured mode (plain mode: the adapter itself does it)."""
    NOT_CHECKED = "not-checked"
    """The preflight could not get as far as checking it."""


@dataclass(frozen=True, slots=True)
class CapabilityStatus:
    value: CapabilityValue
    source: CapabilitySource
    reason: str

    @property
    def ok(self) -> bool:
        return self.value is CapabilityValue.YES


# --- holds -----------------------------------------------------------------------------------


class ActorKind(StrEnum):
    HUMAN = "human"
    SERVICE = "service"
    SYSTEM = "system"


@dataclass(frozen=True, slots=True)
class Actor:
    """Who asked: recorded as ``<kind>:<id>`` in the hold-who annotation."""

    kind: ActorKind
    id: str

    def __str__(self) -> str:
        return f"{self.kind.value}:{self.id}"


def _aware(when: datetime | None, field: str) -> None:
    """A naive datetime is an error naming its field: which zone it meant is not guessed."""
    if when is not None and when.tzinfo is None:
        raise SpecError(f"{field}: {when.isoformat()} has no time zone; give an aware time, "
                        "such as datetime.now(UTC) + timedelta(minutes=5)", field=field)


@dataclass(frozen=True, slots=True)
class CallMeta:
    """Per-call metadata: ``deadline`` (timezone-aware) bounds this call alone."""

    deadline: datetime | None = None

    def __post_init__(self) -> None:
        _aware(self.deadline, "call.deadline")


class ReleaseOutcome(StrEnum):
    """What a Release did: removed the hold it named, or found the job not held.

    Releasing a job that is not held is not an error (a Release repeated after a timeout,
    or after the admission controller ended an expired hold, must be safe): nothing
    changes, and the outcome says so. Releasing another instance's hold is a HoldError.
    """

    RELEASED = "released"
    NOT_HELD = "not-held"


@dataclass(frozen=True, slots=True)
class HoldMeta:
    """A hold (or its release): ``instance`` names the hold; a release must name the same."""

    instance: int
    by: Actor
    call: CallMeta = field(default_factory=CallMeta)
    until: datetime | None = None
    reason: str = ""

    def __post_init__(self) -> None:
        _aware(self.until, "until")

    @property
    def deadline(self) -> datetime | None:
        return self.call.deadline


# --- stop and output -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StopReport:
    """What StopJob did.

    ``stopped``: deleted, and it and every pod beneath it are gone. ``alive``: still there
    when ``timeouts.stopJob`` passed. ``unproven``: deleted (or asked to be), but whether
    it is gone could not be checked (for example the API server refused the read).
    """

    stopped: tuple[ObjectRef, ...] = ()
    alive: tuple[ObjectRef, ...] = ()
    unproven: tuple[ObjectRef, ...] = ()

    @property
    def complete(self) -> bool:
        return not self.alive and not self.unproven


class OutputStream(StrEnum):
    """Which of a container's streams to read (the pod log endpoint's ``stream`` values)."""

    STDOUT = "Stdout"
    STDERR = "Stderr"
    ALL = "All"


SettingsSection = bytes | str | Mapping[str, Any]
"""A backend's settings section: JSON text, bytes, or a mapping."""


@dataclass(frozen=True, slots=True)
class AdapterConfig:
    """Which backend to open, and its settings section (JSON text, bytes or a mapping)."""

    backend: str
    settings: SettingsSection = field(default_factory=dict)

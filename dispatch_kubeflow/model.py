"""The backend-neutral dispatch model: what a caller hands a backend and gets back.

Every type here is a frozen dataclass (or an enum, or `JobID`, a validated ``str``),
so values can be shared between tasks and used as keys. Nothing here talks to Kubernetes;
backend-specific rules (for example that the Kubeflow backend needs an `Image` and a
`RuntimeRef`) are checked by the backend before it writes anything.
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
    raises [SpecError][dispatch_kubeflow.SpecError]. Make a new one with
    [new][dispatch_kubeflow.JobID.new]. ``JobID(value)`` takes a job id's text in either
    case (surrounding blanks are dropped), or a JobID (returned as it is).

    Raises:
        SpecError: ``value`` is not a string, or not 26 Crockford base32 characters whose
            first is 0-7 (``field`` is ``job``).
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
        """A new id for time ``at`` (default now) and 10 bytes of ``entropy`` (default random).

        Args:
            at: The creation time the id carries (timezone-aware); None: now.
            entropy: Exactly 10 bytes for the random part; None: from ``os.urandom``.

        Returns:
            The new id.

        Raises:
            SpecError: ``at`` has no time zone or is outside what 48 bits of milliseconds
                hold, or ``entropy`` is not 10 bytes (``field`` names the parameter).
        """
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
    """The container image to run; ``pull_policy`` (Always, IfNotPresent, Never) optional.

    Attributes:
        ref: The image reference (``registry/image:tag``), without blanks.
        pull_policy: ``Always``, ``IfNotPresent`` or ``Never``; None: the cluster's default.
    """

    ref: str
    pull_policy: str | None = None


KIND_CLUSTER_TRAINING_RUNTIME = "ClusterTrainingRuntime"
"""[RuntimeRef][dispatch_kubeflow.RuntimeRef]'s ``kind`` for a cluster-wide runtime."""
KIND_TRAINING_RUNTIME = "TrainingRuntime"
"""[RuntimeRef][dispatch_kubeflow.RuntimeRef]'s ``kind`` for a runtime in the backend's
namespace."""


@dataclass(frozen=True, slots=True)
class RuntimeRef(Extension):
    """Which Kubeflow Trainer runtime to run on: a ClusterTrainingRuntime or a
    TrainingRuntime in the backend's namespace, named ``runtime``.

    Attributes:
        kind: [KIND_CLUSTER_TRAINING_RUNTIME][dispatch_kubeflow.KIND_CLUSTER_TRAINING_RUNTIME]
            or [KIND_TRAINING_RUNTIME][dispatch_kubeflow.KIND_TRAINING_RUNTIME].
        runtime: The runtime's name.
    """

    kind: str
    runtime: str


E = TypeVar("E", bound=Extension)


@dataclass(frozen=True, slots=True, init=False)
class JobSpec:
    """What to run: a command on ``nodes`` nodes, plus typed extensions.

    Construction only normalises (sequences become tuples);
    [validate][dispatch_kubeflow.JobSpec.validate] and the backend's Start check the values,
    before anything is written.

    Args:
        command: The program and its arguments (a lone string is one program, no
            arguments).
        nodes: How many nodes (ranks) run it, 1 or more.
        extensions: Typed extensions, at most one of each type (the Kubeflow backend needs
            an [Image][dispatch_kubeflow.Image] and a [RuntimeRef][dispatch_kubeflow.RuntimeRef]).
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
        """The extension of this type, or None.

        Args:
            kind: The extension's type (``Image``, ``RuntimeRef``).

        Returns:
            The spec's extension of that type, or None when it has none.
        """
        for ext in self.extensions:
            if isinstance(ext, kind):
                return ext
        return None

    def validate(self) -> None:
        """Raise SpecError naming the field when the spec cannot be run anywhere.

        Raises:
            SpecError: No command, a part that is not a string, an empty program, ``nodes``
                not an integer from 1 to 2**31 - 1, an extension that is not an
                [Extension][dispatch_kubeflow.Extension] or two of one type (``field`` is
                ``spec.command``, ``spec.nodes``, ...).
        """
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
    """Start ``spec`` as attempt ``attempt`` of submission ``submission`` of ``job``.

    What [Backend.start][dispatch_kubeflow.Backend.start] takes. The TrainJob is named
    after the job and submission (``dj-<job id>-s<submission>``); the attempt is part of
    every pod's execution identity (``DISPATCH_ATTEMPT``, ``DISPATCH_EPOCH``).

    Attributes:
        job: The job's id.
        submission: The submission, 1 or more: each is a TrainJob of its own.
        attempt: The attempt of the submission, from 1 to 100 (each owns a range of
            ``DISPATCH_EPOCH``).
        spec: What to run.
    """

    job: JobID
    submission: int
    attempt: int
    spec: JobSpec

    def validate(self) -> None:
        """Raise SpecError naming the field; the spec is validated too.

        Raises:
            SpecError: ``job`` is not a job id, ``submission`` or ``attempt`` is not an
                integer of at least 1, ``attempt`` is above 100, or the spec is invalid.
        """
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
    """A Kubernetes object of a job: ``id`` is ``<namespace>/<name>`` (or ``<name>``).

    [Backend.start][dispatch_kubeflow.Backend.start] returns the TrainJob's; the calls on
    one submission take it, or its ``id``.

    Attributes:
        namespace: The object's namespace ("" for a cluster-scoped object).
        name: The object's name.
        kind: Its kind (``TrainJob``, ``Workload``, ``JobSet``, ``Job``, ``Pod``, ...).
        api_version: Its API version, when known.
        uid: Its UID, when known: a wait follows that object, not a newer one of the name.
        cluster: The worker cluster it is in, named as its MultiKueueCluster (MultiKueue
            mode); "" for the backend's own cluster.
    """

    namespace: str
    name: str
    kind: str = "TrainJob"
    api_version: str = ""
    uid: str = ""
    cluster: str = ""

    @property
    def id(self) -> str:
        """``<namespace>/<name>``, or ``<name>`` without a namespace."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @classmethod
    def parse(cls, ref_id: str, kind: str = "TrainJob") -> ObjectRef:
        """From an ``id`` as returned by Start (``<namespace>/<name>``).

        Args:
            ref_id: ``<namespace>/<name>``.
            kind: The object's kind.

        Returns:
            The reference (no API version or UID).

        Raises:
            SpecError: ``ref_id`` is not ``<namespace>/<name>`` (``field`` is ``ref``).
        """
        ns, sep, name = ref_id.rpartition("/")
        if not sep or not ns or not name:
            raise SpecError(f"ref: {ref_id!r} is not <namespace>/<name>", field="ref")
        return cls(namespace=ns, name=name, kind=kind)

    def __str__(self) -> str:
        return f"{self.kind} {self.id}"


class ObjectState(StrEnum):
    """Where a started job's object is; docs/states.md has the table that decides it.

    A ``str``: each state compares equal to its text (``"running"``).
    """

    GATED = "gated"
    """Closed by dispatch's start gate (not yet opened): no admission, no pod."""
    QUEUED = "queued"
    """Open and waiting for Kueue: no Workload yet, evicted, or waiting for quota."""
    ADMITTING = "admitting"
    """Quota reserved, waiting for the admission checks (dispatch's readmission gate), or
    admitted with the TrainJob still suspended."""
    RUNNING = "running"
    """Admitted (Kueue) or not suspended (plain): an execution runs or its pods start;
    ``pods_running`` tells which."""
    HOLDING = "holding"
    """Held (by dispatch or deactivated by someone else), and pods still exist."""
    HELD = "held"
    """Held, and no pod is left."""
    SUCCEEDED = "succeeded"
    """The TrainJob is ``Complete``."""
    FAILED = "failed"
    """The TrainJob is ``Failed``: the Observation's cause says why."""
    GONE = "gone"
    """No TrainJob, or it is being deleted."""


@dataclass(frozen=True, slots=True)
class Cause:
    """Why the object is in its state. ``detail`` is for people ("" when nothing to add).

    Attributes:
        detail: What happened, for people (a condition's message).
        reason: The machine-readable word (a condition's reason), "" when none.
    """

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

    Attributes:
        state: The job's state.
        cause: Why it is in that state.
        hold_instance: The instance of dispatch's hold (0: not held by dispatch).
        hold_until: When dispatch's hold expires (None: never, or not held).
        admissions: A, the admission count of the TrainJob.
        restarts: J, JobSet's restart count of the newest pod.
        pods: How many pods of the job still exist.
        pods_running: How many of them are in phase Running.
        cluster: MultiKueue mode: the worker cluster Kueue dispatched the job to (its
            MultiKueueCluster's name; "" before it is dispatched, and in the other modes).
    """

    state: ObjectState
    cause: Cause = field(default_factory=Cause)
    hold_instance: int = 0
    hold_until: datetime | None = None
    admissions: int = 0
    restarts: int = 0
    pods: int = 0
    pods_running: int = 0
    cluster: str = ""


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
    """What the preflight found of a capability."""

    YES = "yes"
    """Proven (or given by the mode)."""
    NO = "no"
    """Missing: the backend is observe-only."""
    UNKNOWN = "unknown"
    """Not proven either way (the probe failed, or was not run): observe-only too."""


class CapabilitySource(StrEnum):
    """How the preflight came to a capability's value."""

    PROBED = "probed"
    """Proven against the live cluster by the preflight."""
    MODE = "mode"
    """Follows from the configured mode (plain mode: the adapter itself does it)."""
    NOT_CHECKED = "not-checked"
    """The preflight could not get as far as checking it."""


@dataclass(frozen=True, slots=True)
class CapabilityStatus:
    """One capability as the preflight found it (see docs/preflight.md).

    Attributes:
        value: Yes, no or unknown.
        source: How it was found.
        reason: Why, for people (what the probe saw, or what is missing).
    """

    value: CapabilityValue
    source: CapabilitySource
    reason: str

    @property
    def ok(self) -> bool:
        """Whether the value is yes."""
        return self.value is CapabilityValue.YES


# --- holds -----------------------------------------------------------------------------------


class ActorKind(StrEnum):
    """What kind of actor holds a job."""

    HUMAN = "human"
    """A person."""
    SERVICE = "service"
    """A service (such as the one that dispatches the jobs)."""
    SYSTEM = "system"
    """The system itself (a controller, a scheduler)."""


@dataclass(frozen=True, slots=True)
class Actor:
    """Who asked: recorded as ``<kind>:<id>`` in the hold-who annotation.

    Attributes:
        kind: A human, a service or the system.
        id: Who, within the kind (not empty).
    """

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
    """Per-call metadata: ``deadline`` (timezone-aware) bounds this call alone.

    Attributes:
        deadline: When the call gives up with
            [DeadlineExceeded][dispatch_kubeflow.DeadlineExceeded]; None: no bound of its own.

    Raises:
        SpecError: ``deadline`` has no time zone (``field`` is ``call.deadline``).
    """

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
    """This call removed the hold."""
    NOT_HELD = "not-held"
    """The job was not held: nothing changed."""


@dataclass(frozen=True, slots=True)
class HoldMeta:
    """A hold (or its release): ``instance`` names the hold; a release must name the same.

    Attributes:
        instance: Which hold, 1 or more; choose one not in use (a hold of another instance
            is a [HoldError][dispatch_kubeflow.HoldError]).
        by: Who holds.
        call: This call's metadata (its deadline).
        until: When the hold expires and the job may run again (timezone-aware); None:
            never.
        reason: Why, for people (recorded in the hold-reason annotation).

    Raises:
        SpecError: ``until`` or ``call.deadline`` has no time zone (``field`` names it).
    """

    instance: int
    by: Actor
    call: CallMeta = field(default_factory=CallMeta)
    until: datetime | None = None
    reason: str = ""

    def __post_init__(self) -> None:
        _aware(self.until, "until")

    @property
    def deadline(self) -> datetime | None:
        """The call's deadline (``call.deadline``)."""
        return self.call.deadline


# --- stop and output -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StopReport:
    """What StopJob did.

    ``stopped``: deleted, and it and every pod beneath it are gone. ``alive``: still there
    when ``timeouts.stopJob`` passed. ``unproven``: deleted (or asked to be), but whether
    it is gone could not be checked (for example the API server refused the read). A
    reference with no ``name`` in ``unproven`` stands for a whole kind that could not be
    read to the end: whatever of the job is of that kind was never seen, so it is neither
    deleted nor proven gone.

    Attributes:
        stopped: Deleted, and gone with every pod beneath it.
        alive: Still there when ``timeouts.stopJob`` passed.
        unproven: Deleted (or asked to be), but not proven gone; a nameless reference: a
            kind that could not be read.
    """

    stopped: tuple[ObjectRef, ...] = ()
    alive: tuple[ObjectRef, ...] = ()
    unproven: tuple[ObjectRef, ...] = ()

    @property
    def complete(self) -> bool:
        """Whether everything is proven gone (nothing alive, nothing unproven)."""
        return not self.alive and not self.unproven


class OutputStream(StrEnum):
    """Which of a container's streams to read (the pod log endpoint's ``stream`` values)."""

    STDOUT = "Stdout"
    """Standard output (alone only with the server's ``PodLogsQuerySplitStreams``)."""
    STDERR = "Stderr"
    """Standard error (needs ``PodLogsQuerySplitStreams``)."""
    ALL = "All"
    """Both, interleaved as the kubelet keeps them."""


SettingsSection = bytes | str | Mapping[str, Any]
"""A backend's settings section: JSON text, bytes, or a mapping."""


@dataclass(frozen=True, slots=True)
class AdapterConfig:
    """Which backend to open, and its settings section (JSON text, bytes or a mapping).

    What [open_backend][dispatch_kubeflow.open_backend] takes:
    ``AdapterConfig("kubeflow", settings_json)``.

    Attributes:
        backend: The registered name (``"kubeflow"``).
        settings: The backend's settings section: JSON text, bytes, or a decoded mapping
            (see the configuration reference).
    """

    backend: str
    settings: SettingsSection = field(default_factory=dict)

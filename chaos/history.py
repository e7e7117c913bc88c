"""The history a run records: ledger lines, operations and final observations, as JSONL.

Every timestamp is CLOCK_REALTIME in integer microseconds since the epoch (``wall_us``):
the ledger's lines read it from ash's ``$EPOCHREALTIME``, the runner from
``time.time_ns() // 1000``. All nodes of the local cluster share the machine's one clock,
so one number orders everything (see :file:`chaos/ledger.sh` on why not a monotonic one).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from dispatch_kubeflow.core import identity

LineKind = Literal["start", "beat", "term", "exit"]
LINE_KINDS: frozenset[str] = frozenset({"start", "beat", "term", "exit"})

# Operation kinds: the Backend methods the runner calls.
OP_START = "start"
OP_OPEN = "open"
OP_HOLD = "hold"
OP_RELEASE = "release"
OP_STOP = "stop_job"
OP_INSPECT = "inspect"
OP_FIND = "find"
OP_DELETE_JOBSET = "delete_jobset"
"""The runner deletes the job's JobSet (background propagation), as ``kubectl delete`` does."""
OP_DELETE_WORKLOAD = "delete_workload"
"""The runner deletes the job's Workload (Kueue makes a new one)."""


@dataclass(frozen=True)
class Attempt:
    """``DISPATCH_ATTEMPT`` split: ``<job>.<submission>.<attempt>.<A>.<J>``."""

    job: str
    submission: int
    attempt: int
    admissions: int
    restarts: int

    @classmethod
    def parse(cls, text: str) -> Attempt:
        return cls(*identity.split_attempt_id(text))  # IdentityError is a ValueError

    @property
    def r(self) -> int:
        """R = A + J."""
        return self.admissions + self.restarts

    @property
    def epoch(self) -> int:
        """The ``DISPATCH_EPOCH`` this identity implies (the one rule, in core)."""
        return identity.epoch(self.submission, self.r, self.attempt)


@dataclass(frozen=True)
class LedgerLine:
    """One line the ledger program wrote."""

    kind: str
    attempt: str
    epoch: str
    pod: str
    rank: str
    pid: int
    seq: int
    wall_us: int
    uptime_cs: int
    node: str = ""
    status: int | None = None
    started_us: int = 0  # the process's start line's wall_us: pod, pid and this name it
    uid: str = ""     # the pod's UID (downward API, POD_UID); "" in ledgers from before
    jobset: str = ""  # the UID of the JobSet that made the pod (its jobset-uid label)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> LedgerLine:
        kind = str(obj["kind"])
        if kind not in LINE_KINDS:
            raise ValueError(f"ledger line of unknown kind {kind!r}")
        status = obj.get("status")
        return cls(kind=kind, attempt=str(obj["attempt"]), epoch=str(obj.get("epoch", "")),
                   pod=str(obj.get("pod", "")), rank=str(obj.get("rank", "")),
                   pid=int(obj.get("pid", 0)), seq=int(obj.get("seq", 0)),
                   wall_us=int(obj["wall_us"]), uptime_cs=int(obj.get("uptime_cs", 0)),
                   node=str(obj.get("node", "")),
                   status=None if status is None else int(status),
                   started_us=int(obj.get("started_us", 0)),
                   uid=str(obj.get("uid", "")), jobset=str(obj.get("jobset", "")))

    @property
    def ident(self) -> Attempt:
        return Attempt.parse(self.attempt)

    @property
    def job(self) -> str:
        return self.attempt.rsplit(".", 4)[0]

    @property
    def epoch_int(self) -> int | None:
        return int(self.epoch) if self.epoch.isdigit() else None

    @property
    def pod_key(self) -> str:
        """Which pod wrote the line: its UID, or its name in a ledger without UIDs."""
        return self.uid or self.pod


@dataclass(frozen=True)
class Operation:
    """One call the runner made: when it was called, when it returned, and with what.

    ``return_us`` is None if the call never returned (the run ended first). Exactly one of
    ``result`` (a JSON-able summary) and ``error`` (the exception's class name) is set
    once it returned. ``deadline_us`` is the absolute time the call had to end by.
    """

    id: int
    op: str
    job: str
    call_us: int
    return_us: int | None = None
    args: dict[str, Any] = field(default_factory=dict)
    result: Any = None
    error: str | None = None
    error_message: str = ""
    deadline_us: int | None = None

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Operation:
        ret = obj.get("return_us")
        dl = obj.get("deadline_us")
        err = obj.get("error")
        return cls(id=int(obj["id"]), op=str(obj["op"]), job=str(obj.get("job", "")),
                   call_us=int(obj["call_us"]), return_us=None if ret is None else int(ret),
                   args=dict(obj.get("args") or {}), result=obj.get("result"),
                   error=None if err is None else str(err),
                   error_message=str(obj.get("error_message", "")),
                   deadline_us=None if dl is None else int(dl))

    @property
    def ok(self) -> bool:
        """It returned, without an error."""
        return self.return_us is not None and self.error is None


@dataclass(frozen=True)
class JobFinal:
    """What the runner observed of one job at the end of a run.

    ``held``: the job was held at the end (Inspect). ``find_empty`` / ``direct_list_empty``:
    after a StopJob, the library's Find returned nothing, and a direct list of every kind
    by the job's label found nothing (None: not observed). ``reason``: why the job did not
    run, if the runner knows (for example "the run ended before Kueue admitted it").
    ``state``: Inspect's state at the end ("" when not inspected). ``quota_free``: whether
    the job had its quota at the end, or the ClusterQueue room for it beside every other
    job's (None: not known).
    """

    job: str
    held: bool = False
    find_empty: bool | None = None
    direct_list_empty: bool | None = None
    reason: str = ""
    state: str = ""
    quota_free: bool | None = None


@dataclass(frozen=True)
class ObjectMeta:
    """The metadata of one object the run left or made, as read at the end."""

    kind: str
    namespace: str
    name: str
    annotations: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    finalizers: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Final:
    """The final observations of a run."""

    jobs: list[JobFinal] = field(default_factory=list)
    objects: list[ObjectMeta] = field(default_factory=list)

    def job(self, job: str) -> JobFinal | None:
        return next((j for j in self.jobs if j.job == job), None)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Final:
        return cls(jobs=[JobFinal(**j) for j in obj.get("jobs", [])],
                   objects=[ObjectMeta(**o) for o in obj.get("objects", [])])


_T = TypeVar("_T", LedgerLine, Operation)


def _read(path: Path, cls: type[_T]) -> Iterator[_T]:
    with path.open(encoding="utf-8") as f:
        for n, text in enumerate(f, 1):
            if not text.strip():
                continue
            try:
                yield cls.from_json(json.loads(text))
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{n}: {e}") from e


def read_ledger(path: Path) -> list[LedgerLine]:
    """Every line of a ledger file; a line that is not a whole ledger line is an error."""
    return list(_read(path, LedgerLine))


def read_operations(path: Path) -> list[Operation]:
    return list(_read(path, Operation))


def write_jsonl(path: Path, records: Iterable[LedgerLine | Operation]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(asdict(r), separators=(",", ":")) + "\n")


def append_operation(path: Path, op: Operation) -> None:
    """Append one operation as one line (one write, O_APPEND)."""
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(asdict(op), separators=(",", ":")) + "\n")


def read_final(path: Path) -> Final:
    return Final.from_json(json.loads(path.read_text(encoding="utf-8")))


def write_final(path: Path, final: Final) -> None:
    path.write_text(json.dumps(final.to_json(), indent=1) + "\n", encoding="utf-8")

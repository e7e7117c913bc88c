"""The checker: judges a run's ledger and operations against the project's guarantees.

One function per property of issue 10's item 3, each taking the ledger lines, the
operations and the final observations and returning a :class:`Verdict`; :func:`judge`
returns them all. A ``clock`` verdict comes first: it says whether the ordering clock
(wall time) can be trusted for this history at all.

Intervals are closed. An execution occupies ``[first start, last line]``, both ends
included, so an execution whose first line carries exactly the timestamp of another's last
line overlaps it: "no margin" means not even an equal microsecond.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from chaos.history import (
    OP_OPEN,
    OP_START,
    OP_STOP,
    Attempt,
    Final,
    LedgerLine,
    Operation,
)
from dispatch_kubeflow import errors

PROPERTIES: dict[str, str] = {
    "clock": "the ordering clock did not step (wall - uptime stayed put)",
    "a": "no two executions of a job overlap",
    "b": "executions of a job have strictly increasing DISPATCH_EPOCH and A + J",
    "c": "every job opened and not stopped or held ran, or says why not",
    "d": "after StopJob nothing of the job exists",
    "e": "every call ended in a result or a typed error, none past its deadline",
    "f": "no object carries a kopf annotation or finalizer",
}

# How much of the history a violation shows around the moment it happened.
CONTEXT_US = 300_000
CONTEXT_LINES = 24


@dataclass(frozen=True)
class Verdict:
    """One property's verdict. A violation names what and shows the history around it."""

    prop: str
    ok: bool
    message: str = ""
    lines: tuple[LedgerLine, ...] = ()
    operations: tuple[Operation, ...] = ()

    @property
    def title(self) -> str:
        return PROPERTIES[self.prop]


@dataclass(frozen=True)
class Execution:
    """Every line of one execution: one full ``DISPATCH_ATTEMPT``, every rank."""

    attempt: str
    lines: tuple[LedgerLine, ...] = field(repr=False)

    @property
    def ident(self) -> Attempt:
        return Attempt.parse(self.attempt)

    @property
    def job(self) -> str:
        return self.ident.job

    @property
    def start_us(self) -> int:
        """The first start line's time (the first line's, if no start line survived)."""
        starts = [ln.wall_us for ln in self.lines if ln.kind == "start"]
        return min(starts) if starts else self.lines[0].wall_us

    @property
    def end_us(self) -> int:
        return self.lines[-1].wall_us

    @property
    def succeeded(self) -> bool:
        return any(ln.kind == "exit" and ln.status == 0 for ln in self.lines)


def executions(ledger: Iterable[LedgerLine]) -> dict[str, list[Execution]]:
    """The executions of each job, ordered by start."""
    by_attempt: dict[str, list[LedgerLine]] = defaultdict(list)
    for ln in ledger:
        by_attempt[ln.attempt].append(ln)
    by_job: dict[str, list[Execution]] = defaultdict(list)
    for attempt, lines in by_attempt.items():
        ex = Execution(attempt, tuple(sorted(lines, key=lambda ln: (ln.wall_us, ln.seq))))
        by_job[ex.job].append(ex)
    for exs in by_job.values():
        exs.sort(key=lambda e: (e.start_us, e.attempt))
    return dict(by_job)


def allowed_errors() -> frozenset[str]:
    """The class names of the library's error tree: its root and every subclass."""
    names: set[str] = set()
    todo: list[type[BaseException]] = [errors.DispatchError]
    while todo:
        cls = todo.pop()
        if cls.__module__.startswith("dispatch_kubeflow") and cls.__name__ not in names:
            names.add(cls.__name__)
            todo.extend(cls.__subclasses__())
    return frozenset(names)


def _around(job: str, lo_us: int, hi_us: int, ledger: Sequence[LedgerLine],
            ops: Sequence[Operation]) -> tuple[tuple[LedgerLine, ...], tuple[Operation, ...]]:
    """The job's ledger lines and operations within CONTEXT_US of [lo_us, hi_us]."""
    lo, hi = lo_us - CONTEXT_US, hi_us + CONTEXT_US
    lines = sorted((ln for ln in ledger if ln.job == job and lo <= ln.wall_us <= hi),
                   key=lambda ln: (ln.wall_us, ln.seq))
    if len(lines) > CONTEXT_LINES:
        # Keep the lines nearest the violation: the ends of the window matter least.
        mid = (lo_us + hi_us) // 2
        lines = sorted(sorted(lines, key=lambda ln: abs(ln.wall_us - mid))[:CONTEXT_LINES],
                       key=lambda ln: (ln.wall_us, ln.seq))
    near = [o for o in ops if o.job == job
            and o.call_us <= hi and (o.return_us is None or o.return_us >= lo)]
    return tuple(lines), tuple(near)


def _fail(prop: str, problems: list[str], lines: Iterable[LedgerLine] = (),
          ops: Iterable[Operation] = ()) -> Verdict:
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    detail = "\n".join(f"  - {p}" for p in problems[1:6])
    msg = problems[0] + more + (f"\n{detail}" if detail else "")
    return Verdict(prop, False, msg, tuple(lines), tuple(ops))


def check_clock(ledger: Sequence[LedgerLine], ops: Sequence[Operation], final: Final, *,
                tolerance_us: int = 100_000, drift_ppm: int = 1_000) -> Verdict:
    """Wall time moved with the coarse monotonic clock, and forward within each process.

    ``wall_us - uptime_cs * 10 000`` is the same for every line up to uptime's 10 ms
    resolution, the gap between the two reads, and the rate an NTP slew may add
    (``drift_ppm``). A step of the wall clock shows as a jump and the history is not judged
    by wall time: this verdict fails, and so should the run.
    """
    problems: list[str] = []
    bad: list[LedgerLine] = []
    # One process: a container restarted in place has the same pod and pid but another start.
    by_proc: dict[tuple[str, int, int, str], list[LedgerLine]] = defaultdict(list)
    for ln in ledger:
        by_proc[(ln.pod, ln.pid, ln.started_us, ln.attempt)].append(ln)
    for (pod, pid, _, _), lines in by_proc.items():
        lines.sort(key=lambda ln: ln.seq)
        for a, b in pairwise(lines):
            if b.wall_us < a.wall_us or b.uptime_cs < a.uptime_cs:
                problems.append(f"pod {pod} pid {pid}: line {b.seq} is earlier than line "
                                f"{a.seq} ({a.wall_us} -> {b.wall_us} us wall, "
                                f"{a.uptime_cs} -> {b.uptime_cs} cs uptime)")
                bad += [a, b]
    if ledger:
        offsets = sorted(ledger, key=lambda ln: ln.wall_us - ln.uptime_cs * 10_000)
        lo, hi = offsets[0], offsets[-1]
        span = max(ln.wall_us for ln in ledger) - min(ln.wall_us for ln in ledger)
        allowed = tolerance_us + span * drift_ppm // 1_000_000
        spread = (hi.wall_us - hi.uptime_cs * 10_000) - (lo.wall_us - lo.uptime_cs * 10_000)
        if spread > allowed:
            problems.append(f"wall - uptime moved by {spread / 1000:.1f} ms (at most "
                            f"{allowed / 1000:.1f} ms allowed): the wall clock stepped")
            bad += [lo, hi]
    if problems:
        return _fail("clock", problems, bad)
    return Verdict("clock", True)


def check_no_overlap(ledger: Sequence[LedgerLine], ops: Sequence[Operation],
                     final: Final) -> Verdict:
    """(a) For each job, no two executions' closed intervals intersect."""
    problems: list[str] = []
    ctx_lines: list[LedgerLine] = []
    ctx_ops: list[Operation] = []
    for job, exs in sorted(executions(ledger).items()):
        latest: Execution | None = None  # the execution that ends last so far
        for ex in exs:
            if latest is not None and ex.start_us <= latest.end_us:
                problems.append(
                    f"job {job}: {ex.attempt} started at {ex.start_us} us, "
                    f"{(latest.end_us - ex.start_us) / 1000:.3f} ms before {latest.attempt} "
                    f"wrote its last line at {latest.end_us} us")
                if not ctx_lines:
                    lines, near = _around(job, ex.start_us, latest.end_us, ledger, ops)
                    ctx_lines, ctx_ops = list(lines), list(near)
            if latest is None or ex.end_us > latest.end_us:
                latest = ex
    if problems:
        return _fail("a", problems, ctx_lines, ctx_ops)
    return Verdict("a", True)


def check_identity(ledger: Sequence[LedgerLine], ops: Sequence[Operation],
                   final: Final) -> Verdict:
    """(b) Ordered by start, a job's executions have strictly increasing DISPATCH_EPOCH,
    and within one submission strictly increasing R = A + J.

    A new submission, or a later attempt of one, is a new TrainJob whose A starts again:
    across them the epoch (:func:`dispatch_kubeflow.core.identity.epoch`) must rise, R need
    not. Every line of an execution must carry the same epoch, and the epoch must be the one
    its DISPATCH_ATTEMPT implies.
    """
    problems: list[str] = []
    ctx: tuple[tuple[LedgerLine, ...], tuple[Operation, ...]] | None = None
    for job, exs in sorted(executions(ledger).items()):
        for ex in exs:
            idn = ex.ident
            want = idn.epoch
            epochs = {ln.epoch for ln in ex.lines}
            if epochs != {str(want)}:
                problems.append(f"job {job}: {ex.attempt} carries DISPATCH_EPOCH "
                                f"{sorted(epochs)}, its identity implies {want}")
                ctx = ctx or _around(job, ex.start_us, ex.start_us, ledger, ops)
        for prev, ex in pairwise(exs):
            p, c = prev.ident, ex.ident
            pe, ce = p.epoch, c.epoch
            why = ""
            if ce <= pe:
                why = f"DISPATCH_EPOCH {pe} -> {ce}"
            elif (c.submission, c.attempt) == (p.submission, p.attempt) and c.r <= p.r:
                why = f"A + J {p.r} -> {c.r}"
            if why:
                problems.append(f"job {job}: {prev.attempt} then {ex.attempt}: {why}, "
                                "not strictly increasing")
                ctx = ctx or _around(job, prev.end_us, ex.start_us, ledger, ops)
    if problems:
        lines, near = ctx or ((), ())
        return _fail("b", problems, lines, near)
    return Verdict("b", True)


def check_none_lost(ledger: Sequence[LedgerLine], ops: Sequence[Operation],
                    final: Final) -> Verdict:
    """(c) Every job that an Open succeeded on, with no StopJob called on it and not held
    at the end, has an execution that exited 0, or the final observations say why not."""
    opened = {o.job for o in ops if o.op == OP_OPEN and o.ok}
    stopped = {o.job for o in ops if o.op == OP_STOP}
    exs = executions(ledger)
    problems: list[str] = []
    explained: list[str] = []
    near: list[Operation] = []
    for job in sorted(opened - stopped):
        obs = final.job(job)
        if obs is not None and obs.held:
            continue
        if any(ex.succeeded for ex in exs.get(job, [])):
            continue
        if obs is not None and obs.reason:
            explained.append(f"{job}: {obs.reason}")
            continue
        ran = ", ".join(f"{ex.attempt} (last line {ex.lines[-1].kind})"
                        for ex in exs.get(job, [])) or "no ledger line at all"
        problems.append(f"job {job} was opened and neither stopped nor held, but no "
                        f"execution exited 0 ({ran}) and no reason was reported")
        near += [o for o in ops if o.job == job]
    if problems:
        return _fail("c", problems, (), near)
    note = ("not run, with a reason: " + "; ".join(explained)) if explained else ""
    return Verdict("c", True, note)


def check_stop(ledger: Sequence[LedgerLine], ops: Sequence[Operation],
               final: Final) -> Verdict:
    """(d) After a StopJob returned, nothing of the job exists.

    At the end, Find is empty and a direct list agrees (unless the job was started again
    after the stop). And no execution that began before the stop was called writes a
    ledger line after the stop returned with a report that claims everything gone
    (``alive`` and ``unproven`` empty or zero).
    """
    problems: list[str] = []
    ctx_lines: list[LedgerLine] = []
    ctx_ops: list[Operation] = []
    exs = executions(ledger)
    for stop in (o for o in ops if o.op == OP_STOP and o.ok):
        assert stop.return_us is not None
        restarted = any(o.job == stop.job and o.op in (OP_START, OP_OPEN)
                        and o.call_us > stop.call_us for o in ops)
        if not restarted:
            obs = final.job(stop.job)
            if obs is None or obs.find_empty is not True or obs.direct_list_empty is not True:
                seen = ("not observed at the end" if obs is None else
                        f"find_empty={obs.find_empty}, "
                        f"direct_list_empty={obs.direct_list_empty}")
                problems.append(f"job {stop.job}: StopJob (operation {stop.id}) returned, "
                                f"but at the end {seen}")
                ctx_ops.append(stop)
        if not _claims_all_gone(stop.result):
            continue
        for ex in exs.get(stop.job, []):
            late = [ln for ln in ex.lines if ln.wall_us > stop.return_us]
            if ex.start_us < stop.call_us and late:
                problems.append(
                    f"job {stop.job}: {ex.attempt} wrote {len(late)} line(s) after StopJob "
                    f"(operation {stop.id}) returned everything gone at {stop.return_us} us, "
                    f"the last at {late[-1].wall_us} us")
                if not ctx_lines:
                    lines, near = _around(stop.job, stop.return_us, late[0].wall_us,
                                          ledger, ops)
                    ctx_lines = list(lines)
                    ctx_ops += [o for o in near if o not in ctx_ops]
    if problems:
        return _fail("d", problems, ctx_lines, ctx_ops)
    return Verdict("d", True)


def _claims_all_gone(result: object) -> bool:
    if not isinstance(result, Mapping):
        return True
    return not any(result.get(k) for k in ("alive", "unproven"))


def check_calls(ledger: Sequence[LedgerLine], ops: Sequence[Operation], final: Final, *,
                grace_us: int = 1_000_000) -> Verdict:
    """(e) Every call returned, with a result or an error of the library's tree, and none
    returned later than ``grace_us`` after its deadline (raising DeadlineExceeded at the
    deadline takes a moment; a call that runs on past it is hung)."""
    allowed = allowed_errors()
    problems: list[str] = []
    bad: list[Operation] = []
    for o in ops:
        what = f"operation {o.id} ({o.op} {o.job})"
        if o.return_us is None:
            problems.append(f"{what} never returned"
                            + (f" (deadline {o.deadline_us} us)" if o.deadline_us else ""))
        elif o.error is not None and o.error not in allowed:
            problems.append(f"{what} raised {o.error}, not an error of the library's tree: "
                            f"{o.error_message}")
        elif o.deadline_us is not None and o.return_us > o.deadline_us + grace_us:
            problems.append(f"{what} returned {(o.return_us - o.deadline_us) / 1000:.1f} ms "
                            "after its deadline")
        else:
            continue
        bad.append(o)
    if problems:
        return _fail("e", problems, (), bad)
    return Verdict("e", True)


def check_no_kopf(ledger: Sequence[LedgerLine], ops: Sequence[Operation],
                  final: Final) -> Verdict:
    """(f) No object carries an annotation, label or finalizer whose name contains kopf."""
    problems = []
    for obj in final.objects:
        keys = [f"annotation {k}" for k in obj.annotations if "kopf" in k.lower()]
        keys += [f"label {k}" for k in obj.labels if "kopf" in k.lower()]
        keys += [f"finalizer {f}" for f in obj.finalizers if "kopf" in f.lower()]
        if keys:
            problems.append(f"{obj.kind} {obj.namespace}/{obj.name} carries {', '.join(keys)}")
    if problems:
        return _fail("f", problems)
    return Verdict("f", True)


Check = Callable[[Sequence[LedgerLine], Sequence[Operation], Final], Verdict]
CHECKS: tuple[Check, ...] = (check_clock, check_no_overlap, check_identity, check_none_lost,
                             check_stop, check_calls, check_no_kopf)


def judge(ledger: Iterable[LedgerLine], ops: Iterable[Operation],
          final: Final | None = None) -> list[Verdict]:
    """Every property's verdict, in the order of :data:`PROPERTIES`."""
    lines, calls = list(ledger), list(ops)
    return [check(lines, calls, final or Final()) for check in CHECKS]

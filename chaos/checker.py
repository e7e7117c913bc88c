"""The checker: judges a run's ledger and operations against the project's guarantees.

One function per property of issue 10's item 3 (and issue 26's liveness, g), each taking
the ledger lines, the operations and the final observations and returning a
:class:`Verdict`; :func:`judge` returns them all. A ``clock`` verdict comes first: it says
whether the ordering clock (wall time) can be trusted for this history at all.

Intervals are closed. A pod occupies ``[first line, last line]`` and an execution
``[first start, last line]``, both ends included, so a pod whose first line carries exactly
the timestamp of another's last line overlaps it: "no margin" means not even an equal
microsecond. A pod is its UID (its name in ledgers from before the UID was recorded); an
execution is its identity and the UID of the JobSet that made it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from chaos.history import (
    OP_HOLD,
    OP_OPEN,
    OP_RELEASE,
    OP_START,
    OP_STOP,
    Attempt,
    Final,
    LedgerLine,
    Operation,
)
from dispatch_kubeflow import ReleaseOutcome, errors

PROPERTIES: dict[str, str] = {
    "clock": "the ordering clock did not step (wall - uptime stayed put)",
    "a": "no two pods of a job alive at once, unless different ranks of one execution",
    "b": "each execution of a job has a DISPATCH_EPOCH above every earlier one's, across "
         "attempts and submissions",
    "c": "every job opened and not stopped or held ran, or says why not",
    "d": "after StopJob nothing of the job exists",
    "e": "every call ended in a result or a typed error, none past its deadline",
    "f": "no object carries a kopf annotation or finalizer",
    "g": "every job released and not stopped or held again ran again, or says why not",
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
    """Every line of one execution: one full ``DISPATCH_ATTEMPT`` made by one JobSet (its
    UID, when the ledger has it), every rank. A JobSet re-made under the same name is
    another execution, even at the same identity."""

    attempt: str
    lines: tuple[LedgerLine, ...] = field(repr=False)
    jobset: str = ""

    @property
    def ident(self) -> Attempt:
        return Attempt.parse(self.attempt)

    @property
    def job(self) -> str:
        return self.lines[0].job

    @property
    def name(self) -> str:
        """The identity, and the JobSet's UID when there is one."""
        return f"{self.attempt} (JobSet {self.jobset})" if self.jobset else self.attempt

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
        """Every rank that wrote a line ended with exit 0 (one rank that exits 0 while
        another was stopped is not a job that ran to its end)."""
        last: dict[str, LedgerLine] = {}
        for ln in self.lines:
            last[ln.rank] = ln
        return bool(last) and all(ln.kind == "exit" and ln.status == 0
                                  for ln in last.values())


@dataclass(frozen=True)
class Pod:
    """Every line one pod wrote (by its UID, or its name in a ledger without UIDs)."""

    key: str
    lines: tuple[LedgerLine, ...] = field(repr=False)

    @property
    def first(self) -> LedgerLine:
        return self.lines[0]

    @property
    def job(self) -> str:
        return self.first.job

    @property
    def attempt(self) -> str:
        return self.first.attempt

    @property
    def rank(self) -> str:
        return self.first.rank

    @property
    def execution(self) -> tuple[str, str]:
        """(JobSet UID, identity): the execution the pod is a rank of."""
        return (self.first.jobset, self.first.attempt)

    @property
    def start_us(self) -> int:
        return self.lines[0].wall_us

    @property
    def end_us(self) -> int:
        return self.lines[-1].wall_us

    def describe(self) -> str:
        uid = f" uid {self.first.uid}" if self.first.uid else ""
        js = f" JobSet {self.first.jobset}" if self.first.jobset else ""
        return f"pod {self.first.pod}{uid} ({self.attempt} rank {self.rank or '?'}{js})"


def _sorted(lines: Iterable[LedgerLine]) -> tuple[LedgerLine, ...]:
    return tuple(sorted(lines, key=lambda ln: (ln.wall_us, ln.seq)))


def executions(ledger: Iterable[LedgerLine]) -> dict[str, list[Execution]]:
    """The executions of each job (by JobSet UID and identity), ordered by start."""
    by_exec: dict[tuple[str, str], list[LedgerLine]] = defaultdict(list)
    for ln in ledger:
        by_exec[(ln.jobset, ln.attempt)].append(ln)
    by_job: dict[str, list[Execution]] = defaultdict(list)
    for (jobset, attempt), lines in by_exec.items():
        ex = Execution(attempt, _sorted(lines), jobset)
        by_job[ex.job].append(ex)
    for exs in by_job.values():
        exs.sort(key=lambda e: (e.start_us, e.attempt, e.jobset))
    return dict(by_job)


def pods(ledger: Iterable[LedgerLine]) -> dict[str, list[Pod]]:
    """The pods of each job, ordered by their first line. A pod is one UID (or name);
    lines of one pod that carry two identities are two pods (it cannot be one)."""
    by_pod: dict[tuple[str, str, str], list[LedgerLine]] = defaultdict(list)
    for ln in ledger:
        by_pod[(ln.pod_key, ln.jobset, ln.attempt)].append(ln)
    by_job: dict[str, list[Pod]] = defaultdict(list)
    for (key, _, _), lines in by_pod.items():
        p = Pod(key, _sorted(lines))
        by_job[p.job].append(p)
    for ps in by_job.values():
        ps.sort(key=lambda p: (p.start_us, p.key, p.attempt))
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
    """(a) Two pods of a job alive at once (their closed ledger intervals intersect) are a
    violation unless they are different ranks of one execution (the same JobSet, A and J).
    So two pods of one rank at one identity (a JobSet re-made under the same name and A, a
    replacement pod beside one still in its TERM handler) are caught, not taken for one.

    And no execution starts inside another's span (first start to last line of any rank),
    even between two of its pods: an old execution's rank that starts after a newer
    execution ran is as wrong as an overlap. A pair of executions already named by a pod
    pair is not named again.
    """
    problems: list[str] = []
    ctx_lines: list[LedgerLine] = []
    ctx_ops: list[Operation] = []

    def context(job: str, lo: int, hi: int) -> None:
        nonlocal ctx_lines, ctx_ops
        if not ctx_lines:
            lines, near = _around(job, lo, hi, ledger, ops)
            ctx_lines, ctx_ops = list(lines), list(near)

    all_exs = executions(ledger)
    for job, ps in sorted(pods(ledger).items()):
        named: set[frozenset[tuple[str, str]]] = set()
        for i, q in enumerate(ps):
            for p in ps[:i]:
                if q.start_us > p.end_us:
                    continue
                same = p.execution == q.execution
                if same and p.rank != q.rank:
                    continue  # ranks of one execution run side by side
                why = ("the same rank of the same execution" if same else
                       "another execution" + (", the same identity"
                                              if p.attempt == q.attempt else ""))
                problems.append(
                    f"job {job}: {q.describe()} started at {q.start_us} us, "
                    f"{(p.end_us - q.start_us) / 1000:.3f} ms before {p.describe()} wrote its "
                    f"last line at {p.end_us} us: {why}")
                named.add(frozenset((p.execution, q.execution)))
                context(job, q.start_us, p.end_us)
        latest: Execution | None = None  # the execution that ends last so far
        for ex in all_exs.get(job, []):
            if latest is not None and ex.start_us <= latest.end_us and frozenset(
                    ((latest.jobset, latest.attempt), (ex.jobset, ex.attempt))) not in named:
                problems.append(
                    f"job {job}: {ex.name} started at {ex.start_us} us, "
                    f"{(latest.end_us - ex.start_us) / 1000:.3f} ms before {latest.name} "
                    f"wrote its last line at {latest.end_us} us (within its span)")
                context(job, ex.start_us, latest.end_us)
            if latest is None or ex.end_us > latest.end_us:
                latest = ex
    if problems:
        return _fail("a", problems, ctx_lines, ctx_ops)
    return Verdict("a", True)


def check_identity(ledger: Sequence[LedgerLine], ops: Sequence[Operation],
                   final: Final) -> Verdict:
    """(b) Ordered by start, each execution of a job carries a DISPATCH_EPOCH above every
    earlier execution's: within an attempt (R = A + J rises), across the attempts of a
    submission (a later attempt, a new TrainJob whose A starts again, runs above everything
    the attempts before it ran) and across submissions.

    Every line of an execution must carry the same epoch, and the epoch must be the one its
    DISPATCH_ATTEMPT implies (:func:`dispatch_kubeflow.core.identity.epoch`). Executions are
    compared by the epoch they carried (what a program orders its writes by). Two
    executions at one identity (a JobSet re-made without a raise of A) are equal, so the
    later one is flagged.
    """
    problems: list[str] = []
    ctx: tuple[tuple[LedgerLine, ...], tuple[Operation, ...]] | None = None
    for job, exs in sorted(executions(ledger).items()):
        judged: list[tuple[Execution, Attempt, int]] = []
        for ex in exs:
            try:
                idn = ex.ident
                want = idn.epoch
            except ValueError as e:  # IdentityError: not an identity, or out of range
                problems.append(f"job {job}: {ex.name}: {e}")
                ctx = ctx or _around(job, ex.start_us, ex.start_us, ledger, ops)
                continue
            epochs = {ln.epoch for ln in ex.lines}
            if epochs != {str(want)}:
                problems.append(f"job {job}: {ex.name} carries DISPATCH_EPOCH "
                                f"{sorted(epochs)}, its identity implies {want}")
                ctx = ctx or _around(job, ex.start_us, ex.start_us, ledger, ops)
            carried = ex.lines[0].epoch_int
            judged.append((ex, idn, want if carried is None else carried))
        top: tuple[Execution, Attempt, int] | None = None  # the highest epoch so far
        for ex, c, ce in judged:
            if top is not None and ce <= top[2]:
                prev, p, pe = top
                why = f"DISPATCH_EPOCH {pe} -> {ce}"
                if (c.submission, c.attempt) == (p.submission, p.attempt):
                    why += f" (A + J {p.r} -> {c.r})"
                else:
                    why += (f" (submission {p.submission} attempt {p.attempt} -> "
                            f"submission {c.submission} attempt {c.attempt})")
                problems.append(f"job {job}: {prev.name} then {ex.name}: {why}, not above "
                                "every earlier execution's")
                ctx = ctx or _around(job, prev.end_us, ex.start_us, ledger, ops)
            if top is None or ce > top[2]:
                top = (ex, c, ce)
    if problems:
        lines, near = ctx or ((), ())
        return _fail("b", problems, lines, near)
    return Verdict("b", True)


def _last_stops(ops: Sequence[Operation]) -> dict[str, int]:
    """Each job's last StopJob call (whatever it answered)."""
    out: dict[str, int] = {}
    for o in ops:
        if o.op == OP_STOP:
            out[o.job] = max(out.get(o.job, o.call_us), o.call_us)
    return out


def check_none_lost(ledger: Sequence[LedgerLine], ops: Sequence[Operation],
                    final: Final) -> Verdict:
    """(c) Every job that an Open succeeded on after its last StopJob (or with none), and
    not held at the end, has an execution since that stop in which every rank exited 0,
    or the final observations say why not.

    A later attempt or submission, started and opened after a StopJob, must run as any
    job must."""
    stops = _last_stops(ops)
    opened = {o.job for o in ops if o.op == OP_OPEN and o.ok
              and o.call_us > stops.get(o.job, o.call_us - 1)}
    exs = executions(ledger)
    problems: list[str] = []
    explained: list[str] = []
    near: list[Operation] = []
    for job in sorted(opened):
        obs = final.job(job)
        if obs is not None and obs.held:
            continue
        since = stops.get(job)
        mine = [ex for ex in exs.get(job, []) if since is None or ex.start_us > since]
        if any(ex.succeeded for ex in mine):
            continue
        if obs is not None and obs.reason:
            explained.append(f"{job}: {obs.reason}")
            continue
        ran = ", ".join(f"{ex.name} (last line {ex.lines[-1].kind})" for ex in mine) \
            or "no ledger line at all" + (" since its StopJob" if since is not None else "")
        problems.append(f"job {job} was opened and neither stopped nor held, but no "
                        f"execution ran to its end, every rank exiting 0 ({ran}), and no "
                        "reason was reported")
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


def _hold_end(hold: Operation, later: Sequence[Operation]) -> tuple[int, str] | None:
    """When the hold ``hold`` placed ended: at the first Release after it that removed a
    hold, else at its expiry; None when neither is recorded (it may stand to the end)."""
    for o in later:
        if o.op == OP_RELEASE and o.ok and o.result == str(ReleaseOutcome.RELEASED) \
                and not o.args.get("wrong"):
            return o.call_us, f"released by operation {o.id}"
    until = hold.args.get("until_s")
    if until:
        return (hold.call_us + int(float(until) * 1_000_000),
                f"the hold of operation {hold.id} expired ({float(until):g} s)")
    return None


def check_released_ran(ledger: Sequence[LedgerLine], ops: Sequence[Operation],
                       final: Final) -> Verdict:
    """(g) Liveness: a job whose last hold ended (a Release that removed it, or its expiry),
    opened before that, neither held, stopped nor started again since, and not done before
    it, has a pod that started after the hold ended, or the final observations say why not:
    it failed or is gone, or the ClusterQueue had no room for it.

    A job still held, queued with quota free, or reserving its quota with no pod (the
    readmission check waiting on a pod that will never go) at the end is a violation: the
    settle bound's "not finished" is no excuse here, where (c) takes it.
    """
    by_job: dict[str, list[Operation]] = defaultdict(list)
    for o in sorted(ops, key=lambda o: (o.call_us, o.id)):
        if o.job:
            by_job[o.job].append(o)
    all_pods = pods(ledger)
    exs = executions(ledger)
    problems: list[str] = []
    explained: list[str] = []
    near: list[Operation] = []
    for job, jops in sorted(by_job.items()):
        holds = [i for i, o in enumerate(jops) if o.op == OP_HOLD]
        if not holds or not jops[holds[-1]].ok:
            continue  # never held, or its last hold's fate is unknown
        hold = jops[holds[-1]]
        end = _hold_end(hold, jops[holds[-1] + 1:])
        if end is None:
            continue  # held to the end: (c) and the final observations say so
        t, how = end
        if any(o.call_us > hold.call_us and o.op in (OP_STOP, OP_START) for o in jops):
            continue  # stopped or started again since: (c) and (d) judge that
        if not any(o.op == OP_OPEN and o.ok and o.call_us < t for o in jops):
            continue  # never opened: it waits at the start gate, as it should
        if any(ex.succeeded and ex.end_us < t for ex in exs.get(job, [])):
            continue  # it had run to its end already
        if any(p.start_us > t for p in all_pods.get(job, [])):
            continue
        obs = final.job(job)
        if obs is not None and obs.state == "succeeded" and not obs.held \
                and any(ex.succeeded for ex in exs.get(job, [])):
            # The execution the hold did not stop in time ran to its end after it (a short
            # hold that expired before Kueue's eviction ended the pods): nothing to run.
            explained.append(f"{job}: succeeded, by an execution that outlived the hold")
            continue
        if obs is not None and obs.state in ("failed", "gone") and not obs.held:
            explained.append(f"{job}: {obs.state} at the end")
            continue
        if obs is not None and obs.quota_free is False and not obs.held:
            explained.append(f"{job}: the ClusterQueue had no room for it")
            continue
        seen = ("not observed at the end" if obs is None else
                f"at the end: {'held, ' if obs.held else ''}state {obs.state or '?'}, "
                f"quota free {obs.quota_free}" + (f" ({obs.reason})" if obs.reason else ""))
        problems.append(f"job {job}: {how} at {t} us, not held, stopped or started since, "
                        f"but no pod of it started after; {seen}")
        near += [o for o in jops if o.call_us >= hold.call_us]
    if problems:
        return _fail("g", problems, (), near)
    note = ("did not run again, with a reason: " + "; ".join(explained)) if explained else ""
    return Verdict("g", True, note)


Check = Callable[[Sequence[LedgerLine], Sequence[Operation], Final], Verdict]
CHECKS: tuple[Check, ...] = (check_clock, check_no_overlap, check_identity, check_none_lost,
                             check_stop, check_calls, check_no_kopf, check_released_ran)


def judge(ledger: Iterable[LedgerLine], ops: Iterable[Operation],
          final: Final | None = None) -> list[Verdict]:
    """Every property's verdict, in the order of :data:`PROPERTIES`."""
    lines, calls = list(ledger), list(ops)
    return [check(lines, calls, final or Final()) for check in CHECKS]

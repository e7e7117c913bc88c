"""The campaign across clusters (issue 30 item 5): seeded runs on the three local MultiKueue
clusters (``deploy/local/multikueue.sh``: a manager ``mk-manager``, workers ``mk-worker1`` and
``mk-worker2``), with worker partitions and heals, worker API server restarts and controller
kills in the mix, judged from one ledger on this host (one clock for every cluster).

``python -m chaos.multikueue --runs N --seed S --out DIR [--first I] [--plan-only]`` makes
runs ``I .. I+N-1`` of seed ``S``; run ``i`` is planned by :func:`plan_run` from ``(S, i)``
alone, so ``--seed S --first i --runs 1`` replays it. ``--plan-only`` prints the plans
(JSON) and touches nothing. The clusters must be up (``make mk-up``); the harness runs as
root (``multikueue.sh cut``/``heal`` and ``apiserver.sh restart`` need it, as does the
ledger's host directory). A file ``DIR/STOP`` stops the campaign before its next run.

A run (:class:`MkRun`):

1. **ready**: in each cluster every node Ready and dispatch-admission available with its
   Lease held by a live pod; in the manager both MultiKueueClusters Active and both
   workers' permits standing (not revoked, renewed). Otherwise the campaign stops
   without judging;
2. **setup**: a namespace ``mk-chaos-<S>-<i>`` in all three clusters with its queues (the
   manager's ClusterQueue lists MultiKueue's check and dispatch's, the workers' none), the
   ledger's host directory ``/var/lib/dispatch-chaos/mk-<S>-<i>`` and, in the manager, a
   ClusterTrainingRuntime that mounts it (:func:`chaos.objects.runtime_body`; the library
   copies it into the workers);
3. **jobs**: 1 or 2 jobs of one rank each, started through the library in MultiKueue mode
   and opened at once; each runs the ledger program until TERM or for 30 to 120 s;
4. **schedule**: 2 to 4 steps, each a task that waits for its delay after the open, so
   that steps overlap: ``cut`` (a worker cut off from the manager for 20 s, below the
   permit; 70 s, revoked but not yet re-dispatched; or 150 s, past Kueue's
   workerLostTimeout, re-dispatched; then healed), ``restart-apiserver`` (a worker's),
   ``kill-controller`` (one dispatch-admission pod, the Lease holder, force-deleted in the
   manager or a worker) and ``hold`` (a hold, released 10 to 30 s later). A step's worker
   is the one its job runs in (``target`` "running") or the other one ("other") when that
   is known, else the plan's; never two cuts of one worker at once;
5. **end**: every worker healed, each job waited for (bounded) until it finished or runs,
   StopJob of every job, and every cluster waited for (bounded) until nothing of the jobs
   is left in the namespace;
6. **judge** (:func:`collect_verdicts`): over the whole ledger, across clusters, the
   checker's ``clock`` (one clock), ``a`` (no two executions of a job overlap, in any
   clusters) and ``b`` (each execution's identity above every earlier one's); ``stop``
   (every StopJob complete) and ``left`` (nothing of the jobs left in any cluster).

Per run ``DIR/<S>-<i>/`` holds ``plan.json``, ``ops.jsonl`` (every call and step,
:class:`chaos.recorder.Recorder`), ``ledger.jsonl``, ``verdicts.txt`` and ``result.json``
(steps with their real times, executions with A, worker, start and end, verdicts, phase
durations); ``DIR/summary.md`` is the table of every run in DIR. The exit code is 1 when
any run of this invocation has a violation, else 2 when one could not be judged (or the
clusters were not ready), else 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import math
import os
import random
import shutil
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from chaos.checker import check_clock, check_identity, check_no_overlap, executions
from chaos.faults import tool
from chaos.health import controller_pods, health_problem, lease_holder, until_no_problem
from chaos.history import (
    OP_HOLD,
    OP_OPEN,
    OP_RELEASE,
    OP_START,
    OP_STOP,
    Final,
    LedgerLine,
    Operation,
    read_ledger,
)
from chaos.objects import QUEUE, job_request, ledger_dir, runtime_body
from chaos.plan import JobPlan
from chaos.recorder import DEADLINES, Recorder, now_us, stop_summary
from chaos.run import LEDGER_HOST_ROOT, _uninterrupted, startable_backend
from chaos.runner import STOP_FILE, runner_version
from dispatch_kubeflow import (
    Actor,
    ActorKind,
    Backend,
    CallMeta,
    HoldMeta,
    JobID,
    ObjectRef,
    ObjectState,
    Observation,
    errors,
)
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r
from dispatch_kubeflow.mode_kueue import workload_of
from dispatch_kubeflow.mode_multikueue import stuck_eviction

# --- the clusters (deploy/local/multikueue.sh's defaults) -----------------------------------

MANAGER = "mk-manager"
WORKERS = ("mk-worker1", "mk-worker2")
CLUSTERS = (MANAGER, *WORKERS)
MULTIKUEUE_CHECK = "multikueue"  # multikueue.sh's AdmissionCheck
STATE_ROOT = Path(os.environ.get("DISPATCH_STATE_ROOT", "/var/lib/dispatch-local"))
KUBECONFIG_DIR = Path(os.environ.get("MK_KUBECONFIG_DIR", "/tmp"))


def kubeconfig(cluster: str) -> str:
    return str(KUBECONFIG_DIR / f"{cluster}.kubeconfig")


def other_worker(worker: str) -> str:
    return WORKERS[1] if worker == WORKERS[0] else WORKERS[0]


def worker_of(node: str) -> str:
    """The cluster whose node ``node`` is (local nodes are named ``<cluster>-…``)."""
    return next((c for c in CLUSTERS if node.startswith(f"{c}-")), "")


# --- the plan --------------------------------------------------------------------------------

PLAN_VERSION = 1
"""The plan's version: ``(seed, index)`` draws the same plan for as long as it stays."""
STEP_KINDS = ("cut", "restart-apiserver", "kill-controller", "hold")
CUT_LENGTHS = (20.0, 70.0, 150.0)
"""Below the permit (60 s: no revocation); revoked (62 s) but short of Kueue's
workerLostTimeout (2 min: not re-dispatched); past it (re-dispatched to the other worker)."""
TARGETS = ("running", "other")
CONTROLLER_TARGETS = ("manager", *TARGETS)
APISERVER_DOWN = (0.0, 2.0, 5.0)  # seconds a restarted API server stays down
RUN_SECONDS = (30, 120)  # a job that does not run until TERM runs this long (uniform)
UNTIL_TERM = 0.5         # the share of jobs that run until TERM
FIRST_STEP = (10.0, 60.0)  # the first step's delay after the open (a job starts in ~30 s)
STEP_GAP = (5.0, 50.0)     # between two steps' planned delays
HOLD_LENGTH = (10.0, 30.0)
CUT_GAP = 10.0   # seconds between a heal and the next cut of the same worker, in the plan
HOLD_GAP = 5.0   # between a release and the next hold of the same job


@dataclass(frozen=True)
class MkJob:
    """One job: one rank running the ledger program ``run_seconds`` (0: until TERM)."""

    run_seconds: float

    def job_plan(self) -> JobPlan:
        return JobPlan(nodes=1, fail_once=False, run_seconds=self.run_seconds,
                       open_at_start=True)


@dataclass(frozen=True)
class MkStep:
    """One step, ``at`` seconds after the jobs were opened.

    ``seconds``: cut, how long the worker stays cut before its heal; hold, how long until
    the release; restart-apiserver, how long the API server stays down; kill-controller, 0.
    ``target``: "running" (the worker job ``job`` runs in), "other" (the other worker) or,
    for kill-controller, "manager"; "" for a hold (of job ``job``). ``worker``: the worker
    taken when the job's is not known at run time (the manager for "manager")."""

    kind: str
    at: float
    seconds: float = 0.0
    job: int = 0
    target: str = ""
    worker: str = ""

    @property
    def end(self) -> float:
        return self.at + self.seconds


@dataclass(frozen=True)
class MkPlan:
    seed: int
    index: int
    jobs: tuple[MkJob, ...]
    steps: tuple[MkStep, ...]
    version: int = PLAN_VERSION

    def timeline(self) -> list[tuple[float, str, str]]:
        """Every action as planned: ``(seconds after the open, action, what)``; a cut is
        followed by its heal, a hold by its release (at equal times the heal or release
        comes first)."""
        events: list[tuple[float, int, str, str]] = []
        for s in self.steps:
            if s.kind == "cut":
                events += [(s.at, 1, "cut", s.worker), (s.end, 0, "heal", s.worker)]
            elif s.kind == "hold":
                events += [(s.at, 1, "hold", f"job{s.job}"),
                           (s.end, 0, "release", f"job{s.job}")]
            else:
                events.append((s.at, 1, s.kind, s.worker))
        return [(round(t, 1), action, what) for t, _, action, what in sorted(events)]

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "timeline": self.timeline()}


def plan_run(seed: int, index: int) -> MkPlan:
    """Run ``index`` of seed ``seed``: its jobs and steps, a pure function of the two."""
    rng = random.Random(f"dispatch-mk-chaos/{PLAN_VERSION}/{seed}/{index}")
    jobs = tuple(MkJob(0.0 if rng.random() < UNTIL_TERM else float(rng.randint(*RUN_SECONDS)))
                 for _ in range(rng.choice((1, 2))))
    steps: list[MkStep] = []
    at = 0.0
    for k in range(rng.randint(2, 4)):
        at = round(at + rng.uniform(*(FIRST_STEP if k == 0 else STEP_GAP)), 1)
        kind = rng.choice(STEP_KINDS)
        job = rng.randrange(len(jobs))
        worker = rng.choice(WORKERS)
        if kind == "cut":
            steps.append(_fit_cut(steps, MkStep(kind, at, rng.choice(CUT_LENGTHS), job,
                                                rng.choice(TARGETS), worker)))
        elif kind == "hold":
            steps.append(_fit_hold(steps, MkStep(kind, at, round(rng.uniform(*HOLD_LENGTH), 1),
                                                 job)))
        elif kind == "restart-apiserver":
            steps.append(MkStep(kind, at, rng.choice(APISERVER_DOWN), job, rng.choice(TARGETS),
                                worker))
        else:
            target = rng.choice(CONTROLLER_TARGETS)
            steps.append(MkStep(kind, at, 0.0, job, target,
                                MANAGER if target == "manager" else worker))
    return MkPlan(seed, index, jobs, tuple(sorted(steps, key=lambda s: (s.at, s.kind))))


EPSILON = 1e-6  # plan times are tenths of seconds: sums of floats are a hair off


def _clash(a: MkStep, b: MkStep, gap: float) -> bool:
    """Whether ``a`` and ``b`` overlap in time, or come closer than ``gap``."""
    return a.at < b.end + gap - EPSILON and b.at < a.end + gap - EPSILON


def _tenth_up(t: float) -> float:
    """``t`` rounded up to a tenth of a second (never below it, beyond EPSILON)."""
    return math.ceil(t * 10 - EPSILON) / 10


def _fit_cut(steps: Sequence[MkStep], cut: MkStep) -> MkStep:
    """``cut`` on its worker, else on the other one, else later: never two cuts of one
    worker at once (nor within CUT_GAP of each other)."""
    while True:
        for w in (cut.worker, other_worker(cut.worker)):
            moved = MkStep(cut.kind, cut.at, cut.seconds, cut.job, cut.target, w)
            if not any(s.kind == "cut" and s.worker == w and _clash(s, moved, CUT_GAP)
                       for s in steps):
                return moved
        # Both workers taken: start after the earliest of the clashing cuts (later each time).
        at = min(s.end + CUT_GAP for s in steps if s.kind == "cut" and _clash(s, cut, CUT_GAP))
        cut = MkStep(cut.kind, _tenth_up(at), cut.seconds, cut.job, cut.target, cut.worker)


def _fit_hold(steps: Sequence[MkStep], hold: MkStep) -> MkStep:
    """``hold``, later if another hold of its job would still stand (its instance apart)."""
    while True:
        clash = [s for s in steps if s.kind == "hold" and s.job == hold.job
                 and _clash(s, hold, HOLD_GAP)]
        if not clash:
            return hold
        hold = MkStep(hold.kind, _tenth_up(max(s.end for s in clash) + HOLD_GAP),
                      hold.seconds, hold.job)


def resolve(step: MkStep, job_cluster: str) -> str:
    """The cluster a step acts on: the manager for a "manager" target; else the worker the
    job runs in ("running") or the other worker ("other") when ``job_cluster`` names a
    worker; else the plan's worker."""
    if step.target == "manager":
        return MANAGER
    if job_cluster in WORKERS:
        return job_cluster if step.target == "running" else other_worker(job_cluster)
    return step.worker


# --- the verdicts ------------------------------------------------------------------------------

PROPERTIES: dict[str, str] = {
    "clock": "the ordering clock did not step (one host, one clock for every cluster)",
    "a": "no two pods or executions of a job alive at once, in any clusters",
    "b": "each execution of a job carries an identity above every earlier one's, across "
         "clusters",
    "stop": "every StopJob returned a complete report",
    "left": "nothing of the jobs left in any cluster after StopJob",
}


@dataclass(frozen=True)
class MkVerdict:
    prop: str
    ok: bool
    message: str = ""


def collect_verdicts(ledger: Sequence[LedgerLine], ops: Sequence[Operation],
                     stops: Mapping[str, bool], left: Sequence[str]) -> list[MkVerdict]:
    """The run's verdicts, in :data:`PROPERTIES`' order: the checker's clock, (a) and (b)
    over the whole ledger (every cluster's pods), each StopJob's completeness (``stops``:
    job -> complete) and what was left in the clusters (``left``: one entry a thing)."""
    out = [MkVerdict(v.prop, v.ok, v.message)
           for v in (check(ledger, ops, Final())
                     for check in (check_clock, check_no_overlap, check_identity))]
    bad = sorted(job for job, ok in stops.items() if not ok)
    out.append(MkVerdict("stop", not bad, f"StopJob not complete for {', '.join(bad)}"
                         if bad else ""))
    out.append(MkVerdict("left", not left, (f"left: {'; '.join(left[:10])}"
                                            + (f" (and {len(left) - 10} more)"
                                               if len(left) > 10 else "")) if left else ""))
    return out


def format_verdicts(verdicts: Sequence[MkVerdict], run: str) -> str:
    lines = [f"{'ok  ' if v.ok else 'FAIL'} ({v.prop}) {PROPERTIES[v.prop]}" for v in verdicts]
    for v in verdicts:
        if not v.ok:
            lines += ["", f"VIOLATION run={run} property ({v.prop}) {PROPERTIES[v.prop]}",
                      v.message]
    return "\n".join(lines)


def execution_rows(ledger: Sequence[LedgerLine]) -> list[dict[str, Any]]:
    """Each execution of the ledger: its job, identity, A, J, worker, start and end (µs,
    the ledger's clock), length, lines, last line's kind, whether it ran to its end; by
    start."""
    rows: list[dict[str, Any]] = []
    for job, exs in executions(ledger).items():
        for ex in exs:
            try:
                a: int | None = ex.ident.admissions
                j: int | None = ex.ident.restarts
            except ValueError:  # not an identity: (b) says so
                a = j = None
            rows.append({"job": job, "attempt": ex.attempt, "a": a, "j": j,
                         "worker": worker_of(ex.lines[0].node), "node": ex.lines[0].node,
                         "start_us": ex.start_us, "end_us": ex.end_us,
                         "seconds": round((ex.end_us - ex.start_us) / 1e6, 1),
                         "lines": len(ex.lines), "last": ex.lines[-1].kind,
                         "succeeded": ex.succeeded})
    rows.sort(key=lambda row: (row["start_us"], row["job"]))
    return rows


# --- a run's record and the summary -------------------------------------------------------------


@dataclass
class StepRecord:
    """A step as it ran: the cluster it acted on, when (seconds after the open, and µs of
    the ledger's clock), what it did (``detail``) and how it failed (``error``)."""

    step: int
    kind: str
    planned_at: float
    seconds: float
    target: str
    job: int
    cluster: str = ""
    job_cluster: str = ""  # the job's worker as known when the step resolved its cluster
    began_s: float | None = None
    ended_s: float | None = None
    began_us: int | None = None
    ended_us: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    error: str = ""


@dataclass
class MkResult:
    seed: int
    index: int
    namespace: str
    runner: str = ""
    started_at: str = ""
    plan_version: int = PLAN_VERSION
    jobs: list[dict[str, Any]] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    executions: list[dict[str, Any]] = field(default_factory=list)
    max_a: int = 0
    ledger_lines: int = 0
    verdicts: dict[str, bool] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    observations: list[dict[str, Any]] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)
    cleanup: list[str] = field(default_factory=list)
    error: str = ""
    duration_s: float = 0.0

    @property
    def judged(self) -> bool:
        return bool(self.verdicts) and not self.error

    @property
    def ok(self) -> bool:
        return self.judged and all(self.verdicts.values())

    @property
    def violated(self) -> bool:
        return not all(self.verdicts.values())

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> MkResult:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in obj.items() if k in known})


def step_label(step: Mapping[str, Any]) -> str:
    """A step in a few words: ``cut worker1 70s``, ``restart worker2``, ``kill manager``,
    ``hold job0 12s``; the cluster it acted on (else the one planned)."""
    where = str(step.get("cluster") or step.get("worker") or "?").removeprefix("mk-")
    kind, secs = str(step["kind"]), float(step.get("seconds") or 0)
    if kind == "cut":
        return f"cut {where} {secs:g}s"
    if kind == "hold":
        return f"hold job{step.get('job', 0)} {secs:g}s"
    if kind == "restart-apiserver":
        return f"restart {where}"
    return f"kill {where}"


# Each property in a few words, as docs/guarantees.md's table names it.
PROPERTY_NAMES: dict[str, str] = {
    "clock": "steady clock", "a": "no overlap, across clusters",
    "b": "rising identity, across clusters", "stop": "every StopJob complete",
    "left": "nothing left in any cluster"}
# The mark of a job the end phase settled at once on Inspect's remark (see _stuck).
KUEUE_STUCK = "kueue#15380"

SUMMARY_HEAD = ("| run | steps | executions | max A | violations | seconds |\n"
                "|---|---|---:|---:|---|---:|")


def summary_row(res: MkResult) -> str:
    """One run's row of ``summary.md``."""
    steps = ", ".join(step_label(s) for s in res.steps) or "-"
    if res.error:
        verdict = f"not judged: {res.error}"
    elif not res.verdicts:
        verdict = "not judged"
    else:
        verdict = "; ".join(res.violations) or "none"
    verdict = verdict.replace("|", "\\|").replace("\n", " ")[:200]
    return (f"| {res.seed}-{res.index} | {steps} | {len(res.executions)} | {res.max_a} | "
            f"{verdict} | {res.duration_s:.0f} |")


def fence_stops(results: Sequence[MkResult]) -> list[str]:
    """What worker faults cost running jobs, by the runner's commit: of the executions running
    in a worker when a cut of it or its API server's restart began, how many the fence
    stopped (the last line a beat, no exit, before the step ended + 60 s) and how many
    seconds after the step began (docs/guarantees.md tables it)."""
    running: Counter[tuple[str, str]] = Counter()
    stopped: dict[tuple[str, str], list[float]] = {}
    for res in results:
        for s in res.steps:
            if s.get("kind") not in ("cut", "restart-apiserver") or not s.get("began_us"):
                continue
            what = (f"cut {float(s['seconds']):g} s" if s["kind"] == "cut"
                    else "API server restart")
            began, ended = float(s["began_us"]), float(s["ended_us"])
            for x in res.executions:
                if x.get("worker") != s.get("cluster") \
                        or not float(x["start_us"]) < began < float(x["end_us"]):
                    continue
                running[res.runner, what] += 1
                if x.get("last") == "beat" and float(x["end_us"]) < ended + 60e6:
                    stopped.setdefault((res.runner, what), []).append(
                        (float(x["end_us"]) - began) / 1e6)
    return [f"- {runner or 'unknown'}, {what}: {len(stopped.get((runner, what), []))} of {n}"
            + (" stopped (" + ", ".join(f"{v:.0f}" for v in sorted(stopped[runner, what]))
               + " s after it began)" if stopped.get((runner, what)) else " stopped")
            for (runner, what), n in sorted(running.items())]


def summary_markdown(results: Sequence[MkResult]) -> str:
    """The table of ``results`` (by seed and index), then the totals and each run's notes."""
    ordered = sorted(results, key=lambda res: (res.seed, res.index))
    kinds: Counter[str] = Counter()
    for res in ordered:
        for s in res.steps:
            kinds[str(s["kind"]) + (f" {float(s['seconds']):g}s" if s["kind"] == "cut"
                                    else "")] += 1
    violated = [res for res in ordered if res.verdicts and res.violated]
    stuck = sum(1 for res in ordered for job in res.jobs
                if KUEUE_STUCK in str(job.get("settled", "")))
    unjudged = [res for res in ordered if not res.judged]
    lines = [SUMMARY_HEAD, *(summary_row(res) for res in ordered), "",
             f"{len(ordered)} runs: {len(ordered) - len(violated) - len(unjudged)} without "
             f"violation, {len(violated)} with a violation, {len(unjudged)} not judged; "
             f"{sum(len(res.executions) for res in ordered)} executions judged, "
             f"{sum(res.duration_s for res in ordered) / 3600:.1f} h.",
             "Steps: " + (", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) or "none")
             + ".",
             f"Jobs {sum(len(res.jobs) for res in ordered)}; ledger lines "
             f"{sum(res.ledger_lines for res in ordered):,}; runs with a job at A >= 2: "
             f"{sum(1 for res in ordered if res.max_a >= 2)}; jobs settled at once as never "
             f"to run again (kueue#15380): {stuck}.",
             "", "| property | passed | failed | not judged |", "|---|---:|---:|---:|",
             *(f"| {name} | {sum(1 for res in ordered if res.verdicts.get(key) is True)} | "
               f"{sum(1 for res in ordered if res.verdicts.get(key) is False)} | "
               f"{sum(1 for res in ordered if key not in res.verdicts)} |"
               for key, name in PROPERTY_NAMES.items())]
    stops = fence_stops(ordered)
    if stops:
        lines += ["", "Executions running in a worker when a step on it began, and those its "
                  "fence stopped, by runner:", *stops]
    noted = [res for res in ordered if res.notes or res.cleanup]
    if noted:
        lines += ["", "Notes:"]
        lines += [f"- {res.seed}-{res.index}: " + "; ".join([*res.notes, *res.cleanup])[:400]
                  for res in noted]
    return "\n".join(lines) + "\n"


def load_results(out: Path) -> list[MkResult]:
    """Every run's record in ``out`` (``<seed>-<index>/result.json``)."""
    found = []
    for path in sorted(out.glob("*/result.json")):
        with contextlib.suppress(ValueError, TypeError, OSError):
            found.append(MkResult.from_json(json.loads(path.read_text(encoding="utf-8"))))
    return found


def write_summary(out: Path) -> None:
    (out / "summary.md").write_text(summary_markdown(load_results(out)), encoding="utf-8")


# --- the clusters' readiness ------------------------------------------------------------------

READY_SECONDS = 300.0


def clusters_problem() -> str:
    """"" when the three clusters look up (their ready files and kubeconfigs), else what
    is missing."""
    for c in CLUSTERS:
        if not (STATE_ROOT / c / "ready").exists():
            return (f"cluster {c} is not up (no {STATE_ROOT / c / 'ready'}): run `make mk-up` "
                    "(deploy/local/multikueue.sh up) first")
        if not Path(kubeconfig(c)).exists():
            return f"no kubeconfig {kubeconfig(c)} for {c}: run `make mk-up` again"
    return ""


def _condition(obj: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any]:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return {}


async def ready_problem(kubes: Mapping[str, Kube]) -> str:
    """"" when every cluster is healthy and both workers are joined to the manager, each
    with its permit standing; else which part is not."""
    for c, kube in kubes.items():
        problem = await health_problem(kube)
        if problem:
            return f"{c}: {problem}"
    manager = kubes[MANAGER]
    for w in WORKERS:
        active = _condition(await manager.get_or_none(r.MULTIKUEUE_CLUSTER, w), "Active")
        if active.get("status") != "True":
            return (f"{MANAGER}: MultiKueueCluster {w} not Active "
                    f"({active.get('reason', '?')}: {active.get('message', '')})")
        lease = await manager.get_or_none(r.LEASE, names.PERMIT_LEASE_PREFIX + w,
                                          names.CONTROLLER_NAMESPACE)
        if lease is None:
            return f"{MANAGER}: no permit Lease {names.PERMIT_LEASE_PREFIX}{w}"
        if names.PERMIT_REVOKED in (lease["metadata"].get("annotations") or {}):
            return f"{MANAGER}: {w}'s permit is revoked (not granted again yet)"
        if not ((lease.get("spec") or {}).get("holderIdentity") or ""):
            return f"{MANAGER}: {w}'s permit was never renewed"
    return ""


async def wait_ready(kubes: Mapping[str, Kube], limit: float) -> str:
    return await until_no_problem(lambda: asyncio.wait_for(ready_problem(kubes), 60),
                                  limit, 3)


# --- one run -------------------------------------------------------------------------------

SETTLE_SECONDS = 420.0  # after the last heal: a re-dispatch takes the permit and a start
EMPTY_SECONDS = 300.0   # after StopJob, for every cluster to be empty of the jobs
STOP_SECONDS = 180.0    # timeouts.stopJob
OBSERVE_EVERY = 3.0
INSPECT_BOUND = 20.0    # an Inspect that touches a cut worker waits for no more
GONE_SECONDS = 180.0
LEFT_KINDS = (r.TRAINJOB, r.WORKLOAD, r.TRAINING_RUNTIME, r.JOBSET, r.JOB, r.POD)


def backend_settings(namespace: str) -> dict[str, Any]:
    """The library in MultiKueue mode: the manager, and both workers by their kubeconfigs."""
    return {
        "cluster": {"kubeconfig": kubeconfig(MANAGER)},
        "namespace": namespace,
        "probeRuntime": {"kind": "ClusterTrainingRuntime", "name": "dispatch-kind"},
        "kueue": {"localQueue": QUEUE, "admissionCheck": names.ADMISSION_CHECK,
                  "multiKueue": {"workers": {w: {"kubeconfig": kubeconfig(w)}
                                             for w in WORKERS}}},
        # transient 90 s: a local API server takes up to ~45 s to restart on two busy cores.
        "timeouts": {"request": "10s", "stopJob": f"{STOP_SECONDS:g}s",
                     "preflightProbe": "20s", "transient": "90s"},
    }


@dataclass
class _Job:
    job: JobID
    plan: MkJob
    ref: ObjectRef | None = None
    next_instance: int = 1


class MkRun:
    def __init__(self, seed: int, index: int, out: Path, kubes: Mapping[str, Kube], *,
                 runner: str = "") -> None:
        self.seed, self.index = seed, index
        self.plan = plan_run(seed, index)
        self.namespace = f"mk-chaos-{seed}-{index}"
        self.runtime = f"dispatch-mk-chaos-{seed}-{index}"
        self.host_dir = LEDGER_HOST_ROOT / f"mk-{seed}-{index}"
        self.dir = out / f"{seed}-{index}"
        self.kubes = kubes
        self.rng = random.Random(f"dispatch-mk-chaos/run/{seed}/{index}")  # choices at run time
        self.result = MkResult(seed, index, self.namespace, runner=runner,
                               started_at=datetime.now(UTC).isoformat())
        self.rec = Recorder()
        self.jobs: list[_Job] = []
        self.records: list[StepRecord] = []
        self.cut_locks = {w: asyncio.Lock() for w in WORKERS}
        self.restart_locks = {w: asyncio.Lock() for w in WORKERS}
        self.known: dict[int, str] = {}  # job index -> the worker it was last seen in
        self.stops: dict[str, bool] = {}
        self.left: list[str] = []
        self.t_open = 0.0
        self._seen: dict[int, tuple[str, str, int, int]] = {}

    async def execute(self) -> MkResult:
        t0 = time.monotonic()
        if self.dir.exists():
            shutil.rmtree(self.dir)
        self.dir.mkdir(parents=True)
        (self.dir / "plan.json").write_text(json.dumps(self.plan.to_json(), indent=1) + "\n",
                                            encoding="utf-8")
        self.rec = Recorder(self.dir / "ops.jsonl")
        try:
            await self._phase("setup", self._setup())
            await self._run()
            await self._phase("empty", self._wait_empty())
            self._judge()
        except Exception as exc:
            self.result.error = f"{type(exc).__name__}: {exc}"[:1000]
        finally:
            await _uninterrupted(self._phase("cleanup", self._cleanup()))
            self.result.steps = [asdict(s) for s in self.records]
            self.result.duration_s = round(time.monotonic() - t0, 1)
            (self.dir / "result.json").write_text(
                json.dumps(self.result.to_json(), indent=1) + "\n", encoding="utf-8")
        return self.result

    async def _phase(self, name: str, work: Awaitable[None]) -> None:
        began = time.monotonic()
        try:
            await work
        finally:
            self.result.phases[name] = round(time.monotonic() - began, 1)

    def _since_open(self) -> float:
        return round(time.monotonic() - self.t_open, 1)

    # setup and cleanup

    async def _setup(self) -> None:
        shutil.rmtree(self.host_dir, ignore_errors=True)
        ledger_dir(self.host_dir)
        for c, kube in self.kubes.items():
            problems = await self._gone(kube)  # an earlier run's, still there
            if problems:
                raise RuntimeError(f"{c}: {'; '.join(problems)}")
            await kube.create(r.NAMESPACE, {"metadata": {"name": self.namespace}})
            await self._queues(kube, [MULTIKUEUE_CHECK, names.ADMISSION_CHECK]
                               if c == MANAGER else [])
        manager = self.kubes[MANAGER]
        if await manager.get_or_none(r.CLUSTER_TRAINING_RUNTIME, self.runtime) is not None:
            await manager.delete(r.CLUSTER_TRAINING_RUNTIME, self.runtime)
        await manager.create(r.CLUSTER_TRAINING_RUNTIME, runtime_body(self.runtime,
                                                                      self.host_dir))

    async def _queues(self, kube: Kube, checks: Sequence[str]) -> None:
        """A ClusterQueue named like the namespace, for it alone, listing ``checks``, and
        its LocalQueue (tests/multikueue/clusters.prepared's, which chaos may not import)."""
        strategy = {"admissionChecksStrategy": {"admissionChecks": [
            {"name": c} for c in checks]}} if checks else {}
        await kube.create(r.CLUSTER_QUEUE, {
            "metadata": {"name": self.namespace},
            "spec": {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": self.namespace}},
                **strategy,
                "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
                    "name": "default-flavor",
                    "resources": [{"name": "cpu", "nominalQuota": "2"},
                                  {"name": "memory", "nominalQuota": "2Gi"}]}]}],
            },
        })
        await kube.create(r.LOCAL_QUEUE, {"metadata": {"name": QUEUE},
                                          "spec": {"clusterQueue": self.namespace}},
                          self.namespace)

    async def _gone(self, kube: Kube) -> list[str]:
        """The run's namespace, then its ClusterQueue (held while Workloads of it exist),
        deleted and waited for (bounded); what could not be done."""
        problems = []
        for res, name in ((r.NAMESPACE, self.namespace), (r.CLUSTER_QUEUE, self.namespace)):
            deadline = time.monotonic() + GONE_SECONDS
            last = ""
            while time.monotonic() < deadline:
                try:
                    obj = await asyncio.wait_for(kube.get_or_none(res, name), 30)
                    if obj is None:
                        break
                    if not obj["metadata"].get("deletionTimestamp"):
                        with contextlib.suppress(errors.KubeNotFound):
                            await asyncio.wait_for(kube.delete(res, name), 30)
                    last = "still there"
                except (errors.DispatchError, TimeoutError) as exc:
                    last = f"{type(exc).__name__}: {exc}"
                await asyncio.sleep(2)
            else:
                problems.append(f"{res.kind} {name} not gone after {GONE_SECONDS:g} s ({last})")
        return problems

    async def _cleanup(self) -> None:
        problems = await asyncio.to_thread(heal_all)
        found = await asyncio.gather(*(self._gone(kube) for kube in self.kubes.values()),
                                     return_exceptions=True)
        for c, got in zip(self.kubes, found, strict=True):
            if isinstance(got, BaseException):
                problems.append(f"{c}: {type(got).__name__}: {got}")
            else:
                problems += [f"{c}: {p}" for p in got]
        try:
            with contextlib.suppress(errors.KubeNotFound):
                await asyncio.wait_for(
                    self.kubes[MANAGER].delete(r.CLUSTER_TRAINING_RUNTIME, self.runtime), 30)
        except Exception as exc:  # cleanup goes on: the ledger is still to be kept
            problems.append(f"{MANAGER}: runtime {self.runtime}: {type(exc).__name__}: {exc}")
        kept = self.dir / "ledger.jsonl"
        if (self.host_dir / "ledger.jsonl").exists() and not kept.exists():
            shutil.copy(self.host_dir / "ledger.jsonl", kept)
        shutil.rmtree(self.host_dir, ignore_errors=True)
        self.result.cleanup = [f"cleanup: {p}" for p in problems]

    # the jobs, the schedule, the end

    async def _run(self) -> None:
        async with await self._backend() as be:
            await self._phase("start", self._start(be))
            watcher = asyncio.create_task(self._observe(be))
            try:
                await self._phase("schedule", self._schedule(be))
                problems = await asyncio.to_thread(heal_all)
                self.result.notes += [f"heal: {p}" for p in problems]
                await self._phase("settle", self._settle(be))
            finally:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
            await self._phase("stop", self._stop(be))

    async def _backend(self) -> Backend:
        return await startable_backend(backend_settings(self.namespace), "mk-chaos")

    async def _start(self, be: Backend) -> None:
        for k, mj in enumerate(self.plan.jobs):
            st = _Job(JobID.new(), mj)
            self.jobs.append(st)
            req = job_request(st.job, mj.job_plan(), self.runtime)
            op, ref = await self.rec.call(OP_START, str(st.job), functools.partial(be.start, req),
                                          seconds=DEADLINES[OP_START],
                                          args={"job": k, "run_seconds": mj.run_seconds},
                                          summary=lambda ref: ref.id)
            if not op.ok:
                raise RuntimeError(f"Start of job {k} failed: {op.error}: {op.error_message}")
            st.ref = ref
            self.result.jobs.append({"job": str(st.job), "trainjob": ref.name,
                                     "run_seconds": mj.run_seconds})
        refs = [(str(st.job), st.ref) for st in self.jobs if st.ref is not None]
        opened = await asyncio.gather(*(
            self.rec.call(OP_OPEN, job, functools.partial(be.open, ref),
                          seconds=DEADLINES[OP_OPEN]) for job, ref in refs))
        self.t_open = time.monotonic()
        for k, (op, _) in enumerate(opened):
            if not op.ok:
                raise RuntimeError(f"Open of job {k} failed: {op.error}: {op.error_message}")

    async def _inspect(self, be: Backend, st: _Job) -> Observation:
        assert st.ref is not None
        return await asyncio.wait_for(be.inspect(st.ref), INSPECT_BOUND)

    async def _observe(self, be: Backend) -> None:
        """Every few seconds, each job's state and worker: the worker a step's "running"
        target names, and the run's record of where the jobs were."""
        while True:
            for k, st in enumerate(self.jobs):
                try:
                    obs = await self._inspect(be, st)
                except Exception:  # a cut worker or an API server away: ask again later
                    continue
                if obs.cluster:
                    self.known[k] = obs.cluster
                seen = (obs.state.value, obs.cluster, obs.admissions, obs.pods_running)
                if self._seen.get(k) != seen:
                    self._seen[k] = seen
                    self.result.observations.append({
                        "t_s": self._since_open(), "job": k, "state": obs.state.value,
                        "cluster": obs.cluster, "a": obs.admissions,
                        "pods_running": obs.pods_running, "detail": obs.cause.detail[:300]})
            await asyncio.sleep(OBSERVE_EVERY)

    async def _schedule(self, be: Backend) -> None:
        self.records = [StepRecord(k, s.kind, s.at, s.seconds, s.target, s.job)
                        for k, s in enumerate(self.plan.steps)]
        tasks = [asyncio.create_task(self._step(be, s, rec))
                 for s, rec in zip(self.plan.steps, self.records, strict=True)]
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(BaseException):
                    await t

    async def _step(self, be: Backend, step: MkStep, rec: StepRecord) -> None:
        await asyncio.sleep(max(0.0, self.t_open + step.at - time.monotonic()))
        call_us = now_us()
        rec.began_s, rec.began_us = self._since_open(), call_us
        try:
            if step.kind == "cut":
                await self._cut(step, rec)
            elif step.kind == "restart-apiserver":
                await self._restart(step, rec)
            elif step.kind == "kill-controller":
                await self._kill(step, rec)
            else:
                await self._hold(be, step, rec)
        except Exception as exc:
            rec.error = f"{type(exc).__name__}: {exc}"[:500]
        finally:
            rec.ended_s, rec.ended_us = self._since_open(), now_us()
            self.rec.record(f"step:{step.kind}", call_us,
                            {"cluster": rec.cluster, **rec.detail,
                             **({"error": rec.error} if rec.error else {})},
                            args={"step": rec.step, "seconds": step.seconds,
                                  "target": step.target, "job": step.job})

    def _where(self, step: MkStep, rec: StepRecord) -> str:
        rec.job_cluster = self.known.get(step.job, "")
        return resolve(step, rec.job_cluster)

    async def _cut(self, step: MkStep, rec: StepRecord) -> None:
        want = self._where(step, rec)
        if self.cut_locks[want].locked():  # cut already (the plan's worker was the other)
            alt = other_worker(want)
            if not self.cut_locks[alt].locked():
                rec.detail["instead_of"] = want
                want = alt
            else:
                rec.detail["waited_for"] = want  # both cut: wait for this one's heal
        async with self.cut_locks[want]:
            rec.cluster = want
            rec.detail["cut_call_us"] = now_us()
            try:
                await run_tool("multikueue.sh", "cut", want.removeprefix("mk-"))
                rec.detail["cut_us"] = now_us()
                await asyncio.sleep(step.seconds)
            finally:
                rec.detail["heal_call_us"] = now_us()
                await run_tool("multikueue.sh", "heal", want.removeprefix("mk-"))
                rec.detail["heal_us"] = now_us()

    async def _restart(self, step: MkStep, rec: StepRecord) -> None:
        want = self._where(step, rec)
        async with self.restart_locks[want]:  # one restart of an API server at a time
            rec.cluster = want
            rec.detail["call_us"] = now_us()
            await run_tool("apiserver.sh", "restart", want, f"{step.seconds:g}", timeout=240)
            rec.detail["ready_us"] = now_us()

    async def _kill(self, step: MkStep, rec: StepRecord) -> None:
        where = self._where(step, rec)
        rec.cluster = where
        kube = self.kubes[where]
        holder = await asyncio.wait_for(lease_holder(kube), 30)
        pods = await asyncio.wait_for(controller_pods(kube), 30)
        if not pods:
            rec.detail["skipped"] = "no dispatch-admission pod"
            return
        pod = holder if holder in pods else self.rng.choice(sorted(pods))
        await asyncio.wait_for(kube.delete(r.POD, pod, names.CONTROLLER_NAMESPACE,
                                           grace_period=0), 30)
        rec.detail |= {"pod": pod, "leader": pod == holder, "deleted_us": now_us()}

    async def _hold(self, be: Backend, step: MkStep, rec: StepRecord) -> None:
        st = self.jobs[step.job]
        assert st.ref is not None
        ref = st.ref
        rec.cluster = rec.job_cluster = self.known.get(step.job, "")
        instance = st.next_instance
        st.next_instance += 1
        op, _ = await self.rec.call(OP_HOLD, str(st.job),
                                    functools.partial(be.hold, ref, _hold_meta(instance)),
                                    seconds=DEADLINES[OP_HOLD], args={"instance": instance},
                                    summary=lambda _: "held")
        rec.detail |= {"instance": instance, "hold": "held" if op.ok else op.error,
                       "held_us": op.return_us}
        await asyncio.sleep(step.seconds)
        op, _ = await self.rec.call(OP_RELEASE, str(st.job),
                                    functools.partial(be.release, ref, _hold_meta(instance)),
                                    seconds=DEADLINES[OP_RELEASE], args={"instance": instance},
                                    summary=str)
        rec.detail |= {"release": op.result if op.ok else op.error,
                       "released_us": op.return_us}

    async def _settle(self, be: Backend) -> None:
        """Wait (bounded) until each job finished or runs (a pod running)."""
        deadline = time.monotonic() + SETTLE_SECONDS
        while True:
            states: dict[int, str] = {}
            pending: list[int] = []
            for k, st in enumerate(self.jobs):
                try:
                    obs = await self._inspect(be, st)
                except Exception as exc:
                    states[k] = f"inspect failed: {type(exc).__name__}: {exc}"[:200]
                    pending.append(k)
                    continue
                states[k] = (f"{obs.state.value} in {obs.cluster or '-'} at A = "
                             f"{obs.admissions}, {obs.pods_running} pod(s) running")
                if obs.state in (ObjectState.SUCCEEDED, ObjectState.FAILED) or (
                        obs.state is ObjectState.RUNNING and obs.pods_running):
                    continue
                # Never to run again (kueue#15380, after a hold): waiting on is waiting for
                # nothing; StopJob and the judgement follow as for any other job.
                try:
                    stuck = await self._stuck(st)
                except errors.KubeError as exc:
                    stuck = ""
                    states[k] += f"; not read whether stuck: {exc}"[:200]
                if stuck:
                    states[k] += f"; {stuck}"
                    continue
                pending.append(k)
            if not pending or time.monotonic() > deadline:
                break
            await asyncio.sleep(3)
        for k, state in states.items():
            self.result.jobs[k]["settled"] = state
        self.result.notes += [f"job {k} neither finished nor running {SETTLE_SECONDS:g} s "
                              f"after the heals: {states[k]}" for k in pending]

    async def _stuck(self, st: _Job) -> str:
        """What Inspect says of job ``st``'s eviction when it cannot end (the library's rule,
        read here on the harness's connections), "" otherwise."""
        if st.ref is None:
            return ""
        manager = self.kubes[MANAGER]
        tj = await manager.get_or_none(r.TRAINJOB, st.ref.name, st.ref.namespace)
        if tj is None:
            return ""
        wl = await workload_of(manager, tj)
        if wl is None:
            return ""
        return await stuck_eviction(tj, wl, {w: self.kubes[w] for w in WORKERS},
                                    datetime.now(UTC))

    async def _stop(self, be: Backend) -> None:
        for k, st in enumerate(self.jobs):
            op, rep = await self.rec.call(
                OP_STOP, str(st.job),
                functools.partial(be.stop_job, st.job, f"chaos {self.namespace}"),
                seconds=STOP_SECONDS + 20, summary=stop_summary)
            self.stops[str(st.job)] = bool(op.ok and rep is not None and rep.complete)
            self.result.jobs[k]["stop"] = (op.result if op.ok
                                           else f"{op.error}: {op.error_message}"[:300])

    async def _left(self) -> list[str]:
        left = []
        for c, kube in self.kubes.items():
            for res in LEFT_KINDS:
                try:
                    items, _ = await asyncio.wait_for(kube.list(res, self.namespace), 30)
                except (errors.DispatchError, TimeoutError) as exc:
                    left.append(f"{c} {res.kind}: not read ({type(exc).__name__})")
                    continue
                left += [f"{c} {res.kind}/{it['metadata']['name']}" for it in items]
        return left

    async def _wait_empty(self) -> None:
        deadline = time.monotonic() + EMPTY_SECONDS
        while True:
            self.left = await self._left()
            if not self.left or time.monotonic() > deadline:
                return
            await asyncio.sleep(3)

    def _judge(self) -> None:
        shutil.copy(self.host_dir / "ledger.jsonl", self.dir / "ledger.jsonl")
        ledger = read_ledger(self.dir / "ledger.jsonl")
        verdicts = collect_verdicts(ledger, self.rec.ops, self.stops, self.left)
        rows = execution_rows(ledger)
        self.result.ledger_lines = len(ledger)
        self.result.executions = rows
        self.result.max_a = max((row["a"] or 0 for row in rows), default=0)
        self.result.verdicts = {v.prop: v.ok for v in verdicts}
        self.result.violations = [f"({v.prop}) {v.message.splitlines()[0] if v.message else ''}"
                                  for v in verdicts if not v.ok]
        if not rows:
            self.result.notes.append("nothing ran: no execution in the ledger")
        text = format_verdicts(verdicts, f"{self.seed}-{self.index}")
        (self.dir / "verdicts.txt").write_text(text + "\n", encoding="utf-8")
        if not all(v.ok for v in verdicts):
            print(text, file=sys.stderr)


def _hold_meta(instance: int) -> HoldMeta:
    now = datetime.now(UTC)
    return HoldMeta(instance, Actor(ActorKind.SERVICE, "chaos-mk"),
                    CallMeta(now + timedelta(seconds=DEADLINES[OP_HOLD])),
                    reason="the MultiKueue campaign holds")


async def run_tool(*args: str, timeout: float = 120) -> str:
    """``chaos.faults.tool`` in a thread, awaited to its end even when the step is
    cancelled meanwhile (a cut cancelled half-way must not land after its heal)."""
    task = asyncio.ensure_future(asyncio.to_thread(tool, *args, timeout=timeout))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await task
        raise


def heal_all() -> list[str]:
    """``multikueue.sh heal`` of both workers (a worker not cut stays as it is); what
    failed."""
    problems = []
    for w in WORKERS:
        try:
            tool("multikueue.sh", "heal", w.removeprefix("mk-"))
        except Exception as exc:
            problems.append(f"heal {w}: {exc}")
    return problems


# --- the campaign ------------------------------------------------------------------------------


async def campaign(a: argparse.Namespace) -> int:
    problem = clusters_problem()
    if not problem and os.geteuid() != 0:
        problem = ("must run as root: multikueue.sh cut/heal, apiserver.sh restart and the "
                   f"ledger's host directory under {LEDGER_HOST_ROOT} need it")
    if problem:
        print(f"mk-chaos: {problem}", file=sys.stderr)
        return 2
    out: Path = a.out
    await asyncio.to_thread(out.mkdir, parents=True, exist_ok=True)
    version = runner_version()
    kubes: dict[str, Kube] = {}
    results: list[MkResult] = []
    code = 0
    try:
        for c in CLUSTERS:
            kubes[c] = await Kube.connect(kubeconfig=kubeconfig(c))
        for i in range(a.first, a.first + a.runs):
            if (out / STOP_FILE).exists():
                print(f"mk-chaos: {out / STOP_FILE} exists; stopping before run {a.seed}-{i}",
                      file=sys.stderr, flush=True)
                break
            problem = await wait_ready(kubes, READY_SECONDS)
            if problem:
                print(f"mk-chaos: the clusters are not ready before run {a.seed}-{i}: "
                      f"{problem}; stopping without judging", file=sys.stderr, flush=True)
                code = 2
                break
            run = MkRun(a.seed, i, out, kubes, runner=version)
            print(f"mk-chaos: run {a.seed}-{i} namespace {run.namespace}: "
                  f"{len(run.plan.jobs)} job(s), steps "
                  f"{', '.join(step_label(asdict(s)) for s in run.plan.steps)}",
                  file=sys.stderr, flush=True)
            res = await run.execute()
            results.append(res)
            write_summary(out)
            print(f"mk-chaos: run {a.seed}-{i}: "
                  f"{'ok' if res.ok else 'VIOLATION' if res.violated else 'NOT JUDGED'} in "
                  f"{res.duration_s:.0f} s; {len(res.executions)} executions, max A "
                  f"{res.max_a} {res.error}", file=sys.stderr, flush=True)
    except errors.DispatchError as exc:
        print(f"mk-chaos: cannot reach the clusters: {exc}", file=sys.stderr)
        code = 2
    finally:
        for kube in kubes.values():
            await kube.close()
        write_summary(out)
    if any(res.verdicts and res.violated for res in results):
        return 1
    if code or not all(res.judged for res in results):
        return 2
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chaos.multikueue", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--first", type=int, default=0,
                    help="the first run's index (runs FIRST .. FIRST+RUNS-1 of the seed)")
    ap.add_argument("--out", type=Path, default=Path("chaos-results/multikueue"))
    ap.add_argument("--plan-only", action="store_true",
                    help="print the runs' plans as JSON and touch no cluster")
    a = ap.parse_args(argv)
    if a.plan_only:
        plans = [plan_run(a.seed, i).to_json() for i in range(a.first, a.first + a.runs)]
        print(json.dumps(plans, indent=1))
        return 0
    try:
        return asyncio.run(campaign(a))
    except KeyboardInterrupt:
        print("mk-chaos: interrupted (healed and cleaned up what the run made)",
              file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

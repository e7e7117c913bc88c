"""The MultiKueue campaign (chaos/multikueue.py), offline: its plan is a pure function of
(seed, index) that heals every cut and never cuts one worker twice at once; a run's cuts keep
to that at run time; its summary rows; and its verdicts flag two executions of a job that
overlap across workers."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

import pytest

from chaos import multikueue as mk
from chaos.history import Attempt, LedgerLine
from chaos.multikueue import (
    CUT_LENGTHS,
    MANAGER,
    STEP_KINDS,
    WORKERS,
    MkPlan,
    MkResult,
    MkRun,
    MkStep,
    StepRecord,
    collect_verdicts,
    execution_rows,
    plan_run,
    resolve,
    summary_markdown,
    summary_row,
)
from dispatch_kubeflow import (
    Backend,
    HoldMeta,
    JobID,
    ObjectRef,
    ObjectState,
    Observation,
    ReleaseOutcome,
    StartRequest,
    StopReport,
)
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube.resources import TRAINJOB, WORKLOAD
from tests.unit.fake_kube import FakeKube

SEEDS = range(200)
T0 = 1_800_000_000_000_000  # wall_us
UP0 = 100_000  # uptime, centiseconds
JOB = "01JQ8Z6W3K9V7TQ2M5XH4N0RCB"


def plans() -> list[MkPlan]:
    return [plan_run(seed, index) for seed in SEEDS for index in (0, 1)]


# --- the plan ----------------------------------------------------------------------------------


def test_the_plan_is_a_function_of_seed_and_index() -> None:
    for seed, index in ((1, 0), (1, 7), (42, 3), (9504, 0)):
        assert plan_run(seed, index) == plan_run(seed, index)
        assert json.dumps(plan_run(seed, index).to_json()) == \
            json.dumps(plan_run(seed, index).to_json())
        assert (plan_run(seed, index).seed, plan_run(seed, index).index) == (seed, index)


def test_plans_differ_across_indexes_and_seeds() -> None:
    drawn = [(p.jobs, p.steps) for p in (plan_run(1, i) for i in range(30))]
    assert len(set(drawn)) == len(drawn)
    assert (plan_run(1, 0).jobs, plan_run(1, 0).steps) != \
        (plan_run(2, 0).jobs, plan_run(2, 0).steps)


def test_every_cut_is_healed_and_no_worker_is_cut_twice_at_once() -> None:
    for p in plans():
        cut: set[str] = set()
        for _, action, what in p.timeline():
            if action == "cut":
                assert what in WORKERS, p
                assert what not in cut, f"{what} cut twice at once: {p}"
                cut.add(what)
            elif action == "heal":
                assert what in cut, p
                cut.remove(what)
        assert not cut, f"left cut at the end: {p}"
        cuts = [s for s in p.steps if s.kind == "cut"]
        for s in cuts:
            assert s.seconds in CUT_LENGTHS
        for a in cuts:
            for b in cuts:
                if a is not b and a.worker == b.worker:  # apart, with the plan's margin
                    assert a.end + mk.CUT_GAP <= b.at + 1e-6 or \
                        b.end + mk.CUT_GAP <= a.at + 1e-6, p


def test_holds_of_one_job_never_overlap_and_every_hold_is_released() -> None:
    for p in plans():
        held: set[str] = set()
        for _, action, what in p.timeline():
            if action == "hold":
                assert what not in held, p
                held.add(what)
            elif action == "release":
                held.remove(what)
        assert not held
        for s in p.steps:
            if s.kind == "hold":
                assert 10.0 <= s.seconds <= 30.0
                assert 0 <= s.job < len(p.jobs)


def test_the_plans_shape() -> None:
    for p in plans():
        assert 1 <= len(p.jobs) <= 2
        assert 2 <= len(p.steps) <= 4
        assert [s.at for s in p.steps] == sorted(s.at for s in p.steps)
        assert all(s.at > 0 for s in p.steps)
        for j in p.jobs:
            assert j.run_seconds == 0 or 30 <= j.run_seconds <= 120
            jp = j.job_plan()
            assert (jp.nodes, jp.fail_once, jp.open_at_start) == (1, False, True)
        for s in p.steps:
            assert s.kind in STEP_KINDS
            assert 0 <= s.job < len(p.jobs)
            if s.kind in ("cut", "restart-apiserver"):
                assert s.target in ("running", "other")
                assert s.worker in WORKERS
            if s.kind == "kill-controller":
                assert s.target in ("manager", "running", "other")
                assert (s.worker == MANAGER) == (s.target == "manager")


def test_200_seeds_cover_every_kind_cut_length_and_target() -> None:
    ps = [plan_run(seed, 0) for seed in SEEDS]
    kinds = Counter(s.kind for p in ps for s in p.steps)
    assert set(kinds) == set(STEP_KINDS)
    assert {s.seconds for p in ps for s in p.steps if s.kind == "cut"} == set(CUT_LENGTHS)
    assert {s.target for p in ps for s in p.steps if s.kind == "cut"} == {"running", "other"}
    assert {s.worker for p in ps for s in p.steps if s.kind == "cut"} == set(WORKERS)
    assert {s.target for p in ps for s in p.steps if s.kind == "kill-controller"} == \
        {"manager", "running", "other"}
    assert {len(p.jobs) for p in ps} == {1, 2}
    assert {len(p.steps) for p in ps} == {2, 3, 4}
    runs = {j.run_seconds for p in ps for j in p.jobs}
    assert 0.0 in runs
    assert any(r > 0 for r in runs)
    # Steps overlap: some cuts of the two workers stand at once.
    assert any(a.at < b.end and b.at < a.end
               for p in ps for a in p.steps for b in p.steps
               if a is not b and a.kind == b.kind == "cut")


def test_resolve_prefers_the_jobs_worker_when_known() -> None:
    running = MkStep("cut", 1.0, 20.0, 0, "running", "mk-worker2")
    other = MkStep("cut", 1.0, 20.0, 0, "other", "mk-worker2")
    assert resolve(running, "mk-worker1") == "mk-worker1"
    assert resolve(other, "mk-worker1") == "mk-worker2"
    assert resolve(other, "mk-worker2") == "mk-worker1"
    assert resolve(running, "") == "mk-worker2"  # not known: the plan's
    assert resolve(other, "") == "mk-worker2"
    kill = MkStep("kill-controller", 1.0, 0.0, 0, "manager", MANAGER)
    assert resolve(kill, "mk-worker1") == MANAGER


def test_plan_only_prints_the_plans_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert mk.main(["--runs", "3", "--seed", "1", "--plan-only"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [(p["seed"], p["index"]) for p in got] == [(1, 0), (1, 1), (1, 2)]
    assert got[1] == json.loads(json.dumps(plan_run(1, 1).to_json()))
    assert all(p["timeline"] for p in got)


# --- cuts at run time --------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_two_cuts_that_resolve_to_one_worker_take_both_and_each_is_healed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, ...]] = []

    def tool(*args: str, **kw: object) -> str:
        calls.append(args)
        return ""

    monkeypatch.setattr(mk, "tool", tool)
    run = MkRun(1, 0, tmp_path, {})
    run.t_open = time.monotonic()
    run.known = {0: "mk-worker1"}
    step = MkStep("cut", 0.0, 0.2, 0, "running", "mk-worker2")
    recs = [StepRecord(k, "cut", 0.0, 0.2, "running", 0) for k in range(2)]
    await asyncio.gather(*(run._cut(step, rec) for rec in recs))
    assert sorted(rec.cluster for rec in recs) == ["mk-worker1", "mk-worker2"]
    assert [rec.detail.get("instead_of") for rec in recs] == [None, "mk-worker1"]
    cut: set[str] = set()
    for script, action, worker in calls:
        assert script == "multikueue.sh"
        if action == "cut":
            assert worker not in cut
            cut.add(worker)
        else:
            cut.remove(worker)
    assert not cut
    assert len(calls) == 4


@pytest.mark.asyncio
async def test_a_cut_whose_tool_fails_is_healed_all_the_same(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, ...]] = []

    def tool(*args: str, **kw: object) -> str:
        calls.append(args)
        if args[1] == "cut":
            raise RuntimeError("multikueue.sh cut worker2: rc=1")
        return ""

    monkeypatch.setattr(mk, "tool", tool)
    run = MkRun(1, 0, tmp_path, {})
    run.t_open = time.monotonic()
    rec = StepRecord(0, "cut", 0.0, 20.0, "other", 0)
    with pytest.raises(RuntimeError):
        await run._cut(MkStep("cut", 0.0, 20.0, 0, "other", "mk-worker2"), rec)
    assert calls == [("multikueue.sh", "cut", "worker2"), ("multikueue.sh", "heal", "worker2")]


# --- verdicts -------------------------------------------------------------------------------


def execution(a: int, node: str, start_ms: int, end_ms: int, *, exit_status: int | None = 143,
              job: str = JOB) -> list[LedgerLine]:
    """One rank-0 execution at A = ``a`` on ``node``: a start line, beats every 100 ms and
    an exit line (a beat when ``exit_status`` is None: killed)."""
    ident = f"{job}.1.1.{a}.0"
    epoch = str(Attempt.parse(ident).epoch)
    times = [*range(start_ms, end_ms, 100), end_ms]
    kinds = ["start"] + ["beat"] * (len(times) - 2) + ["exit" if exit_status is not None
                                                       else "beat"]
    return [LedgerLine(kind=k, attempt=ident, epoch=epoch, pod=f"pod-a{a}", rank="0",
                       pid=1000 + a, seq=n + 1, wall_us=T0 + t * 1000,
                       uptime_cs=UP0 + t // 10,
                       status=exit_status if k == "exit" else None,
                       started_us=T0 + start_ms * 1000, node=node, uid=f"uid-a{a}",
                       jobset=f"jobset-a{a}")
            for n, (k, t) in enumerate(zip(kinds, times, strict=True))]


def test_verdicts_flag_two_executions_overlapping_in_two_workers() -> None:
    # A = 1 in the cut worker still beats when A = 2 starts in the other.
    ledger = [*execution(1, "mk-worker1-worker", 0, 5000, exit_status=None),
              *execution(2, "mk-worker2-worker2", 4000, 9000)]
    verdicts = {v.prop: v for v in collect_verdicts(ledger, [], {JOB: True}, [])}
    assert list(verdicts) == ["clock", "a", "b", "stop", "left"]
    assert not verdicts["a"].ok
    assert "pod-a2" in verdicts["a"].message
    assert "pod-a1" in verdicts["a"].message
    assert verdicts["clock"].ok
    assert verdicts["b"].ok
    assert verdicts["stop"].ok
    assert verdicts["left"].ok


def test_verdicts_pass_executions_one_after_another_across_workers() -> None:
    ledger = [*execution(1, "mk-worker1-worker", 0, 5000, exit_status=None),
              *execution(2, "mk-worker2-worker2", 65_000, 70_000),
              *execution(3, "mk-worker2-worker", 80_000, 90_000, exit_status=0)]
    verdicts = collect_verdicts(ledger, [], {JOB: True}, [])
    assert [(v.prop, v.ok) for v in verdicts] == [
        ("clock", True), ("a", True), ("b", True), ("stop", True), ("left", True)]
    rows = execution_rows(ledger)
    assert [(row["a"], row["worker"], row["start_us"], row["end_us"]) for row in rows] == [
        (1, "mk-worker1", T0, T0 + 5_000_000),
        (2, "mk-worker2", T0 + 65_000_000, T0 + 70_000_000),
        (3, "mk-worker2", T0 + 80_000_000, T0 + 90_000_000)]
    assert [row["succeeded"] for row in rows] == [False, False, True]  # A = 3 exited 0


def test_verdicts_flag_a_lower_identity_after_a_higher_one() -> None:
    ledger = [*execution(2, "mk-worker1-worker", 0, 5000),
              *execution(1, "mk-worker2-worker", 10_000, 15_000)]
    verdicts = {v.prop: v.ok for v in collect_verdicts(ledger, [], {JOB: True}, [])}
    assert verdicts == {"clock": True, "a": True, "b": False, "stop": True, "left": True}


def test_verdicts_flag_an_incomplete_stop_and_what_is_left() -> None:
    ledger = execution(1, "mk-worker1-worker", 0, 5000)
    verdicts = {v.prop: v for v in collect_verdicts(
        ledger, [], {JOB: False, "other": True}, ["mk-worker1 Pod/p-0", "mk-worker2 Workload/w"])}
    assert not verdicts["stop"].ok
    assert JOB in verdicts["stop"].message
    assert "other" not in verdicts["stop"].message
    assert not verdicts["left"].ok
    assert "mk-worker1 Pod/p-0" in verdicts["left"].message
    assert verdicts["a"].ok
    assert verdicts["b"].ok


# --- the record and the summary -----------------------------------------------------------------


def result(**kw: object) -> MkResult:
    res = MkResult(seed=7, index=3, namespace="mk-chaos-7-3", duration_s=412.4,
                   steps=[{"kind": "cut", "cluster": "mk-worker1", "seconds": 70.0, "job": 0},
                          {"kind": "hold", "cluster": "mk-worker2", "seconds": 12.5, "job": 1},
                          {"kind": "restart-apiserver", "cluster": "mk-worker2",
                           "seconds": 2.0, "job": 0},
                          {"kind": "kill-controller", "cluster": MANAGER, "seconds": 0.0,
                           "job": 0}],
                   executions=[{"a": 1}, {"a": 2}, {"a": 1}], max_a=2,
                   verdicts={"clock": True, "a": True, "b": True, "stop": True, "left": True})
    for k, v in kw.items():
        setattr(res, k, v)
    return res


def test_summary_row_of_a_clean_run() -> None:
    assert summary_row(result()) == (
        "| 7-3 | cut worker1 70s, hold job1 12.5s, restart worker2, kill manager | 3 | 2 | "
        "none | 412 |")


def test_summary_row_of_a_violation_and_of_an_unjudged_run() -> None:
    bad = result(verdicts={"clock": True, "a": False, "b": True, "stop": True, "left": True},
                 violations=["(a) job X: pod | 2 started"])
    assert summary_row(bad).split(" | ")[4] == "(a) job X: pod \\| 2 started"
    assert bad.violated
    assert not bad.ok
    assert bad.judged
    unjudged = result(verdicts={}, error="RuntimeError: Start of job 0 failed", executions=[],
                      max_a=0)
    assert summary_row(unjudged) == (
        "| 7-3 | cut worker1 70s, hold job1 12.5s, restart worker2, kill manager | 0 | 0 | "
        "not judged: RuntimeError: Start of job 0 failed | 412 |")
    assert not unjudged.judged
    assert not unjudged.violated


def test_summary_markdown_counts_runs_and_steps(tmp_path: Path) -> None:
    runs = [result(), result(index=4, notes=["job 0 neither finished nor running"]),
            result(index=5, verdicts={"a": False}, violations=["(a) overlap"])]
    for res in runs:
        (tmp_path / f"{res.seed}-{res.index}").mkdir()
        (tmp_path / f"{res.seed}-{res.index}" / "result.json").write_text(
            json.dumps(res.to_json()))
    loaded = mk.load_results(tmp_path)
    assert [res.index for res in loaded] == [3, 4, 5]
    assert loaded[0] == runs[0]
    mk.write_summary(tmp_path)
    text = (tmp_path / "summary.md").read_text()
    assert text == summary_markdown(runs)
    lines = text.splitlines()
    assert lines[0] == "| run | steps | executions | max A | violations | seconds |"
    assert [ln.split(" | ")[0] for ln in lines[2:5]] == ["| 7-3", "| 7-4", "| 7-5"]
    assert "3 runs: 2 without violation, 1 with a violation, 0 not judged; 9 executions" \
        in text
    assert "cut 70s 3" in text
    assert "kill-controller 3" in text
    assert "- 7-4: job 0 neither finished nor running" in text


def test_summary_markdown_totals_what_the_guarantees_page_tables() -> None:
    stuck = {"settled": "queued in - at A = 1; ... so it never will (kueue#15380): StopJob"}
    runs = [result(jobs=[stuck, {"settled": "succeeded in mk-worker1"}], ledger_lines=1200),
            result(index=4, max_a=1, jobs=[{"settled": "running in mk-worker2"}],
                   ledger_lines=34),
            result(index=5, verdicts={"clock": True, "a": False, "b": True, "stop": True},
                   violations=["(a) overlap"], jobs=[stuck], ledger_lines=5),
            result(index=6, verdicts={}, error="ready: mk-worker1 not Ready", jobs=[])]
    text = summary_markdown(runs)
    assert ("Jobs 4; ledger lines 1,239; runs with a job at A >= 2: 3; jobs settled at once "
            "as never to run again (kueue#15380): 2.") in text
    table = text.split("| property | passed | failed | not judged |\n|---|---:|---:|---:|\n")[1]
    assert table.splitlines()[:5] == [
        "| steady clock | 3 | 0 | 1 |",
        "| no overlap, across clusters | 2 | 1 | 1 |",
        "| rising identity, across clusters | 3 | 0 | 1 |",
        "| every StopJob complete | 3 | 0 | 1 |",
        "| nothing left in any cluster | 2 | 0 | 2 |"]


def test_summary_tallies_the_executions_a_worker_fault_stopped_by_runner() -> None:
    cut = {"kind": "cut", "cluster": "mk-worker1", "seconds": 20.0, "job": 0,
           "began_us": 100e6, "ended_us": 120e6}
    restart = {"kind": "restart-apiserver", "cluster": "mk-worker2", "seconds": 2.0, "job": 0,
               "began_us": 100e6, "ended_us": 140e6}
    def ex(worker: str, end_s: float, last: str = "beat") -> dict[str, object]:
        return {"worker": worker, "start_us": 50e6, "end_us": end_s * 1e6, "last": last}
    runs = [result(runner="old", steps=[cut, restart],
                   executions=[ex("mk-worker1", 139), ex("mk-worker2", 300),
                               ex("mk-worker2", 150, last="exit"), ex("mk-worker1", 90)]),
            result(index=4, runner="new", steps=[cut], executions=[ex("mk-worker1", 181)])]
    text = summary_markdown(runs)
    assert ("- new, cut 20 s: 0 of 1 stopped\n"
            "- old, API server restart: 0 of 2 stopped\n"
            "- old, cut 20 s: 1 of 1 stopped (39 s after it began)\n") in text


# --- a run's glue, against fakes -----------------------------------------------------------


class FakeBackend:
    """The calls a run makes of the library: the job runs in mk-worker1 from the start."""

    observe_only = False

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    async def __aenter__(self) -> FakeBackend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def start(self, req: StartRequest) -> ObjectRef:
        self.calls.append(("start", req.job))
        return ObjectRef("mk-chaos-1-0", f"dj-{str(req.job).lower()}-s1")

    async def open(self, ref: ObjectRef) -> None:
        self.calls.append(("open", ref.name))

    async def inspect(self, ref: ObjectRef) -> Observation:
        return Observation(ObjectState.RUNNING, admissions=1, pods_running=1,
                           cluster="mk-worker1")

    async def hold(self, ref: ObjectRef, meta: HoldMeta) -> None:
        self.calls.append(("hold", meta.instance))

    async def release(self, ref: ObjectRef, meta: HoldMeta) -> ReleaseOutcome:
        self.calls.append(("release", meta.instance))
        return ReleaseOutcome.RELEASED

    async def stop_job(self, job: JobID, reason: str) -> StopReport:
        self.calls.append(("stop_job", job))
        return StopReport(stopped=(ObjectRef("mk-chaos-1-0", "x"),))


class FakeManager:
    async def delete(self, *args: object, **kw: object) -> None:
        return None


@pytest.mark.asyncio
async def test_a_run_records_its_steps_executions_and_verdicts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tools: list[tuple[str, ...]] = []

    def tool(*args: str, **kw: object) -> str:
        tools.append(args)
        return ""

    monkeypatch.setattr(mk, "tool", tool)
    be = FakeBackend()
    run = MkRun(1, 0, tmp_path / "out", cast("dict[str, Kube]", {MANAGER: FakeManager()}))
    run.plan = MkPlan(1, 0, (mk.MkJob(0.0),), (
        MkStep("cut", 0.1, 0.2, 0, "other", "mk-worker1"),
        MkStep("hold", 0.1, 0.2, 0),
        MkStep("restart-apiserver", 0.2, 0.0, 0, "running", "mk-worker2")))
    run.host_dir = tmp_path / "host"

    async def setup() -> None:
        run.host_dir.mkdir()
        job = "01JQ8Z6W3K9V7TQ2M5XH4N0RCB"
        lines = [*execution(1, "mk-worker1-worker", 0, 3000, exit_status=None, job=job),
                 *execution(2, "mk-worker2-worker", 70_000, 72_000, job=job)]
        (run.host_dir / "ledger.jsonl").write_text(
            "".join(json.dumps(asdict(ln)) + "\n" for ln in lines))

    async def backend() -> FakeBackend:
        return be

    async def nothing() -> None:
        return None

    async def gone(kube: object) -> list[str]:
        return []

    monkeypatch.setattr(run, "_setup", setup)
    monkeypatch.setattr(run, "_backend", backend)
    monkeypatch.setattr(run, "_wait_empty", nothing)
    monkeypatch.setattr(run, "_gone", gone)
    res = await run.execute()

    assert res.error == ""
    assert res.ok, res.violations
    assert res.verdicts == {"clock": True, "a": True, "b": True, "stop": True, "left": True}
    assert [(e["a"], e["worker"]) for e in res.executions] == [(1, "mk-worker1"),
                                                               (2, "mk-worker2")]
    assert res.max_a == 2
    cut, hold, restart = res.steps
    assert (cut["cluster"], cut["job_cluster"]) == ("mk-worker2", "mk-worker1")  # "other"
    assert cut["detail"]["cut_us"] <= cut["detail"]["heal_call_us"]
    assert hold["detail"]["hold"] == "held"
    assert hold["detail"]["release"] == "released"
    assert restart["cluster"] == "mk-worker1"  # "running"
    assert all(s["began_s"] is not None and s["ended_s"] is not None for s in res.steps)
    # The steps overlap: the restart may come before the cut or after it (a loaded loop).
    assert sorted(tools[:3]) == [("apiserver.sh", "restart", "mk-worker1", "0"),
                                 ("multikueue.sh", "cut", "worker2"),
                                 ("multikueue.sh", "heal", "worker2")]
    assert tools.index(("multikueue.sh", "cut", "worker2")) < \
        tools.index(("multikueue.sh", "heal", "worker2"))
    # Healed again after the schedule and at the cleanup, whatever the steps did.
    assert tools[3:] == [("multikueue.sh", "heal", w) for w in ("worker1", "worker2") * 2]
    assert [c for c, _ in be.calls] == ["start", "open", "hold", "release", "stop_job"]
    assert res.jobs[0]["stop"] == {"stopped": 1, "alive": 0, "unproven": 0}
    assert "running in mk-worker1" in res.jobs[0]["settled"]
    assert not run.host_dir.exists()  # the ledger's host directory is removed
    kept = tmp_path / "out" / "1-0"
    assert json.loads((kept / "result.json").read_text())["ok"] is True
    assert len((kept / "ledger.jsonl").read_text().splitlines()) == 52
    assert json.loads((kept / "plan.json").read_text())["steps"][0]["kind"] == "cut"
    ops = [json.loads(ln)["op"] for ln in (kept / "ops.jsonl").read_text().splitlines()]
    assert sorted(ops) == sorted(["start", "open", "hold", "release", "stop_job",
                                  "step:cut", "step:hold", "step:restart-apiserver"])


class QueuedBackend(FakeBackend):
    """Inspect says queued, as it does of a released job kueue#15380 keeps evicted."""

    async def inspect(self, ref: ObjectRef) -> Observation:
        return Observation(ObjectState.QUEUED)


@pytest.mark.asyncio
async def test_a_job_kueue_15380_keeps_evicted_is_not_waited_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After the heals a run waits for every job to finish or run; a job whose eviction can
    never end (the library's rule: its TrainJob says a job active, no worker holds it) is
    settled at once, said so, and not reported as neither finished nor running. The old
    harness waited out its 420 s."""
    manager, w1, w2 = FakeKube(1), FakeKube(2), FakeKube(3)
    ns, name = "mk-chaos-1-0", "dj-x-s1"
    tj = await manager.create(TRAINJOB, {"metadata": {"name": name}, "spec": {
        "managedBy": names.MULTIKUEUE_CONTROLLER, "suspend": True},
        "status": {"jobsStatus": [{"name": "node", "active": 1}]}}, ns)
    evicted = (datetime.now(UTC) - timedelta(minutes=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    await manager.create(WORKLOAD, {
        "metadata": {"name": f"trainjob-{name}",
                     "labels": {names.KUEUE_JOB_UID_LABEL: tj["metadata"]["uid"]}},
        "status": {"conditions": [
            {"type": "QuotaReserved", "status": "True", "lastTransitionTime": evicted},
            {"type": "Evicted", "status": "True", "lastTransitionTime": evicted}]}}, ns)
    monkeypatch.setattr(mk, "SETTLE_SECONDS", 0.5)
    run = MkRun(1, 0, tmp_path / "out", cast("dict[str, Kube]", {
        MANAGER: manager, WORKERS[0]: w1, WORKERS[1]: w2}))
    job = mk._Job(JobID(JOB), mk.MkJob(0.0), ObjectRef(ns, name))
    run.jobs = [job]
    run.result.jobs = [{}]
    await run._settle(cast("Backend", QueuedBackend()))
    assert "kueue#15380" in run.result.jobs[0]["settled"]
    assert run.result.notes == []

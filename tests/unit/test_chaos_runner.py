"""The fault suite's runner, offline: its plan is a function of the seed, and its recorder
records results, typed errors by class, and calls past their deadline as hung."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import cast

import pytest

from chaos import runner
from chaos.checker import check_calls
from chaos.end import quota_free
from chaos.faults import Faults
from chaos.history import Final, read_operations
from chaos.objects import job_command, job_request, runtime_body, workload_of
from chaos.operations import JobState, Operations
from chaos.plan import (
    FAULTS,
    LEASE_DURATION,
    MIX,
    NODE_MONITOR_GRACE,
    SCHEDULE_OPS,
    SCHEDULE_OPS_1,
    TERM_LINGERS,
    JobPlan,
    Plan,
    make_plan,
)
from chaos.recorder import Recorder, now_us
from chaos.run import NotJudged, Run, RunResult, _uninterrupted
from dispatch_kubeflow import (
    Backend,
    ConflictError,
    DeadlineExceeded,
    HoldMeta,
    JobID,
    ObjectRef,
    StartRequest,
    StopReport,
)
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube, Resource


def test_the_plan_is_a_function_of_the_seed() -> None:
    a = make_plan(7, jobs=3, ops=8)
    assert a == make_plan(7, jobs=3, ops=8)
    assert a != make_plan(8, jobs=3, ops=8)
    assert len(a.jobs) == 3
    assert sum(1 for s in a.steps if s.kind == "op") == 8
    assert a.jobs[0].fail_once  # every run has a job that JobSet restarts
    assert all(j.nodes in (1, 2) for j in a.jobs)


def test_faults_come_only_from_those_available() -> None:
    for seed in range(50):
        plan = make_plan(seed, faults=["delete-leader-pod"])
        assert {s.name for s in plan.steps if s.kind == "fault"} <= {"delete-leader-pod"}
        assert not [s for s in make_plan(seed, faults=[]).steps if s.kind == "fault"]


def test_many_seeds_cover_every_operation_and_fault() -> None:
    ops: set[str] = set()
    faults: set[str] = set()
    for seed in range(200):
        for s in make_plan(seed).steps:
            (ops if s.kind == "op" else faults).add(s.name)
    assert ops == set(SCHEDULE_OPS)
    assert faults == set(FAULTS)


def test_a_pause_outlasts_the_node_monitor_grace_and_a_sigstop_the_lease() -> None:
    for seed in range(100):
        for s in make_plan(seed).steps:
            if s.name == "node-pause":
                assert NODE_MONITOR_GRACE < s.arg < NODE_MONITOR_GRACE + 10
            if s.name == "controller-sigstop":
                assert s.arg > LEASE_DURATION


def test_the_job_command_carries_the_ledger_settings() -> None:
    plan = JobPlan(nodes=2, fail_once=True, run_seconds=5.0, open_at_start=True)
    cmd = job_command(plan)
    assert cmd[0] == "env"
    assert "LEDGER_FAIL_ONCE=1" in cmd
    assert "LEDGER_RUN_SECONDS=5" in cmd
    assert cmd[-4:-2] == ["/bin/sh", "-c"]
    assert cmd[-1] == "ledger"
    other = job_command(plan, variant="other")
    assert other != cmd
    req = job_request(JobID.new(), plan, "dispatch-chaos-1-0")
    req.validate()


def test_the_runtime_mounts_the_ledger_from_the_host() -> None:
    body = runtime_body("dispatch-chaos-1-0", Path("/var/lib/dispatch-chaos/1-0"))
    pod = body["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    vol = pod["spec"]["volumes"][0]
    assert vol["hostPath"] == {"path": "/var/lib/dispatch-chaos/1-0",
                               "type": "DirectoryOrCreate"}
    assert pod["spec"]["containers"][0]["volumeMounts"][0]["mountPath"] == "/ledger"


def test_the_recorder_records_results_typed_errors_and_hung_calls(tmp_path: Path) -> None:
    rec = Recorder(tmp_path / "ops.jsonl", hung_grace=0.05)

    async def ok() -> str:
        return "ns/name"

    async def conflict() -> None:
        raise ConflictError("another request")

    async def hang() -> None:
        await asyncio.sleep(10)

    async def deadline() -> None:
        # The library's own answer at a call's deadline: a typed error (and a TimeoutError,
        # which the recorder must not take for its own timeout: seed 7103 did).
        await asyncio.sleep(0.01)
        raise DeadlineExceeded("Hold 1 of ns/tj: the deadline passed")

    async def go() -> None:
        await rec.call("start", "J", ok, seconds=5, summary=lambda v: {"ref": v})
        await rec.call("start", "J", conflict, seconds=5)
        await rec.call("hold", "J", hang, seconds=0.05)
        await rec.call("hold", "J", deadline, seconds=0.01)

    asyncio.run(go())
    done, failed, hung, late = rec.ops
    assert late.error == "DeadlineExceeded"
    assert late.return_us is not None
    assert done.ok
    assert done.result == {"ref": "ns/name"}
    assert done.return_us is not None
    assert done.call_us <= done.return_us <= (done.deadline_us or 0)
    assert failed.error == "ConflictError"
    assert "another request" in failed.error_message
    assert hung.return_us is None
    assert hung.error is None
    assert hung.deadline_us is not None
    assert read_operations(tmp_path / "ops.jsonl") == rec.ops
    verdict = check_calls([], rec.ops, Final())
    assert not verdict.ok
    assert "operation 3 (hold J) never returned" in verdict.message
    assert "ConflictError" not in verdict.message  # a typed error is fine


def test_an_untyped_error_is_recorded_by_its_class_and_judged(tmp_path: Path) -> None:
    rec = Recorder(None)

    async def boom() -> None:
        raise KeyError("x")

    asyncio.run(rec.call("open", "J", boom, seconds=1))
    assert rec.ops[0].error == "KeyError"
    assert not check_calls([], rec.ops, Final()).ok


def test_a_fault_record_is_an_operation_of_kind_fault() -> None:
    rec = Recorder(None)
    op = rec.record("fault:node-pause", now_us(), {"node": "dk-worker"})
    assert op.op == "fault:node-pause"
    assert op.ok
    json.dumps(op.result)


def test_the_summary_table_names_every_run() -> None:
    res = RunResult(seed=5, run=0, namespace="chaos-5-0", duration_s=12.5,
                           ops={"open": 2}, faults={"node-pause": 1},
                           verdicts=dict.fromkeys(("clock", "a", "b", "c", "d", "e", "f"), True))
    bad = RunResult(seed=6, run=1, namespace="chaos-5-1", error="boom")
    table = runner.summary_table([res, bad])
    assert "node-pause=1" in table
    assert "boom" in table
    assert table.splitlines()[-1] == "1/2 runs without violation or error"


@pytest.mark.parametrize("argv", [["--runs", "1"]])
def test_the_command_line_needs_a_kubeconfig(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        runner.main(argv)


def test_every_fault_has_its_method() -> None:
    for name in FAULTS:
        assert callable(getattr(Faults, "_" + name.replace("-", "_"), None)), name


def test_seeds_are_a_comma_separated_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert runner._seed_list("3,17,42") == (3, 17, 42)
    with pytest.raises(SystemExit):
        runner.main(["--kubeconfig", "k", "--seeds", "3,x"])
    assert "--seeds: '3,x' is not a comma-separated list of integers" in capsys.readouterr().err


def test_a_cleanup_runs_to_its_end_through_a_cancellation() -> None:
    steps: list[str] = []

    async def cleanup() -> None:
        for step in ("namespace", "queue", "host directory"):
            await asyncio.sleep(0.01)
            steps.append(step)

    async def run() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            await _uninterrupted(cleanup())

    async def main() -> None:
        task = asyncio.create_task(run())
        await asyncio.sleep(0.01)
        task.cancel()  # Ctrl-C during the run
        await asyncio.sleep(0.015)
        task.cancel()  # and again during its cleanup
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert steps == ["namespace", "queue", "host directory"]


def test_the_campaign_table_sums_runs_and_counts_verdicts(tmp_path: Path) -> None:
    from chaos import campaign

    passed = dict.fromkeys(campaign.PROPERTIES, True)
    ok = {"seed": 7, "duration_s": 60.0, "faults": {"node-cut": 1}, "ops": {"open": 2},
          "faults_failed": {}, "verdicts": passed,
          "violations": [], "error": "", "ok": True, "runner": "abc", "executions": 3,
          "ledger_lines": 90}
    bad = {**ok, "seed": 8, "faults": {"node-cut": 2, "node-pause": 1},
           "faults_failed": {"node-pause": "rc=1"},
           "verdicts": {**passed, "a": False}, "violations": ["(a) overlap"],
           "ok": False}
    lost = {**ok, "seed": 9, "verdicts": {}, "error": "RuntimeError: boom", "ok": False}
    empty = {**ok, "seed": 11, "executions": 0, "ledger_lines": 0}
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (ok, bad, lost, empty)))
    text = campaign.table(campaign.load([path]))
    assert "runs: 4; seeds 7-9, 11" in text
    assert "judged runs in which nothing ran: 1 (seeds 11)" in text
    assert "| node-cut | 5 | 0 |" in text
    assert "| node-pause | 1 | 1 |" in text
    assert "| a | 3 | 1 | 1 |" not in text  # the error run is not judged, not passed
    assert "| a | 2 | 1 | 1 |" in text
    assert "seed 8: (a) overlap" in text
    assert "seed 9: RuntimeError: boom" in text
    assert campaign.main([str(path)]) == 1


class _Connects:
    """Backend.connect, answering observe-only backends first (a loaded Kueue)."""

    def __init__(self, observe_only: list[bool]) -> None:
        self.answers = list(observe_only)
        self.opened: list[_Backend] = []

    async def __call__(self, settings: dict[str, object]) -> _Backend:
        be = _Backend(self.answers.pop(0))
        self.opened.append(be)
        return be


class _Backend:
    def __init__(self, observe_only: bool) -> None:
        self.observe_only = observe_only
        self.observe_only_reasons = ["StartGate: unknown (probe not reported gated)"]
        self.closed = False

    async def close(self) -> None:
        self.closed = True


def _run(tmp_path: Path) -> Run:
    return Run(seed=9500, index=4, kubeconfig="k", cluster=None, out=tmp_path, jobs=1,
                      ops=1, faults=[], skipped_faults="")


@pytest.mark.asyncio
@pytest.mark.virtual_time
async def test_an_observe_only_backend_is_opened_again_then_the_run_is_not_judged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Seed 9504: the Backend came up observe-only, every Start was refused, and the run
    # passed with nothing run.
    again = _Connects([True, False])
    monkeypatch.setattr(Backend, "connect", again)
    be = await _run(tmp_path)._backend()
    assert cast(object, be) is again.opened[1]
    assert [b.closed for b in again.opened] == [True, False]
    never = _Connects([True, True])
    monkeypatch.setattr(Backend, "connect", never)
    with pytest.raises(NotJudged, match=r"observe-only.*StartGate: unknown"):
        await _run(tmp_path)._backend()
    assert [b.closed for b in never.opened] == [True, True]


# --- issue 26: the new operations, TERM lingers and ranks that end early ---------------------


def _fingerprint(plan: Plan) -> str:
    return repr(([(j.nodes, j.fail_once, j.run_seconds, j.open_at_start) for j in plan.jobs],
                 [(s.kind, s.name, s.job, s.delay, s.arg) for s in plan.steps]))


def test_mix_1_draws_the_plans_of_before_issue_26() -> None:
    """--mix 1 replays an old seed: the plans of seeds 0-99 as the runner drew them before
    the new operations (sha256 of their fingerprints, taken from that runner)."""
    text = "".join(_fingerprint(make_plan(s, mix=1)) for s in range(100))
    assert hashlib.sha256(text.encode()).hexdigest() == \
        "4475971d94fba66f36133a32d6474b9b96d63bd5bae5b3fdeb48bc0b1b066f6a"
    assert _fingerprint(make_plan(3, mix=1)).startswith(
        "([(1, True, 8.0, True), (2, False, 5.0, True), (1, False, 5.0, True)], "
        "[('op', 'start-different', 2, 1.09, 0.0), ('op', 'hold-expiry', 0, 3.38, 4.6)")
    for s in range(100):
        plan = make_plan(s, mix=1)
        assert {st.name for st in plan.steps if st.kind == "op"} <= set(SCHEDULE_OPS_1)
        assert all(j.term_linger == 0 and j.early_exit == 0 for j in plan.jobs)
    with pytest.raises(ValueError, match="mix"):
        make_plan(1, mix=3)


def test_mix_2_plans_are_a_function_of_the_seed_and_hold_the_new_operations() -> None:
    assert make_plan(11) == make_plan(11, mix=MIX)
    assert make_plan(11).mix == 2
    new = {"delete-jobset", "delete-workload", "delete-workload-held", "next-attempt"}
    seen: set[str] = set()
    lingers: set[float] = set()
    early = 0
    for seed in range(100):
        plan = make_plan(seed)
        assert plan == make_plan(seed)
        seen |= {s.name for s in plan.steps if s.kind == "op"}
        assert plan.jobs[1].term_linger > 0  # every run has a job that lingers on TERM
        for j in plan.jobs:
            lingers.add(j.term_linger)
            assert j.term_linger < 30  # below the pods' grace period
            if j.early_exit:
                early += 1
                assert j.nodes == 2
                assert j.run_seconds >= 15 > 2 >= j.early_exit
    assert new <= seen
    assert lingers == set(TERM_LINGERS)
    assert 50 < early < 200  # about one job in three
    assert make_plan(11) != make_plan(12)


def test_the_job_command_carries_the_linger_and_the_early_rank() -> None:
    plan = JobPlan(nodes=2, fail_once=False, run_seconds=25.0, open_at_start=True,
                          term_linger=12.0, early_exit=1.5)
    cmd = job_command(plan)
    assert {"LEDGER_TERM_LINGER=12", "LEDGER_EARLY_RANK=1", "LEDGER_EARLY_SECONDS=1.5",
            "LEDGER_RUN_SECONDS=25"} <= set(cmd)
    plain = job_command(JobPlan(1, False, 5.0, True))
    assert not [a for a in plain if a.startswith(("LEDGER_TERM", "LEDGER_EARLY"))]
    req = job_request(JobID.new(), plan, "rt", submission=2, attempt=3)
    assert (req.submission, req.attempt) == (2, 3)
    req.validate()


def test_the_runtime_gives_the_ledger_the_pod_and_jobset_uids() -> None:
    body = runtime_body("dispatch-chaos-1-0", Path("/var/lib/dispatch-chaos/1-0"))
    pod = body["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"]
           for e in pod["spec"]["containers"][0]["env"]}
    assert env == {"NODE_NAME": "spec.nodeName", "POD_UID": "metadata.uid",
                   "JOBSET_UID": "metadata.labels['jobset.sigs.k8s.io/jobset-uid']"}
    assert pod["spec"]["terminationGracePeriodSeconds"] > max(TERM_LINGERS)


def test_quota_free_counts_the_jobs_that_reserve_quota() -> None:
    nodes = {"a": 2, "b": 2, "c": 2, "d": 1}
    states = {"a": "running", "b": "admitting", "c": "queued", "d": "holding"}
    assert quota_free("a", states, nodes) is True  # it has its quota
    assert quota_free("c", states, nodes) is False  # 2 + 2 + 1 + 2 > 6
    assert quota_free("c", {**states, "d": "held"}, nodes) is True
    assert quota_free("x", states, nodes) is None


def test_the_workload_of_a_trainjob_is_found_by_its_owner() -> None:
    def wl(name: str, owner: str, deleting: bool = False) -> dict[str, object]:
        meta: dict[str, object] = {"name": name, "ownerReferences": [
            {"apiVersion": f"{names.TRAINER_GROUP}/{names.TRAINER_VERSION}", "kind": "TrainJob",
             "name": owner, "controller": True}]}
        if deleting:
            meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        return {"metadata": meta}

    items = [wl("old", "dj-a-s1", deleting=True), wl("other", "dj-b-s1"), wl("new", "dj-a-s1")]
    found = workload_of(items, "dj-a-s1")
    assert found is not None
    assert found["metadata"]["name"] == "new"
    assert workload_of(items[:1], "dj-a-s1") is items[0]
    assert workload_of(items, "dj-c-s1") is None


class _OpsBackend:
    """The Backend calls the executor makes, recorded; Start returns the TrainJob's ref."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    async def start(self, req: StartRequest) -> ObjectRef:
        self.calls.append(("start", (req.submission, req.attempt)))
        return ObjectRef("ns", f"dj-{str(req.job).lower()}-s{req.submission}")

    async def open(self, ref: ObjectRef) -> None:
        self.calls.append(("open", ref.name))

    async def hold(self, ref: ObjectRef, meta: HoldMeta) -> None:
        self.calls.append(("hold", meta.instance))

    async def stop_job(self, job: JobID, reason: str) -> StopReport:
        self.calls.append(("stop_job", str(job)))
        return StopReport()


class _OpsKube:
    def __init__(self, workloads: list[dict[str, object]]) -> None:
        self.workloads = workloads
        self.deleted: list[tuple[str, str, str | None, str]] = []

    async def list(self, res: object, namespace: str | None = None,
                   **kw: object) -> tuple[list[dict[str, object]], str]:
        return self.workloads, "1"

    async def delete(self, res: Resource, name: str, namespace: str | None = None, *,
                     uid: str | None = None, propagation: str = "Background",
                     grace_period: int | None = None) -> dict[str, object] | None:
        self.deleted.append((res.kind, name, uid, propagation))
        return {"metadata": {"name": name, "uid": uid or "js-uid-1"}}


def test_the_new_operations_act_and_are_recorded(tmp_path: Path) -> None:
    run = _run(tmp_path)
    be = _OpsBackend()
    job = JobID.new()
    ref = ObjectRef("ns", f"dj-{str(job).lower()}-s1")
    wl = {"metadata": {"name": "trainjob-x-1", "uid": "wl-uid",
                       "ownerReferences": [{
                           "apiVersion": f"{names.TRAINER_GROUP}/{names.TRAINER_VERSION}",
                           "kind": "TrainJob", "name": ref.name, "controller": True}]},
          "spec": {"active": True}}
    kube = _OpsKube([wl])
    ops_of = Operations(Recorder(None), cast(Kube, kube), namespace=run.namespace,
                        runtime=run.runtime, rng=run.rng)
    st = JobState(JobPlan(2, False, 5.0, True), job, ref)

    async def go() -> None:
        b = cast(Backend, be)
        await ops_of.op(b, "delete-jobset", st, 0.0)
        await ops_of.op(b, "delete-workload-held", st, 0.0)   # holds first
        await ops_of.op(b, "delete-workload-held", st, 0.0)   # held already: no second hold
        await ops_of.op(b, "next-attempt", st, 0.0)           # stop, start attempt 2, open
        await ops_of.op(b, "next-attempt", st, 0.0)           # and again: attempt 3

    asyncio.run(go())
    ops = [(o.op, o.args.get("attempt")) for o in ops_of.rec.ops]
    assert ops == [("delete_jobset", 1), ("hold", None), ("delete_workload", 1),
                   ("delete_workload", 1), ("stop_job", 1), ("start", 2), ("open", None),
                   ("stop_job", 2), ("start", 3), ("open", None)]
    assert all(o.ok for o in ops_of.rec.ops)
    assert kube.deleted[0] == ("JobSet", ref.name, None, "Background")
    assert kube.deleted[1] == ("Workload", "trainjob-x-1", "wl-uid", "Background")
    assert ops_of.rec.ops[0].result == {"jobset": ref.name, "uid": "js-uid-1", "found": True}
    assert ops_of.rec.ops[2].args["held"] is True
    assert [c for c in be.calls if c[0] == "start"] == [("start", (1, 2)), ("start", (1, 3))]
    assert (st.submission, st.attempt, st.stopped, st.held) == (1, 3, False, False)
    # A StopJob then a Start of the same kind makes a new submission, attempt 1 again.
    asyncio.run(ops_of.op(cast(Backend, be), "stop_job", st, 0.0))
    asyncio.run(ops_of.op(cast(Backend, be), "start-same", st, 0.0))
    assert be.calls[-1] == ("start", (2, 1))


def test_a_stop_file_ends_the_campaign_before_its_next_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A campaign longer than a sitting stops between runs: with OUT/STOP there, no run
    starts (not even the cluster's health check, so nothing is asked of the server, which
    here does not exist)."""
    kc = tmp_path / "kubeconfig"
    kc.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / runner.STOP_FILE).touch()
    assert runner.main(["--kubeconfig", str(kc), "--runs", "3", "--seed", "40",
                        "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"{out / runner.STOP_FILE} exists; stopping before run 0 (seed 40)" in err
    assert not (out / "runs.jsonl").exists()

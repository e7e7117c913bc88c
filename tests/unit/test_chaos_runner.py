"""The fault suite's runner, offline: its plan is a function of the seed, and its recorder
records results, typed errors by class, and calls past their deadline as hung."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import cast

import pytest

from chaos import runner
from chaos.checker import check_calls
from chaos.history import Final, read_operations
from dispatch_kubeflow import Backend, ConflictError, DeadlineExceeded, JobID


def test_the_plan_is_a_function_of_the_seed() -> None:
    a = runner.make_plan(7, jobs=3, ops=8)
    assert a == runner.make_plan(7, jobs=3, ops=8)
    assert a != runner.make_plan(8, jobs=3, ops=8)
    assert len(a.jobs) == 3
    assert sum(1 for s in a.steps if s.kind == "op") == 8
    assert a.jobs[0].fail_once  # every run has a job that JobSet restarts
    assert all(j.nodes in (1, 2) for j in a.jobs)


def test_faults_come_only_from_those_available() -> None:
    for seed in range(50):
        plan = runner.make_plan(seed, faults=["delete-leader-pod"])
        assert {s.name for s in plan.steps if s.kind == "fault"} <= {"delete-leader-pod"}
        assert not [s for s in runner.make_plan(seed, faults=[]).steps if s.kind == "fault"]


def test_many_seeds_cover_every_operation_and_fault() -> None:
    ops: set[str] = set()
    faults: set[str] = set()
    for seed in range(200):
        for s in runner.make_plan(seed).steps:
            (ops if s.kind == "op" else faults).add(s.name)
    assert ops == set(runner.SCHEDULE_OPS)
    assert faults == set(runner.FAULTS)


def test_a_pause_outlasts_the_node_monitor_grace_and_a_sigstop_the_lease() -> None:
    for seed in range(100):
        for s in runner.make_plan(seed).steps:
            if s.name == "node-pause":
                assert runner.NODE_MONITOR_GRACE < s.arg < runner.NODE_MONITOR_GRACE + 10
            if s.name == "controller-sigstop":
                assert s.arg > runner.LEASE_DURATION


def test_the_job_command_carries_the_ledger_settings() -> None:
    plan = runner.JobPlan(nodes=2, fail_once=True, run_seconds=5.0, open_at_start=True)
    cmd = runner.job_command(plan)
    assert cmd[0] == "env"
    assert "LEDGER_FAIL_ONCE=1" in cmd
    assert "LEDGER_RUN_SECONDS=5" in cmd
    assert cmd[-4:-2] == ["/bin/sh", "-c"]
    assert cmd[-1] == "ledger"
    other = runner.job_command(plan, variant="other")
    assert other != cmd
    req = runner.job_request(JobID.new(), plan, "dispatch-chaos-1-0")
    req.validate()


def test_the_runtime_mounts_the_ledger_from_the_host() -> None:
    body = runner.runtime_body("dispatch-chaos-1-0", Path("/var/lib/dispatch-chaos/1-0"))
    pod = body["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    vol = pod["spec"]["volumes"][0]
    assert vol["hostPath"] == {"path": "/var/lib/dispatch-chaos/1-0",
                               "type": "DirectoryOrCreate"}
    assert pod["spec"]["containers"][0]["volumeMounts"][0]["mountPath"] == "/ledger"


def test_the_recorder_records_results_typed_errors_and_hung_calls(tmp_path: Path) -> None:
    rec = runner.Recorder(tmp_path / "ops.jsonl", hung_grace=0.05)

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
    rec = runner.Recorder(None)

    async def boom() -> None:
        raise KeyError("x")

    asyncio.run(rec.call("open", "J", boom, seconds=1))
    assert rec.ops[0].error == "KeyError"
    assert not check_calls([], rec.ops, Final()).ok


def test_a_fault_record_is_an_operation_of_kind_fault() -> None:
    rec = runner.Recorder(None)
    op = rec.record("fault:node-pause", runner.now_us(), {"node": "dk-worker"})
    assert op.op == "fault:node-pause"
    assert op.ok
    json.dumps(op.result)


def test_the_summary_table_names_every_run() -> None:
    res = runner.RunResult(seed=5, run=0, namespace="chaos-5-0", duration_s=12.5,
                           ops={"open": 2}, faults={"node-pause": 1},
                           verdicts=dict.fromkeys(("clock", "a", "b", "c", "d", "e", "f"), True))
    bad = runner.RunResult(seed=6, run=1, namespace="chaos-5-1", error="boom")
    table = runner.summary_table([res, bad])
    assert "node-pause=1" in table
    assert "boom" in table
    assert table.splitlines()[-1] == "1/2 runs without violation or error"


@pytest.mark.parametrize("argv", [["--runs", "1"]])
def test_the_command_line_needs_a_kubeconfig(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        runner.main(argv)


def test_every_fault_has_its_method() -> None:
    for name in runner.FAULTS:
        assert callable(getattr(runner.Faults, "_" + name.replace("-", "_"), None)), name


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
            await runner._uninterrupted(cleanup())

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


def _run(tmp_path: Path) -> runner.Run:
    return runner.Run(seed=9500, index=4, kubeconfig="k", cluster=None, out=tmp_path, jobs=1,
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
    with pytest.raises(runner.NotJudged, match=r"observe-only.*StartGate: unknown"):
        await _run(tmp_path)._backend()
    assert [b.closed for b in never.opened] == [True, True]

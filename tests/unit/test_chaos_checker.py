"""The fault suite's checker judges hand-made histories correctly: each one flags the
property it breaks, and only that one."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.checker import PROPERTIES, Verdict, allowed_errors, executions, judge
from chaos.history import (
    OP_HOLD,
    OP_OPEN,
    OP_START,
    OP_STOP,
    Final,
    JobFinal,
    LedgerLine,
    ObjectMeta,
    Operation,
    read_final,
    read_ledger,
    read_operations,
    write_final,
    write_jsonl,
)
from chaos.report import format_verdicts, main
from dispatch_kubeflow import errors

T0 = 1_800_000_000_000_000  # wall_us
UP0 = 100_000  # uptime, centiseconds
JOB = "01JQ8Z6W3K9V7TQ2M5XH4N0RCB"
OTHER = "01JQ8Z6W3K9V7TQ2M5XH4N0RCC"


def run(job: str, sub: int, a: int, j: int, start_ms: int, end_ms: int, *, rank: int = 0,
        status: int | None = 0, epoch: int | None = None, pid: int = 0, attempt: int = 1,
        uid: str = "", jobset: str = "", pod: str = "") -> list[LedgerLine]:
    """One rank of one execution: a start line, beats every 100 ms, an exit line."""
    ident = f"{job}.{sub}.{attempt}.{a}.{j}"
    ep = str(epoch if epoch is not None else
             sub * 1_000_000 + (attempt - 1) * 10_000 + a + j)
    pid = pid or 1000 + 97 * a + 13 * j + rank
    times = [*range(start_ms, end_ms, 100), end_ms]
    kinds = ["start"] + ["beat"] * (len(times) - 2) + ["exit" if status is not None else "beat"]
    return [LedgerLine(kind=k, attempt=ident, epoch=ep,
                       pod=pod or f"{job.lower()}-{attempt}-{a}-{j}-{rank}",
                       rank=str(rank), pid=pid, seq=n + 1, wall_us=T0 + t * 1000,
                       uptime_cs=UP0 + t // 10, status=status if k == "exit" else None,
                       started_us=T0 + start_ms * 1000, uid=uid, jobset=jobset)
            for n, (k, t) in enumerate(zip(kinds, times, strict=True))]


def op(id: int, kind: str, job: str, call_ms: int, ret_ms: int | None, *,
       error: str | None = None, result: object = None,
       deadline_ms: int | None = None, **args: object) -> Operation:
    return Operation(id=id, op=kind, job=job, call_us=T0 + call_ms * 1000,
                     return_us=None if ret_ms is None else T0 + ret_ms * 1000,
                     result=result, error=error, args=dict(args),
                     deadline_us=None if deadline_ms is None else T0 + deadline_ms * 1000)


def clean_history() -> tuple[list[LedgerLine], list[Operation], Final]:
    """Two jobs. JOB: a two-node run that failed once (J=1), then held and released (A=2),
    then stopped. OTHER: opened, ran to the end."""
    ledger = (run(JOB, 1, 1, 0, 100, 600, status=1) + run(JOB, 1, 1, 0, 110, 590, rank=1,
                                                          status=None)
              + run(JOB, 1, 1, 1, 800, 1500, status=None)
              + run(JOB, 1, 1, 1, 805, 1500, rank=1, status=None)
              + run(JOB, 1, 2, 1, 2000, 3000) + run(JOB, 1, 2, 1, 2001, 3000, rank=1)
              + run(OTHER, 1, 1, 0, 50, 2500))
    ops = [op(1, OP_START, JOB, 0, 30, result="trainjob/x"),
           op(2, OP_OPEN, JOB, 40, 60, deadline_ms=10_000),
           op(3, OP_START, OTHER, 0, 20), op(4, OP_OPEN, OTHER, 25, 45),
           op(5, OP_HOLD, JOB, 1400, 1700, deadline_ms=30_000),
           op(6, "release", JOB, 1800, 1900, result="released"),
           op(7, OP_STOP, JOB, 3500, 4000, result={"stopped": 5, "alive": 0, "unproven": 0})]
    final = Final(jobs=[JobFinal(JOB, find_empty=True, direct_list_empty=True),
                        JobFinal(OTHER)],
                  objects=[ObjectMeta("TrainJob", "ns", "other", annotations={"a": "b"},
                                      finalizers=["dispatch.phpboyscout.uk/x"])])
    return ledger, ops, final


def flagged(verdicts: list[Verdict]) -> set[str]:
    assert [v.prop for v in verdicts] == list(PROPERTIES)
    return {v.prop for v in verdicts if not v.ok}


def test_clean_history_passes_every_property() -> None:
    verdicts = judge(*clean_history())
    assert flagged(verdicts) == set(), format_verdicts(verdicts)
    exs = executions(clean_history()[0])
    assert [e.attempt.split(".", 1)[1] for e in exs[JOB]] == ["1.1.1.0", "1.1.1.1", "1.1.2.1"]


def test_overlap_is_flagged_with_the_lines_around_it() -> None:
    ledger, ops, final = clean_history()
    # A second execution of OTHER (a re-admission) starts while the first still beats.
    ledger += run(OTHER, 1, 2, 0, 2400, 2600)
    v = judge(ledger, ops, final)
    assert flagged(v) == {"a"}
    a = v[1]
    assert f"({OTHER}.1.1.2.0 rank 0) started" in a.message
    assert "100.000 ms before" in a.message
    assert a.message.endswith("another execution")
    assert {ln.attempt for ln in a.lines} == {f"{OTHER}.1.1.1.0", f"{OTHER}.1.1.2.0"}
    assert all(ln.job == OTHER for ln in a.lines)


def test_an_execution_inside_a_longer_one_is_an_overlap() -> None:
    ledger, ops, final = clean_history()
    # Starts after the long one and ends before the one after it: compare with the latest end.
    ledger = [ln for ln in ledger if ln.job == OTHER] + run(OTHER, 1, 2, 0, 500, 700)
    ledger += run(OTHER, 1, 3, 0, 800, 900)
    assert flagged(judge(ledger, ops, final)) == {"a"}
    assert "(and 1 more)" in judge(ledger, ops, final)[1].message


def test_equal_timestamps_overlap_no_margin() -> None:
    """Intervals are closed: a first line at exactly another's last line overlaps it."""
    ledger, ops, final = clean_history()
    touching = ledger + run(OTHER, 1, 2, 0, 2500, 2700)  # OTHER's first ends at 2500 ms
    v = judge(touching, ops, final)
    assert flagged(v) == {"a"}
    assert "0.000 ms before" in v[1].message
    one_us_later = ledger + [LedgerLine(**{**ln.__dict__, "wall_us": ln.wall_us + 1})
                             for ln in run(OTHER, 1, 2, 0, 2500, 2700)]
    assert flagged(judge(one_us_later, ops, final)) == set()


def test_non_increasing_epoch_is_flagged() -> None:
    ledger, ops, final = clean_history()
    # A later execution of submission 1 whose epoch does not rise: a lie in the identity.
    ledger += run(OTHER, 1, 1, 0, 2600, 2800, pid=77)
    ledger = [ln if not (ln.attempt == f"{OTHER}.1.1.1.0" and ln.pid == 77) else
              LedgerLine(**{**ln.__dict__, "attempt": f"{OTHER}.1.1.0.1"}) for ln in ledger]
    v = judge(ledger, ops, final)
    assert flagged(v) == {"b"}
    assert "DISPATCH_EPOCH 1000001 -> 1000001 (A + J 1 -> 1)" in v[2].message


def test_non_increasing_r_within_a_submission_is_flagged() -> None:
    ledger, ops, final = clean_history()
    # A=2 J=0 after A=2 J=1: R 3 -> 2, the epoch falls with it.
    ledger += run(JOB, 1, 2, 0, 3100, 3300)
    v = judge(ledger, ops, final)
    assert flagged(v) == {"b"}
    assert "1000003 -> 1000002" in v[2].message


def test_a_new_submission_may_start_r_again() -> None:
    ledger, ops, final = clean_history()
    ledger += run(JOB, 2, 1, 0, 5000, 5200)  # submission 2: epoch 2000001 > 1000003
    ops += [op(8, OP_START, JOB, 4500, 4600), op(9, OP_OPEN, JOB, 4700, 4800)]
    final = Final(jobs=[JobFinal(JOB), JobFinal(OTHER)], objects=final.objects)
    assert flagged(judge(ledger, ops, final)) == set()


def test_epoch_that_disagrees_with_the_attempt_is_flagged() -> None:
    ledger, ops, final = clean_history()
    ledger += run(JOB, 1, 3, 1, 3100, 3300, epoch=1000009)
    v = judge(ledger, ops, final)
    assert flagged(v) == {"b"}
    assert "its identity implies 1000004" in v[2].message


def test_lost_job_is_flagged_and_a_reason_excuses_it() -> None:
    ledger, ops, final = clean_history()
    ledger = [ln for ln in ledger if ln.job != OTHER]
    v = judge(ledger, ops, final)
    assert flagged(v) == {"c"}
    assert f"job {OTHER} was opened" in v[3].message
    assert "no ledger line at all" in v[3].message
    assert {o.id for o in v[3].operations} == {3, 4}
    excused = Final(jobs=[final.jobs[0], JobFinal(OTHER, reason="Kueue never admitted it")])
    v = judge(ledger, ops, excused)
    assert flagged(v) == set()
    assert "Kueue never admitted it" in v[3].message


def test_a_job_that_only_failed_or_is_held_at_the_end() -> None:
    ledger, ops, final = clean_history()
    ledger = [ln for ln in ledger if ln.job != OTHER] + run(OTHER, 1, 1, 0, 50, 500, status=1)
    assert flagged(judge(ledger, ops, final)) == {"c"}
    held = Final(jobs=[final.jobs[0], JobFinal(OTHER, held=True)])
    assert flagged(judge(ledger, ops, held)) == set()


def test_stop_that_left_objects_is_flagged() -> None:
    ledger, ops, final = clean_history()
    final = Final(jobs=[JobFinal(JOB, find_empty=True, direct_list_empty=False),
                        JobFinal(OTHER)])
    v = judge(ledger, ops, final)
    assert flagged(v) == {"d"}
    assert "direct_list_empty=False" in v[4].message
    unobserved = Final(jobs=[JobFinal(OTHER)])
    assert "not observed at the end" in judge(ledger, ops, unobserved)[4].message


def test_execution_that_runs_on_after_stop_is_flagged() -> None:
    ledger, ops, final = clean_history()
    ledger += run(JOB, 1, 3, 1, 3200, 4300, status=None)  # beats on past the stop at 4000
    v = judge(ledger, ops, final)
    assert flagged(v) == {"d"}
    assert "wrote 3 line(s) after StopJob" in v[4].message
    assert v[4].lines
    assert any(o.op == OP_STOP for o in v[4].operations)
    # A report that admits survivors does not claim everything gone at once.
    honest = [o if o.op != OP_STOP else Operation(**{**o.__dict__, "result": {"alive": 1}})
              for o in ops]
    assert flagged(judge(ledger, honest, final)) == set()


def test_hung_call_and_late_call_are_flagged() -> None:
    ledger, ops, final = clean_history()
    hung = [*ops, op(8, OP_HOLD, OTHER, 2000, None, deadline_ms=12_000)]
    v = judge(ledger, hung, final)
    assert flagged(v) == {"e"}
    assert "operation 8 (hold" in v[5].message
    assert "never returned" in v[5].message
    late = [*ops, op(8, OP_HOLD, OTHER, 2000, 14_000, deadline_ms=12_000)]
    v = judge(ledger, late, final)
    assert flagged(v) == {"e"}
    assert "2000.0 ms after its deadline" in v[5].message
    in_grace = [*ops, op(8, OP_HOLD, OTHER, 2000, 12_500, error="DeadlineExceeded",
                         deadline_ms=12_000)]
    assert flagged(judge(ledger, in_grace, final)) == set()


def test_untyped_error_is_flagged() -> None:
    ledger, ops, final = clean_history()
    bad = [*ops, op(8, OP_HOLD, OTHER, 2000, 2100, error="KeyError")]
    v = judge(ledger, bad, final)
    assert flagged(v) == {"e"}
    assert "raised KeyError, not an error of the library's tree" in v[5].message
    typed = [*ops, op(8, OP_HOLD, OTHER, 2000, 2100, error="KubeConflict")]
    assert flagged(judge(ledger, typed, final)) == set()


def test_allowed_errors_are_the_library_tree() -> None:
    names = allowed_errors()
    assert {"DispatchError", "KubeGone", "DeadlineExceeded", "HoldError"} <= names
    assert {"TimeoutError", "Exception", "KeyError"}.isdisjoint(names)
    public = {n for n in dir(errors) if isinstance(getattr(errors, n), type)
              and issubclass(getattr(errors, n), errors.DispatchError)}
    assert names == public


def test_kopf_finalizer_or_annotation_is_flagged() -> None:
    ledger, ops, final = clean_history()
    objs = [*final.objects,
            ObjectMeta("Workload", "ns", "w",
                       finalizers=["kopf.zalando.org/KopfFinalizerMarker"]),
            ObjectMeta("TrainJob", "ns", "t",
                       annotations={"kopf.zalando.org/last-handled-configuration": "{}"})]
    v = judge(ledger, ops, Final(jobs=final.jobs, objects=objs))
    assert flagged(v) == {"f"}
    assert "Workload ns/w carries finalizer kopf.zalando.org/KopfFinalizerMarker" in v[6].message
    assert "(and 1 more)" in v[6].message


def test_a_stepped_wall_clock_is_flagged() -> None:
    ledger, ops, final = clean_history()
    # OTHER's lines from 1 s on: wall jumps 5 s ahead of uptime.
    stepped = [ln if not (ln.job == OTHER and ln.wall_us >= T0 + 1_000_000) else
               LedgerLine(**{**ln.__dict__, "wall_us": ln.wall_us + 5_000_000})
               for ln in ledger]
    v = judge(stepped, ops, final)
    assert "clock" in flagged(v)
    assert "the wall clock stepped" in v[0].message
    back = [ln if not (ln.job == OTHER and ln.seq == 5) else
            LedgerLine(**{**ln.__dict__, "wall_us": ln.wall_us - 300_000}) for ln in ledger]
    assert "is earlier than line 4" in judge(back, ops, final)[0].message


def test_a_container_restarted_in_place_is_another_process() -> None:
    """Same pod, same pid 1, same attempt, seq from 1 again: not a clock going backwards."""
    ledger, ops, final = clean_history()
    again = [LedgerLine(**{**ln.__dict__, "pid": 1}) for ln in run(OTHER, 1, 1, 0, 50, 1000)]
    again += [LedgerLine(**{**ln.__dict__, "pid": 1}) for ln in run(OTHER, 1, 1, 0, 1100, 2500)]
    ledger = [ln for ln in ledger if ln.job != OTHER] + again
    assert flagged(judge(ledger, ops, final)) == set()


def test_history_round_trips_and_report_prints_the_seed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger, ops, final = clean_history()
    ledger += run(OTHER, 1, 2, 0, 2400, 2600)
    write_jsonl(tmp_path / "ledger.jsonl", ledger)
    write_jsonl(tmp_path / "ops.jsonl", ops)
    write_final(tmp_path / "final.json", final)
    assert read_ledger(tmp_path / "ledger.jsonl") == ledger
    assert read_operations(tmp_path / "ops.jsonl") == ops
    assert read_final(tmp_path / "final.json") == final
    rc = main(["--ledger", str(tmp_path / "ledger.jsonl"), "--ops", str(tmp_path / "ops.jsonl"),
               "--final", str(tmp_path / "final.json"), "--seed", "4242"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "FAIL (a) no two pods of a job alive at once" in out
    assert "ok   (b)" in out
    assert "VIOLATION seed=4242 property (a)" in out
    assert "ledger lines around it:" in out
    assert f'"attempt":"{OTHER}.1.1.2.0"' in out


def test_a_torn_ledger_line_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "l.jsonl").write_text('{"kind":"start","attempt":"x.1.1.1.0","wall_us":1}\n'
                                      '{"kind":"beat","attem\n')
    with pytest.raises(ValueError, match=r"l\.jsonl:2"):
        read_ledger(tmp_path / "l.jsonl")


# --- issue 26: pods, not identity strings; epochs across attempts; liveness -----------------


def test_two_pods_of_one_rank_at_one_identity_are_an_overlap() -> None:
    """A replacement pod of rank 0 beside one still in its TERM handler: the same JobSet, the
    same DISPATCH_ATTEMPT, the same rank, two pods. Keyed by identity they were one."""
    ledger, ops, final = clean_history()
    ledger = [ln for ln in ledger if ln.job != OTHER]
    ledger += run(OTHER, 1, 1, 0, 50, 2500, uid="u-old", jobset="js-1", pod="other-node-0-a")
    ledger += run(OTHER, 1, 1, 0, 2000, 2600, uid="u-new", jobset="js-1", pod="other-node-0-b")
    v = judge(ledger, ops, final)
    assert flagged(v) == {"a"}
    assert "pod other-node-0-b uid u-new" in v[1].message
    assert "500.000 ms before pod other-node-0-a uid u-old" in v[1].message
    assert v[1].message.endswith("the same rank of the same execution")
    assert {ln.uid for ln in v[1].lines} == {"u-old", "u-new"}
    # The same two pods one after the other: a pod replaced, not an overlap.
    ledger = [ln for ln in ledger if ln.uid != "u-new"]
    ledger += run(OTHER, 1, 1, 0, 2600, 2800, uid="u-new", jobset="js-1", pod="other-node-0-b")
    assert flagged(judge(ledger, ops, final)) == set()


def test_ranks_of_one_execution_overlap_but_not_of_another_jobset() -> None:
    """Case 1 of issue 26: the JobSet deleted and re-made at the same identity; its rank 0
    starts while the old rank 1 lingers in its TERM handler."""
    ledger, ops, final = clean_history()
    ledger = [ln for ln in ledger if ln.job != OTHER]
    old = (run(OTHER, 1, 1, 0, 50, 2500, uid="u0", jobset="js-1")
           + run(OTHER, 1, 1, 0, 60, 2500, rank=1, uid="u1", jobset="js-1"))
    assert flagged(judge(ledger + old, ops, final)) == set()  # two ranks side by side: fine
    again = (run(OTHER, 1, 1, 0, 2300, 3000, uid="u2", jobset="js-2")
             + run(OTHER, 1, 1, 0, 2300, 3000, rank=1, uid="u3", jobset="js-2"))
    v = judge(ledger + old + again, ops, final)
    assert flagged(v) == {"a", "b"}
    assert "another execution, the same identity" in v[1].message
    assert "(and 3 more)" in v[1].message  # each new pod beside each old one
    assert (f"{OTHER}.1.1.1.0 (JobSet js-1) then {OTHER}.1.1.1.0 (JobSet js-2): "
            "DISPATCH_EPOCH 1000001 -> 1000001") in v[2].message
    # After the old pods went, at a raised A: a new execution, higher. Fine.
    later = (run(OTHER, 1, 2, 0, 2600, 3000, uid="u2", jobset="js-2")
             + run(OTHER, 1, 2, 0, 2600, 3000, rank=1, uid="u3", jobset="js-2"))
    assert flagged(judge(ledger + old + later, ops, final)) == set()
    # ... but at the same A, after the old pods went: not an overlap, still not higher.
    same = (run(OTHER, 1, 1, 0, 2600, 3000, uid="u2", jobset="js-2")
            + run(OTHER, 1, 1, 0, 2600, 3000, rank=1, uid="u3", jobset="js-2"))
    assert flagged(judge(ledger + old + same, ops, final)) == {"b"}


def test_an_execution_between_two_pods_of_another_is_flagged() -> None:
    """No two pods overlap, but a new execution ran inside the old one's span: the old
    one's rank 1 started after the new one ended."""
    ledger, ops, final = clean_history()
    ledger = [ln for ln in ledger if ln.job != OTHER]
    ledger += run(OTHER, 1, 1, 0, 50, 500, status=None)
    ledger += run(OTHER, 1, 2, 0, 600, 900)
    ledger += run(OTHER, 1, 1, 0, 1000, 1200, rank=1)
    v = judge(ledger, ops, final)
    assert "a" in flagged(v)
    assert f"{OTHER}.1.1.2.0 started" in v[1].message
    assert "(within its span)" in v[1].message


def test_a_later_attempt_must_run_above_every_epoch_of_the_earlier_one() -> None:
    """Case 2 of issue 26: attempt 1 held and released (1000002), stopped, attempt 2 of the
    same submission started and opened."""
    ledger, ops, final = clean_history()
    ledger = [ln for ln in ledger if ln.job != OTHER]
    ledger += (run(OTHER, 1, 1, 0, 50, 500, status=None, jobset="js-a1")
               + run(OTHER, 1, 2, 0, 700, 1200, jobset="js-a1"))
    ops += [op(8, OP_STOP, OTHER, 1300, 1400, result={"alive": 0, "unproven": 0}),
            op(9, OP_START, OTHER, 1500, 1600, submission=1, attempt=2),
            op(10, OP_OPEN, OTHER, 1700, 1800)]
    final = Final(jobs=[final.jobs[0], JobFinal(OTHER)])
    good = ledger + run(OTHER, 1, 1, 0, 2000, 2400, attempt=2)  # 1010001
    assert flagged(judge(good, ops, final)) == set()
    # A reset to 0 on the new TrainJob, and the old epoch formula: 1000001 < 1000002.
    low = ledger + run(OTHER, 1, 1, 0, 2000, 2400, attempt=2, epoch=1_000_001)
    v = judge(low, ops, final)
    assert flagged(v) == {"b"}
    assert "carries DISPATCH_EPOCH ['1000001'], its identity implies 1010001" in v[2].message
    assert ("DISPATCH_EPOCH 1000002 -> 1000001 (submission 1 attempt 1 -> submission 1 "
            "attempt 2)") in v[2].message
    # The attempt not in the identity at all: the same string as attempt 1's first (the
    # JobSet's UID tells the two executions apart).
    lost = ledger + run(OTHER, 1, 1, 0, 2000, 2400, pod="other-attempt-2-node-0",
                        jobset="js-a2")
    v = judge(lost, ops, final)
    assert flagged(v) == {"b"}
    assert "DISPATCH_EPOCH 1000002 -> 1000001 (A + J 2 -> 1)" in v[2].message


def test_an_identity_that_is_not_one_is_a_violation_not_a_crash() -> None:
    ledger, ops, final = clean_history()
    ledger += [LedgerLine(**{**ln.__dict__, "attempt": f"{OTHER}.1.1.x.0"})
               for ln in run(OTHER, 1, 2, 0, 2600, 2800)]
    v = judge(ledger, ops, final)
    assert "b" in flagged(v)
    assert "is not <job>.<submission>.<attempt>.<A>.<J>" in v[2].message


def test_a_rank_that_exited_0_is_not_a_job_that_ran_to_its_end() -> None:
    """Rank 1 ends early (exit 0), rank 0 is stopped by a hold and the job never runs
    again: nothing ran to its end."""
    ledger, ops, final = clean_history()
    ledger = [ln for ln in ledger if ln.job != OTHER]
    ledger += run(OTHER, 1, 1, 0, 50, 1500, status=143)
    ledger += run(OTHER, 1, 1, 0, 50, 300, rank=1)
    exs = executions(ledger)[OTHER]
    assert not exs[0].succeeded
    v = judge(ledger, ops, final)
    assert flagged(v) == {"c"}
    assert "no execution ran to its end, every rank exiting 0" in v[3].message
    ledger += run(OTHER, 1, 2, 0, 1600, 2500) + run(OTHER, 1, 2, 0, 1600, 1800, rank=1)
    assert executions(ledger)[OTHER][1].succeeded
    assert flagged(judge(ledger, ops, final)) == set()


def test_a_job_opened_again_after_its_stop_must_run() -> None:
    ledger, ops, final = clean_history()
    # JOB was stopped at 3500; attempt 2 is started and opened, and never runs.
    ops += [op(8, OP_START, JOB, 4500, 4600, submission=1, attempt=2),
            op(9, OP_OPEN, JOB, 4700, 4800)]
    final = Final(jobs=[JobFinal(JOB), JobFinal(OTHER)])
    v = judge(ledger, ops, final)
    assert flagged(v) == {"c"}
    assert "no ledger line at all since its StopJob" in v[3].message
    ledger += run(JOB, 1, 1, 0, 5000, 5500, attempt=2)
    assert flagged(judge(ledger, ops, final)) == set()


def released() -> tuple[list[LedgerLine], list[Operation], Final]:
    """OTHER opened, running, held (rank 1 ended early), released: nothing yet after it."""
    ledger, ops, final = clean_history()
    ledger = [ln for ln in ledger if ln.job != OTHER]
    ledger += run(OTHER, 1, 1, 0, 50, 1000, status=143) + run(OTHER, 1, 1, 0, 50, 300, rank=1)
    ops += [op(8, OP_HOLD, OTHER, 900, 1100), op(9, "release", OTHER, 1500, 1600,
                                                   result="released", instance=1, wrong=False)]
    return ledger, ops, final


def test_a_released_job_that_never_runs_again_is_flagged() -> None:
    """Case 3 of issue 26: the readmission check waits for a finished rank forever, the job
    reserving its quota. The settle bound's reason excuses (c), not (g)."""
    ledger, ops, final = released()
    stuck = JobFinal(OTHER, state="admitting", quota_free=True,
                     reason="not finished when the settle bound (150 s) passed: admitting")
    v = judge(ledger, ops, Final(jobs=[final.jobs[0], stuck]))
    assert flagged(v) == {"g"}
    assert f"job {OTHER}: released by operation 9 at {T0 + 1_500_000} us" in v[7].message
    assert "state admitting, quota free True" in v[7].message
    assert {o.id for o in v[7].operations} == {8, 9}
    # Held again at the end without a hold since: the release did not take.
    held = JobFinal(OTHER, held=True, state="held")
    assert flagged(judge(ledger, ops, Final(jobs=[final.jobs[0], held]))) == {"g"}


def test_a_released_job_that_ran_again_or_says_why_not_passes() -> None:
    ledger, ops, final = released()
    again = ledger + run(OTHER, 1, 2, 0, 2000, 2500) + run(OTHER, 1, 2, 0, 2000, 2100, rank=1)
    assert flagged(judge(again, ops, final)) == set()
    full = Final(jobs=[final.jobs[0], JobFinal(OTHER, state="queued", quota_free=False,
                                              reason="not finished: queued")])
    v = judge(ledger, ops, full)
    assert flagged(v) == set()
    assert "the ClusterQueue had no room for it" in v[7].message
    # Held again, or stopped, after the release: not this property's.
    for later in (op(10, OP_HOLD, OTHER, 1700, 1800),
                  op(10, OP_STOP, OTHER, 1700, 1800, result={"alive": 0})):
        fin = Final(jobs=[final.jobs[0], JobFinal(OTHER, held=later.op == OP_HOLD,
                                                  find_empty=True, direct_list_empty=True)])
        assert "g" not in flagged(judge(ledger, [*ops, later], fin))
    # A wrong instance's release or one that found nothing held ends no hold.
    wrong = [o if o.id != 9 else Operation(**{**o.__dict__, "args": {"wrong": True}})
             for o in ops]
    fin = Final(jobs=[final.jobs[0], JobFinal(OTHER, held=True)])
    assert flagged(judge(ledger, wrong, fin)) == set()


def test_an_expired_hold_counts_as_a_release() -> None:
    ledger, ops, final = released()
    ops = [o for o in ops if o.id != 9]
    ops[-1] = op(8, OP_HOLD, OTHER, 900, 1100, until_s=3.0)  # expires at 3900 ms
    stuck = Final(jobs=[final.jobs[0], JobFinal(OTHER, state="queued", quota_free=True,
                                                reason="not finished: queued")])
    v = judge(ledger, ops, stuck)
    assert flagged(v) == {"g"}
    assert "the hold of operation 8 expired (3 s)" in v[7].message
    ran = ledger + run(OTHER, 1, 2, 0, 4000, 4500) + run(OTHER, 1, 2, 0, 4000, 4100, rank=1)
    assert flagged(judge(ran, ops, stuck)) == set()
    # Released before it expired: it must run after the release, not the expiry.
    early = [*ops, op(9, "release", OTHER, 1500, 1600, result="released")]
    soon = ledger + run(OTHER, 1, 2, 0, 2000, 2500) + run(OTHER, 1, 2, 0, 2000, 2100, rank=1)
    assert flagged(judge(soon, early, stuck)) == set()


def test_an_execution_that_outlived_a_short_hold_and_succeeded_passes() -> None:
    """A hold that expired before Kueue's eviction ended the pods: the execution ran on to
    exit 0 after the expiry, the job succeeded, nothing more has to run (a cluster run of
    seed 1865, 2026-12-05, flagged this before the rule said so)."""
    ledger, ops, final = released()
    ops = [o for o in ops if o.id != 9]
    ops[-1] = op(8, OP_HOLD, OTHER, 900, 1100, until_s=0.5)  # expires at 1400 ms
    ledger = [ln for ln in ledger if ln.job != OTHER]
    ledger += run(OTHER, 1, 1, 0, 50, 2000) + run(OTHER, 1, 1, 0, 50, 300, rank=1)
    done = Final(jobs=[final.jobs[0], JobFinal(OTHER, state="succeeded", quota_free=True)])
    v = judge(ledger, ops, done)
    assert flagged(v) == set()
    assert "succeeded, by an execution that outlived the hold" in v[7].message
    # Succeeded at the end but no execution ran to its end: still flagged.
    cut = [ln for ln in ledger if ln.job != OTHER]
    cut += run(OTHER, 1, 1, 0, 50, 1000, status=143) + run(OTHER, 1, 1, 0, 50, 300, rank=1)
    assert "g" in flagged(judge(cut, ops, done))

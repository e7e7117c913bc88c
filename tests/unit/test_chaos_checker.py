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
        status: int | None = 0, epoch: int | None = None, pid: int = 0) -> list[LedgerLine]:
    """One rank of one execution: a start line, beats every 100 ms, an exit line."""
    attempt = f"{job}.{sub}.1.{a}.{j}"
    ep = str(epoch if epoch is not None else sub * 1_000_000 + a + j)
    pid = pid or 1000 + 97 * a + 13 * j + rank
    times = [*range(start_ms, end_ms, 100), end_ms]
    kinds = ["start"] + ["beat"] * (len(times) - 2) + ["exit" if status is not None else "beat"]
    return [LedgerLine(kind=k, attempt=attempt, epoch=ep, pod=f"{job.lower()}-{a}-{j}-{rank}",
                       rank=str(rank), pid=pid, seq=n + 1, wall_us=T0 + t * 1000,
                       uptime_cs=UP0 + t // 10, status=status if k == "exit" else None,
                       started_us=T0 + start_ms * 1000)
            for n, (k, t) in enumerate(zip(kinds, times, strict=True))]


def op(id: int, kind: str, job: str, call_ms: int, ret_ms: int | None, *,
       error: str | None = None, result: object = None,
       deadline_ms: int | None = None) -> Operation:
    return Operation(id=id, op=kind, job=job, call_us=T0 + call_ms * 1000,
                     return_us=None if ret_ms is None else T0 + ret_ms * 1000,
                     result=result, error=error,
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
    assert f"{OTHER}.1.1.2.0 started" in a.message
    assert "100.000 ms before" in a.message
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
    assert "DISPATCH_EPOCH 1000001 -> 1000001" in v[2].message


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
    assert "FAIL (a) no two executions of a job overlap" in out
    assert "ok   (b)" in out
    assert "VIOLATION seed=4242 property (a)" in out
    assert "ledger lines around it:" in out
    assert f'"attempt":"{OTHER}.1.1.2.0"' in out


def test_a_torn_ledger_line_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "l.jsonl").write_text('{"kind":"start","attempt":"x.1.1.1.0","wall_us":1}\n'
                                      '{"kind":"beat","attem\n')
    with pytest.raises(ValueError, match=r"l\.jsonl:2"):
        read_ledger(tmp_path / "l.jsonl")

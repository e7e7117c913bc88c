"""The readmission protocol, model-checked: verify/readmission.pml through verify/run.py.

The protocol must verify exhaustively, with no error, on every path that makes a pod: the
gate alone (also with a GET of the Lease before each write, or with no leadership check at
all), ranks that finish early, JobSets re-made and restarted with the rebind and the pod
fence, a second attempt after StopJob (its JobSet maybe built from the first attempt's
runtime copy), a re-made Workload (of a held job too: the hold outlives it), a suspend that
reaches the Jobs late, the check removed from the ClusterQueue, and the webhook's judgement
and the pod's creation as two steps (with every pod gated until its start is judged). The
same model with one rule removed must produce a counterexample (docs/readmission-model.md).
Probes show that the new paths are not vacuous: each one's key step happens in some run.
Needs spin and gcc; skipped, saying so, when either is absent.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from verify import run

needs_spin = pytest.mark.skipif(
    bool(run.missing_tools()),
    reason=f"model check needs {' and '.join(run.missing_tools())} "
           "(Debian: apt-get install spin gcc)")

BUDGET = 120.0
"""Seconds the exhaustive check of one variant may take, spin and gcc included."""

MUST_VERIFY = ("fenced", "leaseconfirm", "noleader", "finish", "jobsets", "jobsets-norestart",
               "attempts", "remake", "checkremoval", "checkremoval-a", "staleruntime",
               "joblag", "gates", "earlytj-remake", "getfirst-remake", "getfirst-attempts")


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, run.Result]:
    """Every variant, checked once (as many at once as there are cores), each in its own
    temporary directory."""
    return {res.variant.name: res
            for res in run.check_all(run.VARIANTS, tmp_path_factory.mktemp("variants"))}


def _show(capsys: pytest.CaptureFixture[str], res: run.Result) -> None:
    with capsys.disabled():
        print("\n" + run.report(res))


def _fails(res: run.Result, props: set[str]) -> None:
    assert res.errors >= 1, res.output
    assert res.prop in props, res.assertion
    assert res.story, "the counterexample has no story"


@needs_spin
def test_the_protocol_verifies_exhaustively(results: dict[str, run.Result],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    res = results["fenced"]
    _show(capsys, res)
    assert res.errors == 0, res.output
    assert res.complete, f"the search was truncated:\n{res.output}"
    assert "max search depth too small" not in res.output
    assert res.states > 100_000
    assert res.depth > 0
    assert res.wall < BUDGET, f"took {res.wall:.1f} s, more than {BUDGET:.0f} s"


@needs_spin
def test_every_statement_of_the_model_is_reached(results: dict[str, run.Result]) -> None:
    """Not vacuous: every step of the model, 409s and crashes included, happens somewhere."""
    assert results["fenced"].unreached == []


@needs_spin
@pytest.mark.parametrize("name", [n for n in MUST_VERIFY if n not in ("fenced",)])
def test_every_path_that_makes_a_pod_verifies(name: str, results: dict[str, run.Result],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Ranks finishing early, JobSets re-made and restarted, a second attempt, a re-made
    Workload, the check removed: each exhaustively, within the budget, and (but for
    NOLEADER, whose 'not leading' branches cannot happen) every statement reached."""
    res = results[name]
    _show(capsys, res)
    assert res.errors == 0, res.output
    assert res.complete, f"the search was truncated:\n{res.output}"
    assert res.wall < BUDGET, f"took {res.wall:.1f} s, more than {BUDGET:.0f} s"
    if not run.variant(name).unreached_ok:
        assert res.unreached == []


@needs_spin
def test_without_the_fence_there_is_a_counterexample(
        results: dict[str, run.Result], capsys: pytest.CaptureFixture[str]) -> None:
    res = results["nofence"]
    _show(capsys, res)
    _fails(res, {"a", "b", "c"})
    assert any("writes the check Ready (no fence)" in step for step in res.story)


@needs_spin
def test_without_the_fence_two_executions_overlap(
        results: dict[str, run.Result], capsys: pytest.CaptureFixture[str]) -> None:
    """The stale decision: both replicas led, and a Ready written from an old read started
    an execution while a pod of the previous one was still there."""
    res = results["nofence-a"]
    _show(capsys, res)
    _fails(res, {"a"})
    for replica in ("r0", "r1"):
        assert f"{replica} acquires the lease" in res.story
    # the last step is the pod that starts while another execution's pod exists
    assert res.story[-1].startswith("a pod starts")
    assert "(0 pods exist)" not in res.story[-1]


@needs_spin
@pytest.mark.parametrize(("name", "props"), [("noevictguard", {"a", "c"}),
                                             ("tokeneq", {"b", "c"})])
def test_each_rule_of_the_protocol_is_needed(name: str, props: set[str],
                                             results: dict[str, run.Result],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    res = results[name]
    _show(capsys, res)
    _fails(res, props)


def test_the_variants_come_from_one_model() -> None:
    """Every switch is a preprocessor macro of verify/readmission.pml, and every macro a
    variant names is one the model reads."""
    model = Path(run.MODEL).read_text()
    directives = "\n".join(line for line in model.splitlines() if line.startswith("#"))
    for v in run.VARIANTS:
        for define in v.defines:
            macro = define.split("=")[0]
            assert re.search(rf"\b{macro}\b", directives), f"{v.name}: {macro} unused"
    for macro in ("NOFENCE", "NOEVICTGUARD", "TOKENEQ", "CACHEDPODS", "FINISHEDBLOCK",
                  "NOPODFENCE", "NOJOBSETRECORD", "NOATTEMPTBASE", "NOWLCONFIRM",
                  "CACHEDJOBSET", "RECORDNONE", "PODRACE", "NOHOLDRECORD", "CACHEDHOLDCOPY",
                  "NORELEASEWRITE", "RELEASEWLFIRST", "NOATTEMPTLABEL", "NOSUSPENDFENCE",
                  "NOSTARTA"):
        assert any(macro in v.defines for v in run.VARIANTS), macro
    assert run.variant("fenced").defines == ()
    assert {v.name for v in run.VARIANTS if not v.must_fail} == set(MUST_VERIFY)


@needs_spin
@pytest.mark.parametrize("name", ["leaseconfirm", "noleader"])
def test_the_lease_confirms_add_no_safety(name: str, results: dict[str, run.Result],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 11: with both writes fenced, a GET of the Lease before each write (the
    protocol's confirms before) verifies no more than the elector's own state does, and
    with no leadership check in the decision at all the properties still hold."""
    res = results[name]
    _show(capsys, res)
    assert res.errors == 0, res.output
    assert res.complete, f"the search was truncated:\n{res.output}"


@needs_spin
def test_the_pods_must_be_listed_live(results: dict[str, run.Result],
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The Workload and the TrainJob may come from a cache (their writes are fenced); the
    pods may not: a cache that has not seen the previous execution's pod approves."""
    res = results["cachedpods"]
    _show(capsys, res)
    _fails(res, {"a"})


@needs_spin
def test_a_finished_rank_must_not_block_readmission(
        results: dict[str, run.Result], capsys: pytest.CaptureFixture[str]) -> None:
    """Counting finished pods, the gate waits for a Succeeded rank that its suspended Job
    keeps until it is deleted: readmission would wait for ever."""
    res = results["finishedblock"]
    _show(capsys, res)
    _fails(res, {"d"})
    assert any("a rank finishes" in step for step in res.story)


@needs_spin
def test_without_the_pod_fence_a_remade_jobset_runs_beside_the_old_one(
        results: dict[str, run.Result], capsys: pytest.CaptureFixture[str]) -> None:
    res = results["nopodfence"]
    _show(capsys, res)
    _fails(res, {"a", "e"})
    assert any("someone deletes JobSet" in step for step in res.story)
    assert res.story[-1].startswith("a pod starts")
    assert "(0 pods exist)" not in res.story[-1]


@needs_spin
@pytest.mark.parametrize(("name", "props", "step"), [
    # no approved JobSet: a re-made JobSet runs with the same A and J = 0
    ("nojobsetrecord", {"c"}, "someone deletes JobSet"),
    # the rebind raising A by one: the re-made JobSet's J = 0 undoes the old one's restarts
    ("rebindbyone", {"c"}, "restarts: J = 1"),
    # the rebind from a stale JobSet cache: two replicas rebind back and forth
    ("cachedjobset", {"b", "c"}, "reads an older JobSet"),
    # the approval recording no JobSet: the webhook's check (1) is off until the next one
    ("recordnone", {"c"}, "the raise will record none"),
    # the epoch without the attempt's base: attempt 2 starts below attempt 1
    ("noattemptbase", {"c"}, "attempt 2 starts"),
    # no live GET of the Workload before the raise
    ("nowlconfirm", {"b"}, "attempt 2 starts"),
    ("nowlconfirm-remake", {"b"}, "re-makes the Workload"),
    # the check removed and no pod fence
    ("nocheckpodfence", {"e"}, "removes dispatch's check"),
    # the check removed and no token rule at the webhook: a readmission reruns the same
    # identity (what was the model's known limit checkremoval-a)
    ("nopodtoken", {"a"}, "removes dispatch's check"),
    # the hold on the Workload only: the re-made Workload of a held job is approved
    ("noholdrecord", {"f"}, "re-makes the Workload"),
    # the hold copy from a cache: a released hold comes back
    ("cachedholdcopy", {"g"}, "the TrainJob in its cache carries hold"),
    # the release not writing a re-made Workload: a copy judged before it lands after it
    ("noreleasewrite", {"g"}, "re-makes the Workload"),
    # the release reactivating the Workload first: the copy holds the job again
    ("releasewlfirst", {"g"}, "reactivates the Workload first"),
    # the epoch's attempt from the pod's label: a JobSet built from attempt 1's runtime
    # copy runs attempt 2 at attempt 1's base
    ("noattemptlabel", {"c"}, "built from attempt 1's runtime copy"),
    # pods of a suspended TrainJob admitted: a Job that has not seen the suspend runs a
    # pod under the A raised for the re-made Workload's admission, before it is admitted
    ("nosuspendfence", {"b", "c"}, "re-makes the Workload"),
    # ... and with no token rule either, a rank of the held job starts
    ("nosuspendfence-nopodtoken", {"h"}, "Kueue suspends the TrainJob"),
    # no scheduling gate: the webhook's reads are not the pod's write, and a pod admitted
    # before a readmission is stored, and runs, after the next execution's pod
    ("podrace", {"e"}, "the API server stores the pod admitted earlier"),
    # the gate, but its lift not judging the pod's own execution
    ("nostarta", {"c"}, "the late pod's gate is lifted"),
])
def test_each_rule_of_the_new_paths_is_needed(name: str, props: set[str], step: str,
                                              results: dict[str, run.Result],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    _fails_at(results[name], props, step, capsys)


def _fails_at(res: run.Result, props: set[str], step: str,
              capsys: pytest.CaptureFixture[str]) -> None:
    """The variant fails one of ``props``, and its trail passes through ``step``."""
    _show(capsys, res)
    _fails(res, props)
    assert any(step in s for s in res.story), res.story


# --- probes: an assert(false) at a step of a new path must be reached -----------------
PROBES = {
    # the rebind raises A for a re-made JobSet
    "rebind": ("jobsets", "rebound[TOKIX(tokw, tok) * NJS + js_r] = 1;",
               " assert(false);", False),
    # the webhook refuses a pod of a job that was admitted through the gate
    "refusal": ("jobsets", "#ifdef FINISH\n  /* the kubelet: a terminating",
                "  :: d_step { !suspended && ncreated < NPOD && JS_READY && !POD_OK && A > 0 "
                "-> assert(false) }\n", True),
    # a pod of JobSet restart J = 1 starts
    "restart": ("jobsets", "                nrun++; ncreated++; al_cur = true;",
                "                assert(J == 0);\n", True),
    # after a rank finished, the job resumes and runs only the other rank
    "resume": ("jobsets", "                nrun++; ncreated++; al_cur = true;",
               "                assert(!(rfirst == false && nfin > 0 && ncreated == 1 "
               "&& r_A > 1));\n", True),
    # the live GET of the Workload finds another one, after StopJob and after a re-make
    "wlcheck-attempt": ("attempts", 'FORGET; printf("MSC: r%d GETs the Workload',
                        "assert(false); ", True),
    "wlcheck-remake": ("remake", 'FORGET; printf("MSC: r%d GETs the Workload',
                       "assert(false); ", True),
    # Kueue admits without the check, and a pod starts (one the gate approved before)
    "ungated": ("checkremoval", "                nrun++; ncreated++; al_cur = true;",
                "                assert(gated || A == 0);\n", True),
    # the Workload of a held job is re-made; the leader declines to approve the new one, as
    # its TrainJob carries the hold; and copies the hold onto it
    "heldremake": ("remake", "nremake++; wuid++;", "assert(uphase != U_HELD); ", True),
    "heldrefusal": ("remake", "FORGET;             /* held: never approved */",
                    "assert(wuid == 0); ", True),
    "holdcopy": ("remake", "wl_hold = hc_r; WL_WRITE;", "assert(wuid == 0); ", True),
    # attempt 2's JobSet built from attempt 1's runtime copy would make a pod: refused
    "stalerefusal": ("staleruntime", "#ifdef FINISH\n  /* the kubelet: a terminating",
                     "  :: d_step { !suspended && ncreated < NPOD && JS_READY && A > 0 "
                     "&& js_att != att -> assert(false) }\n", True),
    # a Job that has not seen the suspend would make a pod, of a job the gate admitted:
    # refused
    # the late pod, stored gated, starts once the lift is judged; and one of an execution
    # that is over is there, gated, while another execution runs
    "lift": ("gates", "                nrun++; al_cur = G_CURRENT; gst = false;",
             "                assert(false);\n", True),
    "staleliftrefused": ("gates", "#ifdef FINISH\n  /* the kubelet: a terminating",
                         "  :: d_step { gst && !G_CURRENT && NALIVE > 0 -> assert(false) }\n",
                         True),
    "lagrefusal": ("joblag", "#ifdef FINISH\n  /* the kubelet: a terminating",
                   "  :: d_step { jlag && ncreated < NPOD && JS_READY && A > 0 "
                   "-> assert(false) }\n", True),
}


@needs_spin
@pytest.mark.parametrize("probe", sorted(PROBES))
def test_the_new_paths_are_not_vacuous(probe: str, tmp_path: Path) -> None:
    name, anchor, text, before = PROBES[probe]
    model = Path(run.MODEL).read_text()
    assert anchor in model, anchor
    probed = model.replace(anchor, text + anchor if before else anchor + text, 1)
    variant = run.variant(name)
    res = run.check(run.Variant(f"probe-{probe}", variant.defines, True, probe, bfs=True),
                    tmp_path, model=probed)
    assert res.errors >= 1, f"{probe}: never reached\n{res.output}"

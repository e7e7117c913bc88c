"""The worker permit across clusters, model-checked: verify/multikueue.pml through
verify/run.py (its MK_VARIANTS).

A Kueue manager dispatches one job through MultiKueue to one of two workers, and again when
the one it ran on is lost; each worker's agent renews a permit in the manager, and each pod
fences itself when its share of the permit runs out (docs/multikueue-fence.md). The
protocol must verify exhaustively, with no error and every statement reached, also with two
cuts, with twice the drift, and (with no drift) with no margin. Each rule removed must give
a counterexample, told by the model's MSC lines: without the self-fence, the cut-off
worker's pod runs beside the execution dispatched again to the other worker. Probes show
that the branches inside the model's atomic steps are taken in some run. Needs spin and
gcc; skipped, saying so, when either is absent.
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

MUST_VERIFY = ("mk-permit", "mk-twocuts", "mk-drift2", "mk-nodrift-nomargin", "mk-tworeads",
               "mk-tworeads-tjfirst")
RULES = ("NOSELFFENCE", "NOREVOKE", "NOMARGIN", "LATESTART", "NOCONFIRM", "DELETEREMOTES",
         "REGRANTANY")
"""The model's switches that take a rule of the permit away."""
BOUNDS = ("PERMIT", "DRIFT", "WORKER_LOST", "MAXCUT", "MAXA")
DOC = run.MK_MODEL.parents[1] / "docs" / "multikueue-fence.md"


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, run.Result]:
    """Every variant of the model, checked once (as many at once as there are cores), each in
    its own temporary directory."""
    return {res.variant.name: res
            for res in run.check_all(run.MK_VARIANTS, tmp_path_factory.mktemp("variants"))}


def _show(capsys: pytest.CaptureFixture[str], res: run.Result) -> None:
    with capsys.disabled():
        print(f"\n{run.report(res)}\n  memory {res.memory_mb:g} MB")


def _index(story: list[str], pattern: str, start: int = 0) -> int:
    """The first step at or after ``start`` that matches ``pattern`` (from its start)."""
    for n, step in enumerate(story[start:], start):
        if re.match(pattern, step):
            return n
    raise AssertionError(f"no step matches {pattern!r}:\n" + "\n".join(story))


@needs_spin
@pytest.mark.parametrize("name", MUST_VERIFY)
def test_the_permit_verifies_exhaustively(name: str, results: dict[str, run.Result],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """No error, a complete search within the budget and the memory bound, and every
    statement of the model executed in some run."""
    res = results[name]
    _show(capsys, res)
    assert res.errors == 0, res.output
    assert res.complete, f"the search was truncated:\n{res.output}"
    assert res.states > 500_000
    assert res.unreached == []
    assert 0 < res.memory_mb < run.MEMLIM_MB
    assert res.wall < BUDGET, f"took {res.wall:.1f} s, more than {BUDGET:.0f} s"


@needs_spin
def test_without_the_self_fence_two_executions_run_at_once(
        results: dict[str, run.Result], capsys: pytest.CaptureFixture[str]) -> None:
    """The one the design is for: a worker is cut off while its pod runs, MultiKueue finds
    it lost and, once the manager has revoked its permit, the gate approves again and
    MultiKueue dispatches to the other worker, whose pod starts while the first one's
    still runs."""
    res = results["mk-noselffence"]
    _show(capsys, res)
    assert res.errors >= 1, res.output
    assert res.prop == "a", res.assertion
    story = res.story
    first = _index(story, r"w(\d)'s pod of A = 1 starts its workload")
    lost_worker = re.match(r"w(\d)", story[first])
    assert lost_worker
    x = lost_worker.group(1)
    y = str(1 - int(x))
    cut = _index(story, rf"the link to w{x} is cut$", first)
    lost = _index(story, rf"MultiKueue: w{x} lost", cut)
    revoked = _index(story, rf"the manager revokes w{x}'s permit", lost)
    approved = _index(story, r"the gate approves: A = 2", revoked)
    dispatched = _index(story, rf"MultiKueue dispatches the job to w{y}: .*A = 2$", approved)
    assert dispatched < len(story) - 1
    assert re.match(rf"w{y}'s pod of A = 2 starts its workload .*, while w{x}'s pod of "
                    r"A = 1 runs$", story[-1]), story[-1]
    assert not any(re.match(rf"w{x}'s pod of A = 1 .*(kills|ends)", step)
                   for step in story[first:]), story


@needs_spin
@pytest.mark.parametrize(("name", "before", "after"), [
    # the gate takes the wait for revocation; a renewal sent before the cut lands after the
    # approval, and the cut-off worker holds its permit again
    ("mk-norevoke", r"the gate approves: A = 2", r"w\d's renewal lands \(sent"),
    # the manager's wait, short by its clock, ends while the slow worker clock still holds
    ("mk-nomargin", r"the manager revokes w\d's permit", r"w\d's pod of A = 1 starts"),
    # a reply that arrives after the cut starts the permit from its arrival
    ("mk-latestart", r"the link to w\d is cut", r"w\d's agent gets the reply"),
    # the design as first written: a remote left on a worker that comes back makes a pod
    ("mk-noconfirm", r"the gate approves: A = 2", r"w\d's webhook admits a pod of A = 1"),
    # deleting remotes does not do instead: one made after the deletion is left behind
    ("mk-deleteremotes", r"w\d's agent finds no remote TrainJob to delete",
     r"MultiKueue dispatches the job to w\d: .*A = 1$"),
    # the grant again with a pod left that was confirmed before the readmission
    ("mk-regrantany", r"the gate approves: A = 2", r"w\d has no dispatch pod: the manager "
     r"grants its permit again"),
])
def test_each_rule_of_the_permit_is_needed(name: str, before: str, after: str,
                                           results: dict[str, run.Result],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A counterexample of (a) or (c), whose trail passes ``before`` and later ``after``,
    and ends with a pod of an older execution, or a second one, starting."""
    res = results[name]
    _show(capsys, res)
    assert res.errors >= 1, res.output
    assert res.prop in {"a", "c"}, res.assertion
    assert res.story, "the counterexample has no story"
    _index(res.story, after, _index(res.story, before) + 1)
    assert re.match(r"w\d's pod of A = \d starts its workload", res.story[-1]), res.story


def test_the_variants_come_from_one_model() -> None:
    """Every switch is a preprocessor macro of verify/multikueue.pml, every rule is taken
    away by some variant, and every assertion is labelled with a property."""
    model = run.MK_MODEL.read_text()
    directives = "\n".join(line for line in model.splitlines() if line.startswith("#"))
    for v in run.MK_VARIANTS:
        assert v.model == run.MK_MODEL.name
        assert v.name.startswith("mk-")
        for define in v.defines:
            macro = define.split("=")[0]
            assert re.search(rf"\b{macro}\b", directives), f"{v.name}: {macro} unused"
        takes_a_rule = any(d in RULES for d in v.defines)
        assert v.must_fail == (takes_a_rule and v.name != "mk-nodrift-nomargin"), v.name
    for macro in RULES + BOUNDS:
        assert re.search(rf"\b{macro}\b", directives), macro
    for macro in RULES:
        assert any(macro in v.defines for v in run.MK_VARIANTS if v.must_fail), macro
    assert run.variant("mk-permit").defines == ()
    assert {v.name for v in run.MK_VARIANTS if not v.must_fail} == set(MUST_VERIFY)
    assert not {v.name for v in run.VARIANTS} & {v.name for v in run.MK_VARIANTS}
    assert run.ALL_VARIANTS == run.VARIANTS + run.MK_VARIANTS
    labels = re.findall(r"assert\(.*\);\s*/\* \(([a-z])\) \*/", model)
    assert sorted(set(labels)) == sorted(run.MK_PROPERTIES)


def test_the_clock_assumptions_and_the_model_are_told() -> None:
    """The model's header states the clock assumptions; the design's page has a section on
    the model that names every switch and bound."""
    header = run.MK_MODEL.read_text().split("*/", 1)[0]
    for words in ("No synchronized clocks", "Bounded drift", "Message delays are unbounded"):
        assert words in header
    doc = DOC.read_text()
    assert "\n## The model\n" in doc
    section = doc.split("\n## The model\n", 1)[1]
    for macro in RULES + BOUNDS:
        assert macro in section, macro
    for v in run.MK_VARIANTS:
        assert f"`{v.name}`" in section, v.name


# --- probes: an assertion in a branch inside an atomic step must fail somewhere -------
PROBES = {
    # the agent's read finds the pod's A passed, or the job dispatched elsewhere
    "stale": ("-> pod[w] = NOPOD;\n", "-> pod[w] = NOPOD; assert(false);\n"),
    # the agent holds no permit when it answers
    "nopermit": ("printf(\"MSC: w%d's agent holds no permit",
                 "assert(false); printf(\"MSC: w%d's agent holds no permit"),
    # a renewal lands on the revoked permit, and the manager grants it again later
    "conflict": ("ag[w] = REPLY_409;", "ag[w] = REPLY_409; assert(false);"),
    "regrant": ("revoked[w] = false; mt[w] = REVWAIT - DRIFT;",
                "revoked[w] = false; assert(false); mt[w] = REVWAIT - DRIFT;"),
    # the gate approves a second time, on w0's revoked permit, and with both workers listed
    "revokedgate": ("-> SAID_W0\n", "-> SAID_W0; assert(A < 2)\n"),
    "listedgate": ("printf(\"MSC: the gate approves: A = %d, check Ready (w0 and w1 list",
                   "assert(A < 2); printf(\"MSC: the gate approves: A = %d, check Ready "
                   "(w0 and w1 list"),
    # a pod's share renewed, and its fence fired
    "share": ("printf(\"MSC: w%d's pod renews its share",
              "assert(false); printf(\"MSC: w%d's pod renews its share"),
    "fence": ("printf(\"MSC: w%d's pod of A = %d: its share ran out",
              "assert(false); printf(\"MSC: w%d's pod of A = %d: its share ran out"),
}


@needs_spin
@pytest.mark.parametrize("probe", sorted(PROBES))
def test_the_branches_are_not_vacuous(probe: str, tmp_path: Path) -> None:
    anchor, text = PROBES[probe]
    model = run.MK_MODEL.read_text()
    assert model.count(anchor) == 1, anchor
    base = run.variant("mk-permit")
    res = run.check(run.Variant(f"probe-{probe}", base.defines, True, probe, bfs=True,
                                model=base.model), tmp_path, model=model.replace(anchor, text))
    assert res.errors >= 1, f"{probe}: never reached\n{res.output}"

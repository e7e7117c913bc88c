"""The readmission protocol, model-checked: verify/readmission.pml through verify/run.py.

The protocol must verify exhaustively, with no error, in under two minutes, and so must
its variants with a GET of the Lease before each write or no leadership check at all; the
same model with the fence removed must produce a counterexample, and so must the variants
that drop the eviction guard, order the token by equality or count the pods from a cache
(docs/readmission-model.md).
Needs spin and gcc; skipped, saying so, when either is absent.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from verify import run

needs_spin = pytest.mark.skipif(
    bool(run.missing_tools()),
    reason=f"model check needs {' and '.join(run.missing_tools())} "
           "(Debian: apt-get install spin gcc)")

BUDGET = 120.0
"""Seconds the exhaustive check of the protocol may take, spin and gcc included."""


def _variant(name: str) -> run.Variant:
    return next(v for v in run.VARIANTS if v.name == name)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, run.Result]:
    """Every variant, checked once, each in its own temporary directory."""
    return {v.name: run.check(v, tmp_path_factory.mktemp(v.name)) for v in run.VARIANTS}


def _show(capsys: pytest.CaptureFixture[str], res: run.Result) -> None:
    with capsys.disabled():
        print("\n" + run.report(res))


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
def test_without_the_fence_there_is_a_counterexample(
        results: dict[str, run.Result], capsys: pytest.CaptureFixture[str]) -> None:
    res = results["nofence"]
    _show(capsys, res)
    assert res.errors >= 1, res.output
    assert res.prop in {"a", "b", "c"}, res.assertion
    assert any("writes the check Ready (no fence)" in step for step in res.story)


@needs_spin
def test_without_the_fence_two_executions_overlap(
        results: dict[str, run.Result], capsys: pytest.CaptureFixture[str]) -> None:
    """The stale decision: both replicas led, and a Ready written from an old read started
    an execution while a pod of the previous one was still there."""
    res = results["nofence-a"]
    _show(capsys, res)
    assert res.errors >= 1, res.output
    assert res.prop == "a", res.assertion
    for replica in ("r0", "r1"):
        assert f"{replica} acquires the lease" in res.story
    # the last step is the pod that starts while another execution's pod exists
    assert res.story[-1].startswith("a pod of execution")
    assert "(0 pods exist)" not in res.story[-1]


@needs_spin
@pytest.mark.parametrize(("name", "props"), [("noevictguard", {"a", "c"}),
                                             ("tokeneq", {"b", "c"})])
def test_each_rule_of_the_protocol_is_needed(name: str, props: set[str],
                                             results: dict[str, run.Result],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    res = results[name]
    _show(capsys, res)
    assert res.errors >= 1, res.output
    assert res.prop in props, res.assertion


def test_the_variants_come_from_one_model() -> None:
    """NOFENCE and the others are preprocessor switches of verify/readmission.pml."""
    model = Path(run.MODEL).read_text()
    for macro in ("NOFENCE", "NOEVICTGUARD", "TOKENEQ", "CACHEDPODS"):
        assert f"#ifdef {macro}" in model
        assert any(macro in v.defines for v in run.VARIANTS)
    assert _variant("fenced").defines == ()


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
    assert res.errors >= 1, res.output
    assert res.prop == "a", res.assertion

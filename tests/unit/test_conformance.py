"""The conformance suite's pure parts: the registry, identities, the release watch's verdict,
the summary."""

from __future__ import annotations

import asyncio
import inspect
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest

from dispatch_kubeflow import conformance, errors
from dispatch_kubeflow.backend import Backend
from dispatch_kubeflow.conformance import CHECKS, CheckResult, Options, Summary
from dispatch_kubeflow.conformance.__main__ import main, parser
from dispatch_kubeflow.conformance.checks import all_checks
from dispatch_kubeflow.conformance.checks.overlap import Mark, ReleaseWatch, _until_set
from dispatch_kubeflow.conformance.failed import CheckFailed
from dispatch_kubeflow.conformance.identity import Identity
from dispatch_kubeflow.conformance.registry import check
from dispatch_kubeflow.conformance.suite import Suite
from dispatch_kubeflow.conformance.watching import in_state, quiet, until
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r
from dispatch_kubeflow.kube.transport import WatchEvent
from dispatch_kubeflow.model import JobID, ObjectRef, ObjectState

pytestmark = pytest.mark.virtual_time

JOB = JobID("01J0000000000000000000000A")
REPO = Path(__file__).resolve().parents[2]


def pod(uid: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": f"pod-{uid}", "resourceVersion": rv}}


def workload(rv: str, state: str, reserved: bool, message: str = "") -> dict[str, Any]:
    return {"metadata": {"resourceVersion": rv}, "status": {
        "admissionChecks": [{"name": "dispatch-admission", "state": state, "message": message}],
        "conditions": [{"type": "QuotaReserved", "status": "True" if reserved else "False"}]}}


def test_identity_from_a_log() -> None:
    log = (f"DISPATCH_ATTEMPT={JOB}.1.1.2.0\nDISPATCH_EPOCH=1000002\nDISPATCH_JOB_ID={JOB}\n"
           "DISPATCH_SUBMISSION=1\nconformance-ready\n")
    ident = Identity.parse(log, JOB)
    assert (ident.admissions, ident.restarts, ident.epoch) == (2, 0, 1000002)
    with pytest.raises(CheckFailed):
        Identity.parse("conformance-ready\n", JOB)
    with pytest.raises(CheckFailed):
        Identity.parse(log.replace(f"{JOB}.1.1", "OTHER.1.1"), JOB)
    for bad in (f"{JOB}.1.2.2.0", f"{JOB}.1.1.x.0", f"{JOB}.1.1.2"):  # attempt 2, unreadable
        with pytest.raises(CheckFailed, match="is not"):
            Identity.parse(log.replace(f"{JOB}.1.1.2.0", bad), JOB)


def test_marks_order_by_resource_version_else_arrival() -> None:
    assert Mark("20", 1).after(Mark("10", 2))
    assert not Mark("10", 9).after(Mark("20", 1))
    assert Mark("", 3).after(Mark("20", 2))


def released_watch() -> ReleaseWatch:
    w = ReleaseWatch("dispatch-admission")
    w.on_pods("SYNC", {}, (pod("a", "5"), pod("b", "6")))
    w.on_workload("SYNC", {}, (workload("7", "Pending", False),))
    w.released = True
    return w


def test_approval_after_the_last_old_pod_is_no_overlap() -> None:
    w = released_watch()
    w.on_workload("MODIFIED", workload("8", "Pending", True, "waiting for 2 pods of the "
                                                             "previous execution to go"), ())
    w.on_pods("DELETED", pod("a", "9"), ())
    w.on_pods("DELETED", pod("b", "10"), ())
    w.on_workload("MODIFIED", workload("11", "Ready", True), ())
    assert w.approval == Mark("11", w.approval.seq if w.approval else 0)
    assert w.old_left == []
    assert w.overlap() == []
    assert w.messages == ["waiting for 2 pods of the previous execution to go"]


def test_approval_while_an_old_pod_exists_is_overlap() -> None:
    w = released_watch()
    w.on_pods("DELETED", pod("a", "9"), ())
    w.on_workload("MODIFIED", workload("10", "Ready", True), ())
    w.on_pods("DELETED", pod("b", "11"), ())
    assert w.overlap() == ["pod-b"]


def test_a_late_watch_event_is_judged_by_resource_version() -> None:
    """The workload event arrives first, but the pod was deleted at an earlier revision."""
    w = released_watch()
    w.on_workload("MODIFIED", workload("12", "Ready", True), ())
    w.on_pods("DELETED", pod("a", "9"), ())
    w.on_pods("DELETED", pod("b", "10"), ())
    assert w.overlap() == []


def test_ready_without_quota_is_not_an_approval() -> None:
    w = released_watch()
    w.on_workload("MODIFIED", workload("8", "Ready", False), ())
    assert w.approval is None


def test_summary_line() -> None:
    results = [CheckResult(name, True, "ok") for name, _ in CHECKS]
    assert Summary(tuple(results)).line == f"{len(CHECKS)} passed, 0 failed"
    assert Summary(tuple(results)).ok
    mixed = [CheckResult("preflight", False, "no"),
             *(CheckResult(name, None, "not run") for name, _ in CHECKS[1:])]
    s = Summary(tuple(mixed))
    assert s.line == f"0 passed, 1 failed, {len(CHECKS) - 1} not run"
    assert not s.ok
    assert mixed[0].line == "FAIL preflight: no"
    assert not Summary(tuple(results), ("Namespace x was still there",)).ok


def test_command_line() -> None:
    args = parser().parse_args(["--kubeconfig", "/k", "--namespace", "ns", "--keep-going"])
    assert (args.kubeconfig, args.namespace, args.keep_going) == ("/k", "ns", True)


def test_a_kubeconfig_it_cannot_read_is_one_setup_failure(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--kubeconfig", str(tmp_path / "missing")]) == 3
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("FAIL setup: SettingsError: cluster.kubeconfig: no such file")
    assert out[1:] == [f"0 passed, 0 failed, {len(CHECKS)} not run"]


def test_an_unreachable_cluster_is_one_setup_failure_within_its_timeout(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 29: it stayed silent for 29 s, then printed the same connection error seven
    times and "0 passed, 7 failed"."""
    kc = tmp_path / "kubeconfig"
    kc.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n")
    started = time.monotonic()
    assert main(["--kubeconfig", str(kc), "--setup-timeout", "2"]) == 3
    took = time.monotonic() - started
    out = capsys.readouterr().out.splitlines()
    fails = [line for line in out if line.startswith("FAIL")]
    assert len(fails) == 1, out
    assert fails[0].startswith("FAIL setup: ")
    assert "127.0.0.1" in fails[0] or "reaching the cluster" in fails[0], fails[0]
    assert out[-1] == f"0 passed, 0 failed, {len(CHECKS)} not run"
    assert took < 10, took


# --- the registry: one list of checks, and the documents that list them ------------------------


def documented_checks() -> list[tuple[str, str]]:
    """The table of docs/conformance.md's "What it checks": (check, guarantee) per row."""
    text = (REPO / "docs" / "conformance.md").read_text()
    section = text.split("\n## What it checks\n", 1)[1].split("\n## ", 1)[0]
    return [(m[1], m[2].strip()) for m in re.finditer(r"^\| `([a-z-]+)` \| ([^|]+) \|",
                                                     section, re.MULTILINE)]


def test_the_registry_is_the_documented_list_in_order() -> None:
    registered = [(c.name, c.guarantee) for c in all_checks()]
    assert registered == documented_checks()
    assert list(CHECKS) == registered
    # The package docstring's numbered list too: the order a reader of the API page sees.
    numbered = re.findall(r"^\d+\. ``([a-z-]+)``", conformance.__doc__ or "", re.MULTILINE)
    assert numbered == [name for name, _ in registered]
    # and the command's help.
    epilog = parser().epilog or ""
    assert [line.split()[0] for line in epilog.splitlines()[1:]] == numbered


def test_every_check_is_registered_where_it_is_defined() -> None:
    """Each check's code lives in a module of conformance.checks, not in a list elsewhere."""
    for c in all_checks():
        assert c.run.__module__.startswith("dispatch_kubeflow.conformance.checks."), c
        assert inspect.iscoroutinefunction(c.run), c


def test_a_name_registered_twice_is_refused() -> None:
    async def again(suite: Suite) -> str:
        return ""

    with pytest.raises(ValueError, match="registered twice"):
        check("stop", "another stop")(again)
    assert [c.name for c in all_checks()].count("stop") == 1


# --- waits by watches: what a wait that runs out says ------------------------------------------


class FakeKube:
    """Just enough of Kube for the job's watches: one list per kind, then silence."""

    def __init__(self, *, silent: bool = False, **lists: list[dict[str, Any]]) -> None:
        self.silent = silent
        self.lists = lists

    async def observe(self, res: r.Resource, namespace: str | None = None,
                      **_: Any) -> AsyncIterator[WatchEvent]:
        if not self.silent:
            yield WatchEvent("SYNC", {}, tuple(self.lists.get(res.plural, [])))
        await asyncio.Event().wait()


REF = ObjectRef("ns", "tj", uid="u1")


def suite_of(kube: FakeKube) -> Suite:
    suite = Suite(Options(), cast(Kube, kube), "ns")
    suite.backend = cast(Backend, object())
    suite.job, suite.ref = JOB, REF
    return suite


# A wait that must run out its limit proves its message only if the fake's lists were read
# before the limit: a loaded machine (a GC pause, a busy CI worker) can stall the loop for
# longer than a short limit, and then "never listed" is the right answer to a different
# question. Such a try is repeated with a ten times longer limit; a wrong message still fails.
LIMITS = (0.1, 1.0, 10.0)


@pytest.mark.asyncio
async def test_a_wait_that_runs_out_says_what_it_saw_last() -> None:
    for limit in LIMITS:
        with pytest.raises(CheckFailed) as err:
            await until(suite_of(FakeKube()), "the job running", limit,
                        in_state(ObjectState.RUNNING))
        if "never listed" not in str(err.value):
            break
    assert str(err.value) == (f"never saw the job running within {limit:g}s; last seen: "
                              "gone (TrainJob not found), 0 pods")


@pytest.mark.asyncio
async def test_quiet_passes_only_on_what_it_watched() -> None:
    for limit in LIMITS:
        try:
            await quiet(suite_of(FakeKube()), limit, ObjectState.GONE)
            break
        except CheckFailed as exc:
            if "never listed" not in str(exc) or limit == LIMITS[-1]:
                raise
    with pytest.raises(CheckFailed, match=r"^pod p0 was created$"):  # ends at the first list
        await quiet(suite_of(FakeKube(pods=[{"metadata": {"name": "p0", "uid": "p"}}])),
                    LIMITS[-1], ObjectState.GONE)
    with pytest.raises(CheckFailed, match=r"never listed within 0\.1s"):
        await quiet(suite_of(FakeKube(silent=True)), 0.1, ObjectState.GONE)


@pytest.mark.asyncio
async def test_a_watch_that_dies_fails_the_wait_at_once() -> None:
    """The no-overlap watches: a dead one is the failure, not a silent 180 s timeout."""
    async def dies() -> None:
        raise errors.KubeForbidden("pods is forbidden", status=403, reason="Forbidden")

    watch = asyncio.create_task(dies())
    with pytest.raises(errors.KubeForbidden):
        await asyncio.wait_for(_until_set(asyncio.Event(), [watch]), 5)

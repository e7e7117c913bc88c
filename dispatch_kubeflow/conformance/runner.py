"""Running the checks in order, and what a run reports: a line per check and a summary."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from dispatch_kubeflow import errors
from dispatch_kubeflow.conformance.checks import all_checks
from dispatch_kubeflow.conformance.failed import CheckFailed
from dispatch_kubeflow.conformance.fixtures import Made, clean_up, make_queues
from dispatch_kubeflow.conformance.options import Options
from dispatch_kubeflow.conformance.suite import Suite
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.waits import deadline_after, within


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check's outcome: ``passed`` None when it was not run."""

    name: str
    """The check's name (``preflight``, ``start-gated``, ...)."""
    passed: bool | None
    """True: passed; False: failed; None: not run."""
    detail: str
    """What it saw, or why it failed or was not run."""
    seconds: float = 0.0
    """How long it took."""

    @property
    def line(self) -> str:
        """``PASS <check>: <detail>`` (``FAIL``, ``SKIP``), as the command prints it."""
        word = {True: "PASS", False: "FAIL", None: "SKIP"}[self.passed]
        return f"{word} {self.name}: {self.detail}"


@dataclass(frozen=True, slots=True)
class Summary:
    """Every check's result and what cleaning up could not do."""

    results: tuple[CheckResult, ...]
    """Every check's result, in the order they run."""
    cleanup_problems: tuple[str, ...] = ()
    """What cleaning up could not remove (each counts as a failure)."""
    namespace: str = ""
    """The namespace the suite used."""
    setup: str = ""
    """Why the suite could not be set up (the cluster unreachable, a prerequisite missing):
    then no check ran."""

    @property
    def passed(self) -> int:
        """How many checks passed."""
        return sum(1 for c in self.results if c.passed is True)

    @property
    def failed(self) -> int:
        """How many checks failed, plus the clean-up's problems."""
        return sum(1 for c in self.results if c.passed is False) + len(self.cleanup_problems)

    @property
    def not_run(self) -> int:
        """How many checks were not run."""
        return sum(1 for c in self.results if c.passed is None)

    @property
    def ok(self) -> bool:
        """Whether the suite was set up, every check passed and the clean-up had no problem."""
        return (not self.setup and self.failed == 0 and self.not_run == 0
                and self.passed == len(all_checks()))

    @property
    def line(self) -> str:
        """The closing line: ``N passed, N failed`` (and ``, N not run``)."""
        text = f"{self.passed} passed, {self.failed} failed"
        return text + (f", {self.not_run} not run" if self.not_run else "")


async def run(options: Options, *, out: Callable[[str], None] = print) -> Summary:
    """Run every check against the cluster; print a line per check; clean up; summarise.

    Cancelling the task (Ctrl-C in the command) stops the checks and still cleans up.
    A check that fails, and a cluster that cannot be reached or set up, are reported in the
    summary, not raised.

    Args:
        options: What to run against (kubeconfig, namespace, runtime, image, ...).
        out: Where each line goes (``PASS``/``FAIL``/``SKIP`` and the closing line).

    Returns:
        Every check's result, what cleaning up could not do, and why the suite could not
            be set up, if it could not (``ok`` says whether all passed).

    Raises:
        SettingsError: The kubeconfig (``options.kubeconfig``, ``options.context``) cannot
            be loaded.
    """
    ns = options.namespace or f"dk-conformance-{uuid.uuid4().hex[:8]}"
    results: list[CheckResult] = []
    kube = await Kube.connect(kubeconfig=options.kubeconfig, context=options.context,
                              request_timeout=30)
    made: Made = []
    suite: Suite | None = None
    problems: list[str] = []
    setup = ""
    try:
        try:
            # Bounded: an unreachable cluster is retried as a transient failure, which
            # would otherwise take the whole transient window, silently.
            async with within(deadline_after(options.setup_timeout),
                              f"reaching the cluster and making namespace {ns}"):
                await make_queues(kube, ns, options, made)
        except (CheckFailed, errors.DispatchError) as exc:
            # Nothing can be checked without the queues: one setup failure, no check run.
            setup = f"{type(exc).__name__}: {exc}" if isinstance(exc, errors.DispatchError) \
                else str(exc)
            results.extend(CheckResult(c.name, None, "not run: the setup failed")
                           for c in all_checks())
        else:
            out(f"conformance: namespace {ns}, ClusterQueue {ns}, LocalQueue {ns}/lq")
            suite = Suite(options, kube, ns)
            await _run_checks(suite, options, results, out)
    except asyncio.CancelledError:
        out("conformance: interrupted; cleaning up")
        raise
    finally:
        try:
            problems = await clean_up(suite, kube, made, out)
        finally:
            await kube.close()
        for p in problems:
            out(f"FAIL cleanup: {p}")
        if made and not problems:
            out(f"conformance: removed namespace {ns} and ClusterQueue {ns}")
    return Summary(tuple(results), tuple(problems), ns, setup)


async def _run_checks(suite: Suite, options: Options, results: list[CheckResult],
                      out: Callable[[str], None]) -> None:
    failed = False
    for c in all_checks():
        if failed and not options.keep_going:
            results.append(CheckResult(c.name, None, "not run: an earlier check failed"))
            out(results[-1].line)
            continue
        start = time.monotonic()
        try:
            detail = await c.run(suite)
            res = CheckResult(c.name, True, detail, time.monotonic() - start)
        except CheckFailed as exc:
            res = CheckResult(c.name, False, str(exc), time.monotonic() - start)
        except errors.DispatchError as exc:
            res = CheckResult(c.name, False, f"{type(exc).__name__}: {exc}",
                              time.monotonic() - start)
        except TimeoutError as exc:
            res = CheckResult(c.name, False, f"timed out: {exc or type(exc).__name__}",
                              time.monotonic() - start)
        failed = failed or not res.passed
        results.append(res)
        out(res.line)

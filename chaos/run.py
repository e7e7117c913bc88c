"""One run (``chaos.runner``'s steps 2 to 5): its objects, its jobs started, its schedule of
operations and faults, the end, the judging, and its record (:class:`RunResult`)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import shutil
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.checker import executions, judge
from chaos.end import cleanup, observe_final, settle
from chaos.faults import Faults
from chaos.history import OP_START, Final, read_ledger, write_final
from chaos.objects import backend_settings, job_request, setup
from chaos.operations import JobState, Operations
from chaos.plan import MIX, Step, make_plan
from chaos.recorder import DEADLINES, Recorder, now_us
from chaos.report import format_verdicts
from dispatch_kubeflow import Backend, JobID
from dispatch_kubeflow.kube import Kube

LEDGER_HOST_ROOT = Path("/var/lib/dispatch-chaos")


class NotJudged(Exception):
    """A run that cannot be judged; the message says why (the run's recorded error)."""

async def startable_backend(settings: dict[str, Any], who: str) -> Backend:
    """A Backend that may Start. An observe-only one (its preflight could not prove a
    capability: a loaded Kueue slow to report the probe gated) refuses every Start, and
    a run judged on it would pass with nothing run (seed 9504). So it is opened again
    once, and if it stays observe-only the run ends unjudged, saying why."""
    for attempt in (1, 2):
        be = await Backend.connect(settings)
        if not be.observe_only:
            return be
        reasons = "; ".join(be.observe_only_reasons)
        await be.close()
        if attempt == 1:
            print(f"{who}: the Backend is observe-only ({reasons}); opening it again",
                  file=sys.stderr)
            await asyncio.sleep(5)
    raise NotJudged(f"the Backend stayed observe-only, nothing could start: {reasons}")



@dataclass
class RunResult:
    seed: int
    run: int
    namespace: str
    duration_s: float = 0.0
    ops: dict[str, int] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)
    faults_failed: dict[str, str] = field(default_factory=dict)
    skipped_faults: str = ""
    verdicts: dict[str, bool] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    ledger_lines: int = 0
    executions: int = 0
    error: str = ""
    history: str = ""
    runner: str = ""
    """The commit the runner ran from: a seed replays its schedule with that version."""
    mix: int = MIX
    """The plan's mix (:data:`MIX`): ``--seed S --mix M`` draws the same plan."""

    @property
    def ok(self) -> bool:
        return not self.error and all(self.verdicts.values()) and bool(self.verdicts)


class Run:
    def __init__(self, *, seed: int, index: int, kubeconfig: str, cluster: str | None,
                 out: Path, jobs: int, ops: int, faults: Sequence[str],
                 skipped_faults: str, mix: int = MIX) -> None:
        self.seed, self.index = seed, index
        self.run_seed = seed + index
        self.kubeconfig, self.cluster = kubeconfig, cluster
        self.namespace = f"chaos-{seed}-{index}"
        self.runtime = f"dispatch-chaos-{seed}-{index}"
        self.host_dir = LEDGER_HOST_ROOT / f"{seed}-{index}"
        self.dir = out / f"{seed}-{index}"
        self.plan = make_plan(self.run_seed, jobs=jobs, ops=ops, faults=faults, mix=mix)
        self.rng = random.Random(self.run_seed ^ 0x5EED)  # for choices made while running
        self.result = RunResult(seed=self.run_seed, run=index, namespace=self.namespace,
                                skipped_faults=skipped_faults, history=str(self.dir), mix=mix)
        self.jobs: list[JobState] = []
        self.rec: Recorder | None = None
        # The schedule's operations, with what the library must answer beyond the checker's
        # properties (Operations.expect).
        self.operations: Operations | None = None

    async def execute(self, kube: Kube) -> RunResult:
        t0 = time.monotonic()
        if self.dir.exists():
            shutil.rmtree(self.dir)
        self.dir.mkdir(parents=True)
        self.rec = Recorder(self.dir / "ops.jsonl")
        self.operations = Operations(self.rec, kube, namespace=self.namespace,
                                     runtime=self.runtime, rng=self.rng)
        faults = Faults(kube, self.cluster, self.rng)
        try:
            await setup(kube, self.namespace, self.runtime, self.host_dir)
            async with await self._backend() as be:
                await self._start_jobs(be)
                await self._schedule(be, faults)
                await settle(be, self.jobs)
                final = await observe_final(be, kube, self.namespace, self.jobs, self.rec.ops)
            self._judge(final)
        except Exception as exc:
            self.result.error = f"{type(exc).__name__}: {exc}"
        finally:
            for err in faults.restore_all():
                self.result.error += f"; restore failed: {err}"
            await _uninterrupted(self._cleanup(kube))
            self.result.duration_s = round(time.monotonic() - t0, 1)
            assert self.rec is not None
            self.result.ops = dict(Counter(o.op for o in self.rec.ops
                                           if not o.op.startswith("fault:")))
            self.result.faults = dict(Counter(o.op.removeprefix("fault:")
                                              for o in self.rec.ops
                                              if o.op.startswith("fault:")))
        return self.result

    async def _backend(self) -> Backend:
        return await startable_backend(backend_settings(self.kubeconfig, self.namespace),
                                       "chaos")

    async def _start_jobs(self, be: Backend) -> None:
        assert self.rec is not None
        assert self.operations is not None
        for plan in self.plan.jobs:
            st = JobState(plan, JobID.new())
            self.jobs.append(st)
            req = job_request(st.job, plan, self.runtime)
            _, ref = await self.rec.call(
                OP_START, st.job, lambda req=req: be.start(req),  # type: ignore[misc]
                seconds=DEADLINES[OP_START],
                args={"nodes": plan.nodes, "fail_once": plan.fail_once,
                      "run_seconds": plan.run_seconds, "term_linger": plan.term_linger,
                      "early_exit": plan.early_exit, "submission": 1, "attempt": 1},
                summary=lambda ref: ref.id)
            st.ref = ref
        for st in self.jobs:
            if st.plan.open_at_start and st.ref is not None:
                await self.operations.op(be, "open", st, 0.0)

    async def _schedule(self, be: Backend, faults: Faults) -> None:
        assert self.operations is not None
        running: asyncio.Task[None] | None = None
        try:
            for step in self.plan.steps:
                await asyncio.sleep(step.delay)
                if step.kind == "op":
                    await self.operations.op(be, step.name, self.jobs[step.job], step.arg)
                    continue
                if running is not None:  # one fault at a time
                    await running
                running = asyncio.create_task(self._fault(faults, step))
            if running is not None:
                await running
        finally:
            if running is not None and not running.done():
                running.cancel()
                with contextlib.suppress(BaseException):
                    await running

    async def _fault(self, faults: Faults, step: Step) -> None:
        assert self.rec is not None
        call_us = now_us()
        try:
            result = await faults.run(step.name, step.arg)
        except Exception as exc:
            result = {"failed": f"{type(exc).__name__}: {exc}"[:500]}
            self.result.faults_failed[step.name] = result["failed"]
        self.rec.record(f"fault:{step.name}", call_us, result, args={"length_s": step.arg})

    def _judge(self, final: Final) -> None:
        assert self.rec is not None
        assert self.operations is not None
        expect = self.operations.expect
        shutil.copy(self.host_dir / "ledger.jsonl", self.dir / "ledger.jsonl")
        write_final(self.dir / "final.json", final)
        ledger = read_ledger(self.dir / "ledger.jsonl")
        verdicts = judge(ledger, self.rec.ops, final)
        self.result.ledger_lines = len(ledger)
        self.result.executions = sum(len(exs) for exs in executions(ledger).values())
        self.result.verdicts = {v.prop: v.ok for v in verdicts}
        self.result.violations = [f"({v.prop}) {v.message.splitlines()[0] if v.message else ''}"
                                  for v in verdicts if not v.ok]
        self.result.verdicts["start"] = not expect
        self.result.violations += [f"(start) {e}" for e in expect]
        text = format_verdicts(verdicts, self.run_seed)
        text += "\n" + ("ok   (start) a second Start of a submission: the same object, or "
                        "ConflictError" if not expect else
                        "FAIL (start) a second Start of a submission:\n  "
                        + "\n  ".join(expect))
        (self.dir / "verdicts.txt").write_text(text + "\n", encoding="utf-8")
        if not all(v.ok for v in verdicts) or expect:
            print(text, file=sys.stderr)

    async def _cleanup(self, kube: Kube) -> None:
        problems = await cleanup(kube, self.namespace, self.runtime, self.host_dir, self.dir)
        if problems:
            self.result.error += ("; " if self.result.error else "") + \
                "cleanup: " + "; ".join(problems)


async def _uninterrupted(work: Awaitable[None]) -> None:
    """Await ``work`` to its end even when this task is cancelled meanwhile (Ctrl-C during
    a run's cleanup must not leave its namespace, queue or host directory), then let the
    cancellation go on."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done() and task.cancelled():
                raise
            cancelled = True
    task.result()
    if cancelled:
        raise asyncio.CancelledError

"""The promise across clusters on the local clusters (issue 30 item 3): a job runs in a
worker through MultiKueue; that worker is cut off from the manager; the job's pods there
stop within the permit's length, on their own (the worker cannot be told anything); the
manager revokes the worker's permit after the permit's length plus its margin, and only
then approves MultiKueue's new dispatch, to the other worker, at a higher A. A hold there
ends that execution and a release runs the job again, higher still. The cut worker healed:
its permit is granted again, and the job's old copy there runs nothing. StopJob proves every
cluster empty.

What ran when is judged from the ledger (chaos/ledger.sh): every pod of the job appends a
line every 100 ms to one file on this host (a hostPath: every node of the three clusters is
on this machine, one clock), and the campaign's checker (chaos/checker.py) judges it: no two
executions overlap, in any clusters, and each carries a higher identity than every earlier.

In ``make mk-test``: about 6 minutes with the clusters up (Kueue's workerLostTimeout of the
local setup is 2 minutes).
"""

from __future__ import annotations

import asyncio
import functools
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from chaos.checker import check_identity, check_no_overlap, executions
from chaos.history import Final, LedgerLine, read_ledger
from chaos.objects import job_request, ledger_dir, runtime_body
from chaos.plan import JobPlan
from dispatch_kubeflow import (
    Actor,
    ActorKind,
    Backend,
    HoldMeta,
    JobID,
    ObjectRef,
    ObjectState,
    Observation,
)
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r
from tests.cluster.helpers import eventually
from tests.multikueue.clusters import (
    CLUSTERS,
    active,
    mk,
    permit,
    prepared,
    renewed,
    settings,
)

pytestmark = [pytest.mark.machine, pytest.mark.asyncio]

NS = "mk-partition"
RUNTIME = "mk-partition-ledger"
LEDGER_DIR = Path("/var/lib/dispatch-chaos/mk-partition")
MANAGER, WORKERS = CLUSTERS[0], CLUSTERS[1:]
PERMIT_SECONDS = 60.0  # admission's default permit length (dispatch_kubeflow.core.permit)
MANAGER_WAIT = 61.2    # the manager's wait before it revokes: T(1 + rho)/(1 - rho), rho 1 %
# The pods of a cut worker stop within the permit's length from the cut (their share ends
# no later), plus the fence's kill and the ledger's last beat: a few seconds on two cores.
STOP_SLACK = 5.0


@pytest_asyncio.fixture
async def clusters(mk_up: None) -> AsyncIterator[dict[str, Kube]]:
    """The three clusters with the test's namespace, and the ledger's runtime in the
    manager (the library copies it into the workers); every worker joined again at the
    end, whatever the test did."""
    shutil.rmtree(LEDGER_DIR, ignore_errors=True)
    ledger_dir(LEDGER_DIR)
    async with prepared(NS) as kubes:
        manager = kubes[MANAGER]
        if await manager.get_or_none(r.CLUSTER_TRAINING_RUNTIME, RUNTIME) is not None:
            await manager.delete(r.CLUSTER_TRAINING_RUNTIME, RUNTIME)
        await manager.create(r.CLUSTER_TRAINING_RUNTIME, runtime_body(RUNTIME, LEDGER_DIR))
        try:
            yield kubes
        finally:
            for w in WORKERS:
                mk("heal", w.removeprefix("mk-"))
            await manager.delete(r.CLUSTER_TRAINING_RUNTIME, RUNTIME)


def ledger(job: JobID) -> list[LedgerLine]:
    path = LEDGER_DIR / "ledger.jsonl"
    lines = read_ledger(path) if path.exists() else []
    return [ln for ln in lines if ln.job == str(job)]


def admission(line: LedgerLine) -> int:
    return line.ident.admissions


def worker_of(line: LedgerLine) -> str:
    """The cluster whose node the line's pod ran on (nodes are named ``<cluster>-…``)."""
    return next(c for c in CLUSTERS if line.node.startswith(f"{c}-"))


async def running_at(b: Backend, ref: ObjectRef, a: int) -> Observation | None:
    obs = await b.inspect(ref)
    return obs if obs.admissions == a and obs.pods_running else None


async def in_state(b: Backend, ref: ObjectRef, state: ObjectState) -> Observation | None:
    obs = await b.inspect(ref)
    return obs if obs.state is state else None


async def beating(job: JobID, a: int, since_us: int = 0) -> list[LedgerLine] | None:
    got = [ln for ln in ledger(job) if admission(ln) == a and ln.wall_us > since_us]
    return got or None


def hold(instance: int) -> HoldMeta:
    return HoldMeta(instance, Actor(ActorKind.HUMAN, "mk-partition-test"),
                    reason="the partition test holds")


async def test_a_cut_worker_stops_its_pods_before_the_job_runs_elsewhere(
        clusters: dict[str, Kube]) -> None:
    async with await Backend.connect(settings(NS, "3m")) as b:
        assert not b.observe_only, b.observe_only_reasons
        job = JobID.new()
        plan = JobPlan(nodes=1, fail_once=False, run_seconds=0, open_at_start=False)
        ref = await b.start(job_request(job, plan, RUNTIME))
        await b.open(ref)
        first = await eventually(functools.partial(running_at, b, ref, 1), 300,
                                 "running at A = 1")
        cut = str(first.cluster)
        other = next(w for w in WORKERS if w != cut)
        await eventually(functools.partial(beating, job, 1), 60, "A = 1 in the ledger")
        print(f"\nA = 1 runs in {cut}; cutting it off from the manager")

        cut_us = time.time_ns() // 1000  # before: the stop is timed from the earliest cut
        began = time.monotonic()
        mk("cut", cut.removeprefix("mk-"))

        # While Kueue still counts it as running there: Inspect says the worker is lost.
        inactive = await eventually(functools.partial(worker_inactive, b, ref, cut), 240,
                                    f"Inspect naming {cut} inactive", interval=1)
        print(f"{time.monotonic() - began:.0f} s: Inspect: {inactive.state}, "
              f"{inactive.cause.detail}")
        second = await eventually(functools.partial(running_at, b, ref, 2), 480,
                                  "running again at A = 2", interval=1)
        redispatched = time.monotonic() - began
        assert second.cluster == other, second
        assert permit(cut)["revoked"] == "True", permit(cut)
        ones = [ln for ln in ledger(job) if admission(ln) == 1]
        assert {worker_of(ln) for ln in ones} == {cut}
        stopped_after = (ones[-1].wall_us - cut_us) / 1e6
        twos = await eventually(functools.partial(beating, job, 2), 60, "A = 2 in the ledger")
        assert {worker_of(ln) for ln in twos} == {other}
        gap = (twos[0].wall_us - ones[-1].wall_us) / 1e6
        print(f"A = 1's last line {stopped_after:.1f} s after the cut (permit "
              f"{PERMIT_SECONDS:.0f} s); running again in {other} at A = 2 "
              f"{redispatched:.0f} s after the cut, {gap:.1f} s after A = 1's last line")
        assert stopped_after <= PERMIT_SECONDS + STOP_SLACK, stopped_after
        assert gap > 0

        # A hold holds in the worker that runs it; a release runs it again, higher still.
        await b.hold(ref, hold(1))
        # Held: no alive pod in any worker (MultiKueue deleted its copy in the one that ran
        # it; the cut worker's killed pod, if JobSet has not removed it yet, is not alive).
        await eventually(functools.partial(in_state, b, ref, ObjectState.HELD), 120, "held")
        await b.release(ref, hold(1))
        third = await eventually(functools.partial(running_at, b, ref, 3), 240,
                                 "running again at A = 3")
        assert third.cluster == other, third  # the cut worker is still inactive
        await eventually(functools.partial(beating, job, 3), 60, "A = 3 in the ledger")

        # Healed: the cut worker's permit is granted again once no dispatch pod is alive
        # there; MultiKueue removes the job's old copy there, which ran nothing meanwhile.
        mk("heal", cut.removeprefix("mk-"))
        healed_us = time.time_ns() // 1000
        await eventually(functools.partial(asyncio.to_thread, lambda: renewed(cut)), 180,
                         f"{cut}'s permit granted again", interval=2)
        await eventually(functools.partial(no_copy, clusters[cut], ref), 240,
                         f"MultiKueue's old copy gone from {cut}")
        # Nothing of an earlier identity ran there after the heal. (Kueue v0.19.2 may take
        # the healed worker's old copy, admitted first, for the job's and delete the other
        # worker's (docs/multikueue-upstream.md, section 4): then the job is dispatched
        # again, at a higher A still, which the ledger's checks below judge.)
        late = [ln for ln in ledger(job) if worker_of(ln) == cut and ln.wall_us > healed_us
                and admission(ln) <= 3]
        assert late == [], late[:3]

        report = await b.stop_job(job, "the test is done")
        assert report.complete, report
        assert await b.find(job) == ()

    lines = ledger(job)
    exs = executions(lines)[str(job)]
    print("executions: " + ", ".join(
        f"A = {e.ident.admissions} in {worker_of(e.lines[0])} "
        f"({(e.end_us - e.start_us) / 1e6:.1f} s)" for e in exs))
    assert [e.ident.admissions for e in exs][:3] == [1, 2, 3], [e.name for e in exs]
    for verdict in (check_no_overlap(lines, [], Final()), check_identity(lines, [], Final())):
        assert verdict.ok, verdict.message
    for c, kube in clusters.items():
        for res in (r.TRAINJOB, r.WORKLOAD, r.TRAINING_RUNTIME, r.JOBSET, r.POD):
            items, _ = await kube.list(res, NS)
            assert items == [], (c, res.plural, [i["metadata"]["name"] for i in items])
    assert active(cut) == "True"


async def worker_inactive(b: Backend, ref: ObjectRef, worker: str) -> Observation | None:
    obs = await b.inspect(ref)
    return obs if f"worker {worker} is inactive" in obs.cause.detail else None


async def no_copy(kube: Kube, ref: ObjectRef) -> bool:
    return await kube.get_or_none(r.TRAINJOB, ref.name, ref.namespace) is None

"""The promise across clusters on the local clusters (issue 30 item 3): a job runs in a
worker through MultiKueue; that worker is cut off from the manager; the job's pods there
stop within the permit's length, on their own (the worker cannot be told anything), and
Inspect names the lost worker; the manager revokes the worker's permit after the permit's
length plus its margin; Kueue evicts the job after its workerLostTimeout. The job runs
again at A = 2 only after A = 1 stopped: in the other worker if Kueue dispatches it while
the worker is cut (Kueue v0.19.2 does not: it waits for the manager's TrainJob, whose status
is the lost worker's last, to go inactive), else once the worker is healed. The healed
worker's permit is granted again, and nothing of A = 1 runs anywhere after the heal. StopJob
proves every cluster empty. And a hold of a job running in a worker holds it; its release
does not run it again with the pinned Kueue (kueue#15380, asserted as an expected failure).
And a cut shorter than workerLostTimeout, with a pod made as the permit lapsed, does not
keep the job from running again in that worker (admission.permit_clearing).

What ran when is judged from the ledger (chaos/ledger.sh): every pod of the job appends a
line every 100 ms to one file on this host (a hostPath: every node of the three clusters is
on this machine, one clock), and the campaign's checker (chaos/checker.py) judges it: no two
executions overlap, in any clusters, and each carries a higher identity than every earlier.

In ``make mk-test``: about 10 minutes for its three tests with the clusters up (Kueue's
workerLostTimeout of the local setup is 2 minutes).
"""

from __future__ import annotations

import asyncio
import functools
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import pytest_asyncio

from chaos.checker import Execution, check_identity, check_no_overlap, executions
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
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.execution import is_alive
from dispatch_kubeflow.core.objects import labels_of
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

T = TypeVar("T")
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
            # The ledger leaves the machine with the test (a failed test printed what it
            # judged); the runtime's hostPath made it.
            shutil.rmtree(LEDGER_DIR, ignore_errors=True)


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


async def test_a_cut_worker_stops_its_pods_before_the_job_runs_again(
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
        # The fence: the cut-off worker's pod stops within its share, on its own.
        await eventually(functools.partial(silent, job, 1, 5), PERMIT_SECONDS + 30,
                         "A = 1 silent in the ledger", interval=1)
        ones = [ln for ln in ledger(job) if admission(ln) == 1]
        assert {worker_of(ln) for ln in ones} == {cut}
        stopped_after = (ones[-1].wall_us - cut_us) / 1e6
        print(f"A = 1's last line {stopped_after:.1f} s after the cut (permit "
              f"{PERMIT_SECONDS:.0f} s)")
        assert stopped_after <= PERMIT_SECONDS + STOP_SLACK, stopped_after
        await eventually(functools.partial(asyncio.to_thread, lambda: revoked(cut)), 120,
                         f"{cut}'s permit revoked", interval=2)
        print(f"{time.monotonic() - began:.0f} s: {cut}'s permit revoked")
        # Kueue gives the worker up after its workerLostTimeout (2 minutes here) and evicts
        # the job. Kueue v0.19.2 completes that eviction only once the manager's TrainJob
        # is no longer active, and its status is the lost worker's last: the job is not
        # dispatched again while the worker stays cut (docs/multikueue.md). A later Kueue
        # may dispatch it to the other worker meanwhile: then it runs there at A = 2.
        evicted = await eventually(functools.partial(left, b, ref), 240,
                                   "the job evicted from the lost worker", interval=1)
        print(f"{time.monotonic() - began:.0f} s: evicted: {evicted.state}, "
              f"{evicted.cause.detail}")
        meanwhile = await within(functools.partial(running_at, b, ref, 2), 60)
        print(f"{time.monotonic() - began:.0f} s: "
              + (f"dispatched again to {meanwhile.cluster} while {cut} is cut" if meanwhile
                 else f"not dispatched again while {cut} is cut"))
        mk("heal", cut.removeprefix("mk-"))
        healed_us = time.time_ns() // 1000
        healed = time.monotonic()
        second = meanwhile or await eventually(functools.partial(running_at, b, ref, 2), 420,
                                               "running again at A = 2 after the heal",
                                               interval=1)
        assert second is not None
        twos = await eventually(functools.partial(beating, job, 2), 60, "A = 2 in the ledger")
        gap = (twos[0].wall_us - ones[-1].wall_us) / 1e6
        print(f"running again in {second.cluster} at A = 2, "
              f"{time.monotonic() - healed:.0f} s after the heal, {gap:.1f} s after A = 1's "
              "last line")
        assert gap > 0
        await eventually(functools.partial(asyncio.to_thread, lambda: renewed(cut)), 180,
                         f"{cut}'s permit granted again", interval=2)

        # Nothing of an earlier identity ran anywhere after the heal but A = 2 (the healed
        # worker's old copy makes pods that the agent's read of the manager refuses).
        late = [ln for ln in ledger(job) if ln.wall_us > healed_us and admission(ln) == 1]
        assert late == [], late[:3]

        exs = await stopped_and_judged(b, job)
    print("executions: " + ", ".join(
        f"A = {e.ident.admissions} in {worker_of(e.lines[0])} "
        f"({(e.end_us - e.start_us) / 1e6:.1f} s)" for e in exs))
    assert [e.ident.admissions for e in exs] == [1, 2], [e.name for e in exs]
    for c, kube in clusters.items():
        for res in (r.TRAINJOB, r.WORKLOAD, r.TRAINING_RUNTIME, r.JOBSET, r.POD):
            items, _ = await kube.list(res, NS)
            assert items == [], (c, res.plural, [i["metadata"]["name"] for i in items])
    assert active(cut) == "True"


async def test_a_pod_made_as_the_permit_lapsed_does_not_keep_the_job_from_running_again(
        clusters: dict[str, Kube]) -> None:
    """The campaign's run 30000-84, made to happen: a worker is cut off from the manager for
    70 s, less than Kueue's workerLostTimeout, so Kueue keeps the job there. Its pod ends
    early in the cut (here: deleted, as a failed rank), and its JobSet makes the next pod
    while the worker's replicas still hold their permits: admitted, it waits to start (its
    gate's lift needs a permit, and its fence's first answer the manager). The manager
    revokes the permit; it grants it again only once no dispatch pod is alive in the worker,
    and the waiting pod is one. Before admission.permit_clearing nothing deleted it: the job
    stayed "running" with no pod running, for good. Now the healed worker, reading its
    permit revoked, deletes the pod; the manager grants the permit again; the job runs again
    in that worker, at A = 1 and a higher J, after its earlier execution."""
    async with await Backend.connect(settings(NS, "3m")) as b:
        job = JobID.new()
        plan = JobPlan(nodes=1, fail_once=False, run_seconds=0, open_at_start=False)
        ref = await b.start(job_request(job, plan, RUNTIME))
        await b.open(ref)
        first = await eventually(functools.partial(running_at, b, ref, 1), 300,
                                 "running at A = 1")
        cut = str(first.cluster)
        worker = clusters[cut]
        await eventually(functools.partial(beating, job, 1), 60, "A = 1 in the ledger")
        [running] = await job_pods(worker, ref)
        print(f"\nA = 1 runs in {cut} (pod {running['metadata']['name']}); cutting it off")
        began = time.monotonic()
        mk("cut", cut.removeprefix("mk-"))
        # The rank fails at once: its Job fails (backoffLimit 0) and the JobSet makes the
        # next pod, within the permit the replicas still hold.
        await worker.delete(r.POD, running["metadata"]["name"], NS,
                            uid=running["metadata"]["uid"], grace_period=0)
        nxt = await eventually(functools.partial(next_pod, worker, ref,
                                                 running["metadata"]["uid"]), 40,
                               "the JobSet's next pod, made while the permit is held")
        print(f"{time.monotonic() - began:.0f} s: the next pod {nxt['metadata']['name']} "
              f"(J = {labels_of(nxt).get(names.RESTART_ATTEMPT_LABEL)}), "
              f"{(nxt.get('status') or {}).get('phase')}, waits to start")
        await eventually(functools.partial(asyncio.to_thread, lambda: revoked(cut)), 120,
                         f"{cut}'s permit revoked", interval=2)
        print(f"{time.monotonic() - began:.0f} s: {cut}'s permit revoked")
        # The pod cannot have started: its first answer needs the manager (on the old code
        # it was still there, not started, 60 s after the heal, and the permit revoked).
        assert await waiting_pod(worker, nxt) is not None, "the next pod went or started"
        await asyncio.sleep(max(0.0, 70 - (time.monotonic() - began)))
        mk("heal", cut.removeprefix("mk-"))
        healed_us = time.time_ns() // 1000
        healed = time.monotonic()

        await eventually(functools.partial(pod_gone, worker, nxt), 60,
                         "the pod that waited on the revoked permit deleted", interval=1)
        print(f"{time.monotonic() - healed:.0f} s after the heal: the waiting pod deleted")
        await eventually(functools.partial(asyncio.to_thread, lambda: renewed(cut)), 120,
                         f"{cut}'s permit granted again", interval=2)
        print(f"{time.monotonic() - healed:.0f} s after the heal: {cut}'s permit granted again")
        again = await eventually(functools.partial(running_at, b, ref, 1), 240,
                                 "running again at A = 1 after the heal", interval=1)
        lines = await eventually(functools.partial(beating, job, 1, healed_us), 60,
                                 "A = 1 in the ledger again")
        assert again.cluster == cut  # Kueue kept the job there: no eviction, no A = 2
        print(f"running again in {again.cluster} at A = 1, J = {lines[0].ident.restarts}, "
              f"{time.monotonic() - healed:.0f} s after the heal")

        exs = await stopped_and_judged(b, job)
    print("executions: " + ", ".join(
        f"A = {e.ident.admissions}, J = {e.ident.restarts} in {worker_of(e.lines[0])}"
        for e in exs))
    assert len(exs) == 2, [e.name for e in exs]
    assert exs[1].ident.restarts > exs[0].ident.restarts, [e.name for e in exs]


async def stopped_and_judged(b: Backend, job: JobID) -> list[Execution]:
    """StopJob of ``job`` complete, and nothing of it found; then its ledger judged by the
    campaign's checker (no overlap, identity rising); its executions, ordered by start."""
    report = await b.stop_job(job, "the test is done")
    assert report.complete, report
    assert await b.find(job) == ()
    lines = ledger(job)
    for verdict in (check_no_overlap(lines, [], Final()), check_identity(lines, [], Final())):
        assert verdict.ok, verdict.message
    return executions(lines)[str(job)]


async def job_pods(kube: Kube, ref: ObjectRef) -> list[dict[str, Any]]:
    pods, _ = await kube.list(r.POD, NS, label_selector=names.pods_of(ref.name))
    return pods


async def next_pod(kube: Kube, ref: ObjectRef, before: str) -> dict[str, Any] | None:
    """The job's pod other than ``before`` (a UID), alive."""
    for p in await job_pods(kube, ref):
        if p["metadata"]["uid"] != before and is_alive(p):
            return p
    return None


async def pod_gone(kube: Kube, pod: dict[str, Any]) -> bool:
    """Whether ``pod`` (that very pod, by UID) no longer exists."""
    now = await kube.get_or_none(r.POD, pod["metadata"]["name"], NS)
    return now is None or now["metadata"]["uid"] != pod["metadata"]["uid"]


async def waiting_pod(kube: Kube, pod: dict[str, Any]) -> dict[str, Any] | None:
    """``pod`` as it is now, if it still exists and its workload has not started."""
    now = await kube.get_or_none(r.POD, pod["metadata"]["name"], NS)
    if now is None or now["metadata"]["uid"] != pod["metadata"]["uid"]:
        return None
    statuses = (now.get("status") or {}).get("containerStatuses") or []
    return None if any("running" in (s.get("state") or {}) for s in statuses) else now


async def within(probe: Callable[[], Awaitable[T | None]], seconds: float) -> T | None:
    """What ``probe`` returns once it is truthy within ``seconds``, else None."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if got := await probe():
            return got
        await asyncio.sleep(1)
    return None


async def silent(job: JobID, a: int, seconds: float) -> bool:
    """Whether the ledger has had no line of A = ``a`` for ``seconds`` (the pod stopped)."""
    got = [ln for ln in ledger(job) if admission(ln) == a]
    return bool(got) and time.time() - got[-1].wall_us / 1e6 >= seconds


async def left(b: Backend, ref: ObjectRef) -> Observation | None:
    """Inspect once Kueue evicted the job (its Workload names no worker any more)."""
    obs = await b.inspect(ref)
    return obs if not obs.cluster else None


def revoked(worker: str) -> bool:
    return permit(worker).get("revoked") == "True"


async def worker_inactive(b: Backend, ref: ObjectRef, worker: str) -> Observation | None:
    obs = await b.inspect(ref)
    return obs if f"worker {worker} is inactive" in obs.cause.detail else None


async def no_copy(kube: Kube, ref: ObjectRef) -> bool:
    return await kube.get_or_none(r.TRAINJOB, ref.name, ref.namespace) is None


async def test_a_hold_holds_in_the_worker_and_a_release_runs_it_again(
        clusters: dict[str, Kube]) -> None:
    """A hold of a job running in a worker ends its execution there; its release runs it
    again at a higher A. With the pinned Kueue the release does not (kueue#15380): the test
    then checks that this is why, and is an expected failure; a Kueue that fixes it makes
    the test pass."""
    async with await Backend.connect(settings(NS, "3m")) as b:
        job = JobID.new()
        plan = JobPlan(nodes=1, fail_once=False, run_seconds=0, open_at_start=False)
        ref = await b.start(job_request(job, plan, RUNTIME))
        try:
            await b.open(ref)
            first = await eventually(functools.partial(running_at, b, ref, 1), 300,
                                     "running at A = 1")
            await eventually(functools.partial(beating, job, 1), 60, "A = 1 in the ledger")
            await b.hold(ref, hold(1))
            # Held: MultiKueue deleted its copy in the worker, pods and all.
            await eventually(functools.partial(in_state, b, ref, ObjectState.HELD), 120,
                             "held")
            await eventually(functools.partial(silent, job, 1, 5), 60, "A = 1 silent",
                             interval=1)
            ones = [ln for ln in ledger(job) if admission(ln) == 1]
            print(f"\nheld in {first.cluster}: A = 1 ended; releasing")
            await b.release(ref, hold(1))
            second = await within(functools.partial(running_at, b, ref, 2), 180)
            if second is None:
                await stuck_as_kueue_15380(clusters, ref)
                # What the user sees: the eviction that cannot end, and what to do.
                stuck = await b.inspect(ref)
                print(f"Inspect: {stuck.state.value}; {stuck.cause.detail}")
                assert "(kueue#15380): StopJob the job" in stuck.cause.detail, stuck.cause
                pytest.xfail("kueue#15380 (Kueue v0.19.2): the released job's Workload "
                             "keeps its quota, evicted, behind the manager's stale "
                             "TrainJob status; the job never runs again")
            twos = await eventually(functools.partial(beating, job, 2), 60,
                                    "A = 2 in the ledger")
            assert twos[0].wall_us > ones[-1].wall_us
            print(f"running again in {second.cluster} at A = 2")
        finally:
            report = await b.stop_job(job, "the test is done")
            assert report.complete, report


async def stuck_as_kueue_15380(clusters: dict[str, Kube], ref: ObjectRef) -> None:
    """The manager as kueue#15380 leaves it: the Workload evicted yet still reserving quota,
    and the TrainJob suspended with the last status MultiKueue copied from the worker's (a
    job active), which Kueue waits on; no copy of it in any worker."""
    manager = clusters[MANAGER]
    for w in WORKERS:
        assert await clusters[w].get_or_none(r.TRAINJOB, ref.name, ref.namespace) is None, w
    tj = await manager.get(r.TRAINJOB, ref.name, ref.namespace)
    wls, _ = await manager.list(r.WORKLOAD, ref.namespace)
    conditions = {c["type"]: c["status"] for wl in wls
                  for c in (wl.get("status") or {}).get("conditions") or []}
    assert conditions.get("Evicted") == "True", conditions
    assert conditions.get("QuotaReserved") == "True", conditions
    assert (tj.get("spec") or {}).get("suspend") is True, tj.get("spec")
    jobs = (tj.get("status") or {}).get("jobsStatus") or []
    assert any((j.get("active") or 0) > 0 for j in jobs), jobs

"""StopJob's passes (dispatch_kubeflow.stop) against the in-memory fake port.

The fake has no garbage collector and no kubelet, so every object is there until someone
deletes it: what is tested is that stop_job itself finds every object of the job (by
label, by name, by owner), deletes each under its UID, lists again for what appeared
meanwhile, proves the end by watching, and reports honestly what is still there when its
time is up. How Kubernetes' garbage collector and JobSet react is the cluster tests'.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dispatch_kubeflow import errors
from dispatch_kubeflow import stop as stop_mod
from dispatch_kubeflow.core import names
from dispatch_kubeflow.find import KINDS
from dispatch_kubeflow.informer import Informers
from dispatch_kubeflow.kube import Resource, WatchEvent
from dispatch_kubeflow.kube.resources import (
    EVENT,
    JOB,
    JOBSET,
    POD,
    TRAINING_RUNTIME,
    TRAINJOB,
    WORKLOAD,
)
from dispatch_kubeflow.mode_kueue import KueueMode
from dispatch_kubeflow.model import JobID, StopReport
from dispatch_kubeflow.settings import Settings
from dispatch_kubeflow.waits import cancel_all
from tests.unit.fake_kube import FakeKube, status_error

pytestmark = [pytest.mark.asyncio, pytest.mark.virtual_time]


@pytest.fixture(autouse=True)
def _quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """StopJob's waits at a twentieth: the collector here acts within milliseconds, so it
    still comes first, and the suite does not wait out a second per test."""
    monkeypatch.setattr(stop_mod, "_GC_GRACE", 0.05)
    monkeypatch.setattr(stop_mod, "_PASS_WAIT", 0.05)
SEEDS = range(4)
NS = "ns"
JOB_ID = JobID.new(datetime(2026, 5, 1, tzinfo=UTC), bytes(10))
OTHER = JobID.new(datetime(2026, 5, 1, tzinfo=UTC), bytes(range(10)))
TJ = names.trainjob_name(str(JOB_ID), 1)
Obj = dict[str, Any]


def labelled(name: str, job: JobID = JOB_ID, **extra: Any) -> Obj:
    return {"metadata": {"name": name, "labels": {names.JOB_ID_LABEL: str(job)}, **extra}}


async def a_job(k: FakeKube, job: JobID = JOB_ID) -> None:
    """What a running job leaves in the namespace, as objects (no controller made them)."""
    tj_name = names.trainjob_name(str(job), 1)
    tj = await k.create(TRAINJOB, labelled(tj_name, job), NS)
    owner = [{"apiVersion": TRAINJOB.api_version, "kind": "TrainJob", "name": tj_name,
              "uid": tj["metadata"]["uid"], "controller": True}]
    await k.create(TRAINING_RUNTIME, labelled(tj_name, job, ownerReferences=owner), NS)
    # Trainer copies the runtime copy's JobSet template labels (the job id) onto the JobSet.
    await k.create(JOBSET, labelled(tj_name, job, ownerReferences=owner), NS)
    await k.create(JOB, labelled(f"{tj_name}-node-0", job), NS)
    for i in range(2):
        pod = labelled(f"{tj_name}-node-0-{i}", job)
        pod["metadata"]["labels"][names.JOBSET_NAME_LABEL] = tj_name
        await k.create(POD, pod, NS)
    # Kueue labels every Workload it makes with its job's UID (and copies no other label).
    await k.create(WORKLOAD, {"metadata": {
        "name": f"trainjob-{tj_name}-a", "ownerReferences": owner,
        "labels": {names.KUEUE_JOB_UID_LABEL: tj["metadata"]["uid"]}}}, NS)
    # An orphan: no owner left (its TrainJob went long ago), known only by the job label on
    # its pod set's template.
    await k.create(WORKLOAD, {"metadata": {
        "name": f"trainjob-{tj_name}-b",
        "labels": {names.KUEUE_JOB_UID_LABEL: f"gone-{tj['metadata']['uid']}"}}, "spec": {
        "podSets": [{"template": labelled("t", job)}]}}, NS)


async def stop(k: FakeKube, follow: bool, limit: float = 5, reason: str = "r"
               ) -> StopReport:
    """stop_job alone (its own watches), or as one of a crowd of a Backend's stops: every
    kind it can follows the Backend's informers (see stop's module docstring)."""
    if not follow:
        return await stop_mod.stop_job(k, NS, JOB_ID, reason, kinds=KINDS,
                                       limit=timedelta(seconds=limit))
    informers = Informers(k)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(stop_mod, "_CROWD", 1)
            return await stop_mod.stop_job(k, NS, JOB_ID, reason, kinds=KINDS,
                                           limit=timedelta(seconds=limit),
                                           shared=informers, feeds=[WORKLOAD_FEED])
    finally:
        await informers.close()


FOLLOW = pytest.mark.parametrize("follow", [False, True], ids=["alone", "informers"])


def left(k: FakeKube, *kinds: Resource) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for res in kinds for o in k.all(res)}


ALL = (TRAINJOB, TRAINING_RUNTIME, JOBSET, JOB, POD, WORKLOAD)


@FOLLOW
@pytest.mark.parametrize("seed", SEEDS)
async def test_stop_deletes_everything_of_the_job_and_nothing_else(seed: int,
                                                                   follow: bool) -> None:
    k = FakeKube(seed)
    await a_job(k, OTHER)
    others = left(k, *ALL)
    await a_job(k)
    mine = left(k, *ALL) - others
    report = await stop(k, follow, reason="asked to")
    assert left(k, *ALL) == others
    assert {(r.kind, r.name) for r in report.stopped} == mine
    assert report.alive == ()
    assert report.unproven == ()
    reasons = [e for e in k.all(EVENT) if e["regarding"]["name"] == TJ]
    assert [e["note"] for e in reasons] == ["asked to"]


class SlowEvents(FakeKube):
    """The fake, whose Events are answered only once a TrainJob's delete has come."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.deleted = asyncio.Event()

    async def create(self, res: Resource, body: Obj, namespace: str | None = None,
                     **kw: Any) -> Obj:
        if res is EVENT:
            await self.deleted.wait()
        return await super().create(res, body, namespace, **kw)

    async def delete(self, res: Resource, name: str, namespace: str | None = None,
                     **kw: Any) -> Obj | None:
        if res is TRAINJOB:
            self.deleted.set()
        return await super().delete(res, name, namespace, **kw)


@FOLLOW
@pytest.mark.parametrize("seed", SEEDS)
async def test_the_reason_is_recorded_alongside_the_delete(seed: int, follow: bool) -> None:
    """The reason's Event does not hold the TrainJob's delete back (one round trip less for
    a prompt stop), and the stop still ends with it recorded."""
    k = SlowEvents(seed)
    await a_job(k)
    async with asyncio.timeout(4):  # an Event before the delete would wait here forever
        report = await stop(k, follow, reason="asked to")
    assert report.complete
    assert report.alive == report.unproven == ()
    assert [e["note"] for e in k.all(EVENT) if e["regarding"]["name"] == TJ] == ["asked to"]


@FOLLOW
@pytest.mark.parametrize("seed", SEEDS)
async def test_what_appears_during_a_pass_is_deleted_by_the_next(seed: int,
                                                                 follow: bool) -> None:
    k = FakeKube(seed)
    await a_job(k)
    late: list[asyncio.Task[Obj]] = []

    def when(verb: str, res: Resource, name: str) -> None:
        if (verb, res) == ("delete", TRAINJOB) and not late:
            # A pod of the job arrives while the first deletions run (a late kubelet).
            late.append(asyncio.get_running_loop().create_task(
                k.create(POD, labelled(f"{TJ}-late"), NS)))

    k.before = when
    report = await stop(k, follow)
    await late[0]  # already done: stop_job's passes ran until nothing was left
    assert left(k, *ALL) == set()
    assert ("Pod", f"{TJ}-late") in {(r.kind, r.name) for r in report.stopped}


@FOLLOW
async def test_what_will_not_go_is_reported_alive_when_the_time_is_up(follow: bool) -> None:
    k = FakeKube()
    await a_job(k)
    mine = left(k, *ALL)
    # A finalizer nobody removes (no controller here): deleted, it stays.
    await k.patch(POD, f"{TJ}-node-0-1", {"metadata": {"finalizers": ["example.com/keep"]}},
                  NS)
    loop = asyncio.get_running_loop()
    began = loop.time()
    report = await stop(k, follow, limit=0.3)
    took = loop.time() - began
    assert 0.3 <= took < 3  # it waited its time, by watching, and then stopped
    stuck = k.objects[("pods", NS, f"{TJ}-node-0-1")]
    assert "deletionTimestamp" in stuck["metadata"]
    assert left(k, *ALL) == {("Pod", f"{TJ}-node-0-1")}  # everything else went
    # The pod, and what it runs beneath (named by its jobset-name label), are not stopped.
    alive = {(r.kind, r.name) for r in report.alive}
    assert alive == {("Pod", f"{TJ}-node-0-1"), ("JobSet", TJ), ("TrainJob", TJ)}
    assert {(r.kind, r.name) for r in report.stopped} == mine - alive


# --- what StopJob costs -------------------------------------------------------------------
RES_BY_PLURAL = {r.plural: r for r in ALL}


class Metered(FakeKube):
    """The fake, also counting the objects each read returned (list items, watch events)
    and the lists by kind: what N concurrent stops would move over the wire."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self.read = 0
        self.lists: dict[str, int] = {}
        self.peak_watches = 0

    async def list(self, res: Resource, namespace: str | None = None, *,
                   label_selector: str | None = None,
                   field_selector: str | None = None,
                   trim: Callable[[Obj], Obj] | None = None,
                   metadata: bool = False) -> tuple[list[Obj], str]:
        items, rv = await super().list(res, namespace, label_selector=label_selector,
                                       field_selector=field_selector, trim=trim,
                                       metadata=metadata)
        self.read += len(items)
        self.lists[res.plural] = self.lists.get(res.plural, 0) + 1
        return items, rv

    async def watch(self, res: Resource, namespace: str | None = None, *,
                    resource_version: str = "", label_selector: str | None = None,
                    field_selector: str | None = None,
                    timeout_seconds: int = 290) -> AsyncIterator[WatchEvent]:
        async for ev in super().watch(res, namespace, resource_version=resource_version,
                                      label_selector=label_selector,
                                      field_selector=field_selector,
                                      timeout_seconds=timeout_seconds):
            self.peak_watches = max(self.peak_watches, self.open_watches)
            self.read += 1
            yield ev


class Collector:
    """The garbage collector the fake lacks: promptly deletes what lost every owner. Its
    requests are counted apart, so a test counts StopJob's alone."""

    def __init__(self, k: FakeKube) -> None:
        self.k = k
        self.requests = 0

    async def run(self) -> None:
        while True:
            await asyncio.sleep(0.002)
            uids = {o["metadata"]["uid"] for o in self.k.objects.values()}
            orphans = [(key, o) for key, o in self.k.objects.items()
                       if (owners := {r["uid"] for r in o["metadata"].get("ownerReferences")
                                      or []}) and not owners & uids]
            # Concurrently, as the real one's workers do.
            await asyncio.gather(*(self.collect(*key, o) for key, o in orphans))

    async def collect(self, plural: str, ns: str, name: str, obj: Obj) -> None:
        self.requests += 1
        with contextlib.suppress(errors.KubeConflict):
            await self.k.delete(RES_BY_PLURAL[plural], name, ns, uid=obj["metadata"]["uid"])


async def a_prompt_job(k: FakeKube, job: JobID = JOB_ID) -> None:
    """A job as Trainer, JobSet, the Job controller and Kueue make it: every object owned,
    so the garbage collector removes everything once the TrainJob is deleted."""
    tj_name = names.trainjob_name(str(job), 1)
    tj = await k.create(TRAINJOB, labelled(tj_name, job), NS)

    def owned_by(o: Obj) -> list[Obj]:
        return [{"apiVersion": "v1", "kind": o["kind"], "name": o["metadata"]["name"],
                 "uid": o["metadata"]["uid"], "controller": True}]

    await k.create(TRAINING_RUNTIME, labelled(tj_name, job, ownerReferences=owned_by(tj)), NS)
    jobset = await k.create(JOBSET, labelled(tj_name, job, ownerReferences=owned_by(tj)), NS)
    # Kueue copies the pod templates (with the job-id label) into the Workload's pod sets.
    await k.create(WORKLOAD, {"metadata": {
        "name": f"trainjob-{tj_name}-a", "ownerReferences": owned_by(tj),
        "labels": {names.KUEUE_JOB_UID_LABEL: tj["metadata"]["uid"]}},
        "spec": {"podSets": [{"template": labelled("node", job)}]}}, NS)
    batch = await k.create(JOB, labelled(f"{tj_name}-node-0", job,
                                         ownerReferences=owned_by(jobset)), NS)
    for i in range(2):
        pod = labelled(f"{tj_name}-node-0-{i}", job, ownerReferences=owned_by(batch))
        pod["metadata"]["labels"][names.JOBSET_NAME_LABEL] = tj_name
        await k.create(POD, pod, NS)


async def bare_minimum(k: FakeKube, job: JobID, kinds: Sequence[Resource]) -> None:
    """What a bare script does: DELETE the TrainJob, then per kind one selector-scoped LIST
    and one WATCH until what it listed is gone. 1 + 2 x (number of kinds) requests (the
    TrainJob's LIST is its kind's), and unsound: it lists a kind before its makers are gone,
    so what they make meanwhile is never seen."""
    sel = f"{names.JOB_ID_LABEL}={job}"
    tjs, tj_rv = await k.list(TRAINJOB, NS, label_selector=sel)
    uid = tjs[0]["metadata"]["uid"]
    await k.delete(TRAINJOB, tjs[0]["metadata"]["name"], NS, uid=uid)

    async def until_gone(res: Resource) -> None:
        s = f"{names.KUEUE_JOB_UID_LABEL}={uid}" if res is WORKLOAD else sel
        items, rv = (tjs, tj_rv) if res is TRAINJOB else await k.list(res, NS,
                                                                         label_selector=s)
        left = {o["metadata"]["uid"] for o in items}
        if not left:
            return
        async for ev in k.watch(res, NS, resource_version=rv, label_selector=s):
            if ev.type == "DELETED":
                left.discard(ev.object["metadata"]["uid"])
                if not left:
                    return

    await asyncio.gather(*(until_gone(res) for res in kinds))


PLAIN_KINDS = tuple(kind for kind in KINDS if kind is not WORKLOAD)
def _kueue_mode() -> KueueMode:
    mode = KueueMode.from_settings(Settings.parse(
        {"namespace": NS, "probeRuntime": {"name": "rt"}, "kueue": {"localQueue": "lq"}}))
    assert mode is not None
    return mode


KUEUE_MODE = _kueue_mode()
WORKLOAD_FEED, = KUEUE_MODE.watched(NS)  # Kueue mode's, as a Backend has


async def timed(k: FakeKube, work: Awaitable[Any]) -> tuple[int, float, Any]:
    """(requests, seconds, result) of ``work`` against ``k`` (the collector's not counted)."""
    gc = Collector(k)
    task = asyncio.create_task(gc.run())
    loop = asyncio.get_running_loop()
    before, began = k.requests, loop.time()
    try:
        out = await work
    finally:
        took = loop.time() - began
        await cancel_all([task])
    return k.requests - before - gc.requests, took, out


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("kinds", "shared"), [(KINDS, False), (KINDS, True),
                                                (PLAIN_KINDS, False)],
                         ids=["kueue", "kueue-informer", "plain"])
async def test_a_prompt_job_costs_near_the_bare_minimum(
        seed: int, kinds: tuple[Resource, ...], shared: bool,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The real grace: the collector comes first however slow the machine, so this costs no
    # time, and StopJob deleting what the collector would have is not what this counts.
    monkeypatch.setattr(stop_mod, "_GC_GRACE", 1.0)
    # The bare minimum: DELETE the TrainJob + (one selector LIST + one WATCH until gone) per
    # kind the mode has: 1 + 2 x 6 = 13 requests in Kueue mode, 1 + 2 x 5 = 11 in plain.
    minimum = 1 + 2 * len(kinds)
    k = FakeKube(seed)
    await a_prompt_job(k)
    bare, bare_took, _ = await timed(k, bare_minimum(k, JOB_ID, kinds))
    assert bare <= minimum
    assert left(k, *ALL) == set()

    k = FakeKube(seed)
    await a_prompt_job(k)
    informers = Informers(k)
    asked, took, report = await timed(k, stop_mod.stop_job(
        k, NS, JOB_ID, "r", kinds=kinds, limit=timedelta(seconds=5),
        shared=informers if shared else None, feeds=[WORKLOAD_FEED]))
    await informers.close()
    assert report.complete
    assert report.alive == report.unproven == ()
    assert left(k, *ALL) == set()
    # What StopJob makes beyond the bare minimum: the reason's Event (1), and with no
    # informer to share, none; with one (a Backend's), its list and watch (2), shared by
    # every concurrent stop. A kind the collector emptied before StopJob listed it costs
    # its LIST alone (no WATCH).
    assert asked <= minimum + 1 + (2 if shared else 0)
    assert asked <= 1.3 * minimum
    # In time too: both wait for the same collector, StopJob kind after kind. (A
    # generous absolute margin: the machine's noise, not a ratio to assert.)
    assert took <= 1.3 * bare_took + 0.1


async def stop_many(n: int) -> tuple[float, float, int, dict[str, int]]:
    """Requests and objects read per stop, the most watches open at once and the lists by
    kind, for ``n`` concurrent stops in one namespace."""
    k = Metered()
    jobs = [JobID.new(datetime(2026, 5, 1, tzinfo=UTC), i.to_bytes(10, "big"))
            for i in range(n)]
    for job in jobs:
        await a_prompt_job(k, job)
    informers = Informers(k)
    read_before = k.read
    asked, _, reports = await timed(k, asyncio.gather(*(
        stop_mod.stop_job(k, NS, job, "r", kinds=KINDS, limit=timedelta(seconds=30),
                          shared=informers, feeds=[WORKLOAD_FEED]) for job in jobs)))
    await informers.close()
    assert all(r.complete for r in reports)
    assert left(k, *ALL) == set()
    return asked / n, (k.read - read_before) / n, k.peak_watches, dict(k.lists)


async def test_concurrent_stops_share_their_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    # The real grace, for the last stops left when fewer than _CROWD still run (a crowd
    # gives the collector none): with 50 jobs at once the collector needs more than a
    # twentieth of it, and StopJob deleting what the collector would have is not what this
    # test counts.
    monkeypatch.setattr(stop_mod, "_GC_GRACE", 1.0)
    few_requests, few_read, few_watches, few_lists = await stop_many(5)
    many_requests, many_read, many_watches, many_lists = await stop_many(50)
    print(f"per stop, 5 against 50 at once: requests {few_requests:.1f} / {many_requests:.1f},"
          f" objects read {few_read:.1f} / {many_read:.1f}; watches open at most "
          f"{few_watches} / {many_watches}; lists by kind {few_lists} / {many_lists}")
    # One watch per kind however many stop at once (the Backend's informers): 50 stops
    # watching alone would hold up to 50 x 5.
    assert many_watches <= len(KINDS)
    assert few_watches <= len(KINDS)
    # A kind is listed once a round, whatever the number of stops in it: a list per stop
    # would be 50 of each kind. How many rounds depends on how the stops' passes spread
    # in time, not on N (runs here: a kind listed 2 to 11 times, at N = 5 and at N = 50).
    assert max(many_lists.values()) <= 16
    # Requests per stop do not grow with N; they fall, the rounds spread over more stops.
    # (Each stop's own count varies by one or two with whether the collector emptied a kind
    # before it was listed, which saves that kind's watch: hence the margin of one.)
    assert many_requests <= few_requests + 1
    # A round reads every job's objects of its kind, and serves every stop that asked: so a
    # stop's share of the objects read is about the rounds times its own objects, whatever
    # N. It varies with how the rounds fall (1.0x to 1.5x in runs here); a list of the
    # others' objects per stop would read about ten times as many at N = 50 as at N = 5.
    assert many_read <= 2.5 * few_read
    for requests in (few_requests, many_requests):
        assert requests <= 1 + 2 * len(KINDS) + 1 + 1  # minimum + Event + informer share


@FOLLOW
@pytest.mark.parametrize("seed", SEEDS)
async def test_what_is_made_again_after_its_kind_was_listed_is_not_missed(
        seed: int, follow: bool) -> None:
    k = Metered(seed)
    await a_job(k)
    late: list[asyncio.Task[Obj]] = []
    pod_lists = 0

    def when(verb: str, res: Resource, name: str) -> None:
        nonlocal pod_lists
        if (verb, res) == ("delete", POD) and not late:
            # While the pods are deleted, after Jobs were listed, a Job of the job appears
            # again (a late write), and a pod it made.
            pod_lists = k.lists["pods"]
            loop = asyncio.get_running_loop()
            late.append(loop.create_task(k.create(JOB, labelled(f"{TJ}-node-9"), NS)))
            pod = labelled(f"{TJ}-node-9-0")
            pod["metadata"]["labels"][names.JOBSET_NAME_LABEL] = TJ
            late.append(loop.create_task(k.create(POD, pod, NS)))

    k.before = when
    report = await stop(k, follow)
    await asyncio.gather(*late)
    assert left(k, *ALL) == set()
    assert {("Job", f"{TJ}-node-9"), ("Pod", f"{TJ}-node-9-0")} <= {
        (r.kind, r.name) for r in report.stopped}
    assert report.complete
    # The Job seen again made the pods' list stale: they were listed again once it went.
    assert k.lists["pods"] > pod_lists


@FOLLOW
async def test_a_trainjob_held_by_a_finalizer_does_not_keep_the_rest_running(
        follow: bool) -> None:
    k = FakeKube()
    await a_job(k)
    mine = left(k, *ALL)
    await k.patch(TRAINJOB, TJ, {"metadata": {"finalizers": ["example.com/keep"]}}, NS)
    report = await stop(k, follow, limit=0.3)
    # Being deleted, it makes nothing more: what it made is listed and deleted meanwhile.
    assert left(k, *ALL) == {("TrainJob", TJ)}
    assert {(r.kind, r.name) for r in report.alive} == {("TrainJob", TJ)}
    assert {(r.kind, r.name) for r in report.stopped} == mine - {("TrainJob", TJ)}
    assert report.unproven == ()


@FOLLOW
@pytest.mark.parametrize("seed", SEEDS)
async def test_a_watch_that_expired_is_listed_again(seed: int, follow: bool) -> None:
    k = Metered(seed)
    await a_job(k)
    mine = left(k, *ALL)
    expired: list[bool] = []

    def when(verb: str, res: Resource, name: str) -> None:
        if (verb, res) == ("delete", JOBSET) and not expired:
            # etcd compacts while the views are open: every watch ends with 410 Expired.
            expired.append(True)
            k.compact()
            k.end_watches()

    k.before = when
    report = await stop(k, follow)
    assert expired
    # Its watch expired: listed again, from a new version. Following the informer, the
    # informer lists again (its cache, past the deletions, proves the JobSet gone) and the
    # stop's own list stands: its first, and the informer's two; or one, when the crowd's
    # JobSet delete (no grace) came before the informer's first list.
    assert k.lists["jobsets"] in ((2, 3) if follow else (2,))
    assert left(k, *ALL) == set()
    assert report.complete
    assert {(r.kind, r.name) for r in report.stopped} == mine


@pytest.mark.parametrize("seed", SEEDS)
async def test_what_an_orphan_made_is_reported_though_the_collector_removes_it(
        seed: int) -> None:
    # The TrainJob was deleted with orphan propagation: its JobSet has no owner left; its
    # Job and pods are the JobSet's, which the collector removes once StopJob deletes it.
    k = FakeKube(seed)
    await a_prompt_job(k)
    tj = k.objects[("trainjobs", NS, TJ)]
    for (plural, _, name), o in list(k.objects.items()):
        refs = o["metadata"].get("ownerReferences") or []
        if any(r["uid"] == tj["metadata"]["uid"] for r in refs):
            k.write_now(RES_BY_PLURAL[plural], name, NS, {"metadata": {"ownerReferences": None}})
    await k.delete(TRAINJOB, TJ, NS)
    mine = left(k, *ALL)
    _, _, report = await timed(k, stop_mod.stop_job(k, NS, JOB_ID, "r", kinds=KINDS,
                                                     limit=timedelta(seconds=5)))
    assert left(k, *ALL) == set()
    assert report.complete
    assert {(r.kind, r.name) for r in report.stopped} == mine


# --- a pod held by the Job controller's finalizer of a Job that is gone --------------------
def a_pod_of_a_gone_job(*finalizers: str) -> Obj:
    """A pod of the job whose Job is gone (no Job has its owner's UID), held by finalizers:
    what the fault suite found once the Job controller's informers had gone stale."""
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": f"{TJ}-node-0",
             "uid": "a-job-that-is-gone", "controller": True}
    return labelled(f"{TJ}-node-0-0", ownerReferences=[owner], finalizers=list(finalizers))


async def passes_of(k: FakeKube, limit: float, monkeypatch: pytest.MonkeyPatch) -> tuple[
        int, Any]:
    """StopJob's report, and how many passes it made (each judges what is due)."""
    passes = 0
    judge = stop_mod._Stop.due_deletes

    def counted(self: Any, now: float) -> list[Any]:
        nonlocal passes
        passes += 1
        return judge(self, now)

    monkeypatch.setattr(stop_mod._Stop, "due_deletes", counted)
    report = await stop_mod.stop_job(k, NS, JOB_ID, "r", kinds=KINDS,
                                     limit=timedelta(seconds=limit))
    return passes, report


async def test_a_pod_that_stays_past_its_grace_is_waited_for_not_spun_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # StopJob deletes it once the collector's grace is over; a finalizer nobody removes
    # keeps it. Waiting for it is waiting for its watch: a due time left behind once it was
    # asked to go woke the passes at once, again and again (4,768 passes in 0.5 s).
    k = FakeKube()
    await k.create(POD, a_pod_of_a_gone_job("example.com/keep"), NS)
    passes, report = await passes_of(k, 0.5, monkeypatch)
    assert passes < 10
    assert {(r.kind, r.name) for r in report.alive} == {("Pod", f"{TJ}-node-0-0")}


async def test_the_finalizer_of_a_job_that_is_gone_is_released(
        monkeypatch: pytest.MonkeyPatch) -> None:
    k = FakeKube()
    await k.create(POD, a_pod_of_a_gone_job(names.JOB_TRACKING_FINALIZER), NS)
    patches: list[Obj] = []
    patch = k.patch

    async def recorded(res: Resource, name: str, body: Any, *a: Any, **kw: Any) -> Obj:
        patches.append(body)
        return await patch(res, name, body, *a, **kw)

    monkeypatch.setattr(k, "patch", recorded)
    passes, report = await passes_of(k, 5, monkeypatch)
    assert passes < 10
    assert left(k, POD) == set()
    assert report.complete
    assert {(r.kind, r.name) for r in report.stopped} == {("Pod", f"{TJ}-node-0-0")}
    # One release, fenced by the version judged.
    assert len(patches) == 1
    assert patches[0]["metadata"]["finalizers"] == []
    assert patches[0]["metadata"]["resourceVersion"]


async def test_only_the_job_controllers_finalizer_is_released(
        monkeypatch: pytest.MonkeyPatch) -> None:
    k = FakeKube()
    await k.create(POD, a_pod_of_a_gone_job(names.JOB_TRACKING_FINALIZER, "example.com/keep"),
                   NS)
    _, report = await passes_of(k, 0.5, monkeypatch)
    stuck = k.objects[("pods", NS, f"{TJ}-node-0-0")]
    assert stuck["metadata"]["finalizers"] == ["example.com/keep"]
    assert {(r.kind, r.name) for r in report.alive} == {("Pod", f"{TJ}-node-0-0")}


async def test_a_finalizer_whose_job_is_there_is_the_job_controllers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The owner exists but is not of this job by its labels, so no view of StopJob holds
    # it: the GET by name before the release finds it, and the finalizer stays.
    k = FakeKube()
    job = await k.create(JOB, {"metadata": {"name": f"{TJ}-node-0"}}, NS)
    pod = a_pod_of_a_gone_job(names.JOB_TRACKING_FINALIZER)
    pod["metadata"]["ownerReferences"][0]["uid"] = job["metadata"]["uid"]
    await k.create(POD, pod, NS)
    passes, report = await passes_of(k, 0.5, monkeypatch)
    stuck = k.objects[("pods", NS, f"{TJ}-node-0-0")]
    assert stuck["metadata"]["finalizers"] == [names.JOB_TRACKING_FINALIZER]
    assert k.calls["patch"] == 0
    # Looked at again every four graces, not on every pass.
    assert 1 <= k.calls["get"] <= 1 + 0.5 // (4 * stop_mod._GC_GRACE)
    assert passes < 20  # a pass per look, not a spin (thousands)
    assert {(r.kind, r.name) for r in report.alive} == {("Pod", f"{TJ}-node-0-0")}


async def test_a_release_that_conflicts_is_judged_again_at_the_new_version() -> None:
    k = FakeKube()
    await k.create(POD, a_pod_of_a_gone_job(names.JOB_TRACKING_FINALIZER), NS)
    changed: list[str] = []

    def when(verb: str, res: Resource, name: str) -> None:
        if (verb, res) == ("patch", POD) and not changed:
            # Between StopJob's judgement and its patch, someone writes the pod.
            changed.append(name)
            k.write_now(POD, name, NS, {"metadata": {"annotations": {"x": "y"}}})

    k.before = when
    report = await stop_mod.stop_job(k, NS, JOB_ID, "r", kinds=KINDS,
                                     limit=timedelta(seconds=5))
    assert changed
    assert k.calls["patch"] == 2  # the first a 409, the second at the new version
    assert left(k, POD) == set()
    assert report.complete


class InformersRefused(FakeKube):
    """A cluster whose RBAC lets the caller watch a kind by a job's own selector, not the
    whole namespace's (the informers' selectors, a label that exists or none): 403."""

    def watch(self, res: Resource, namespace: str | None = None, **kw: Any) -> Any:
        sel = kw.get("label_selector")
        if sel is None or not any(c in sel for c in "=("):
            raise status_error(403, "Forbidden", "watch refused", res)
        return super().watch(res, namespace, **kw)


@pytest.mark.parametrize("seed", SEEDS)
async def test_an_informer_that_ends_by_an_error_sends_the_stop_to_its_own_watches(
        seed: int) -> None:
    k = InformersRefused(seed)
    await a_job(k)
    mine = left(k, *ALL)
    report = await stop(k, follow=True)
    assert report.complete
    assert left(k, *ALL) == set()
    assert {(r.kind, r.name) for r in report.stopped} == mine


class LostAnswers(FakeKube):
    """The first DELETE of each kind in ``kinds`` gets no answer (a timeout under load):
    sent (``done``: the server deleted it) or not."""

    def __init__(self, seed: int, done: bool, kinds: Sequence[Resource]) -> None:
        super().__init__(seed)
        self.done, self.kinds, self.lost = done, set(kinds), 0

    async def delete(self, res: Resource, name: str, namespace: str | None = None,
                     **kw: Any) -> Any:
        if res in self.kinds:
            self.kinds.discard(res)
            self.lost += 1
            if self.done:
                await super().delete(res, name, namespace, **kw)
            raise errors.KubeError(f"DELETE {res.plural}/{name}: TimeoutError()", status=0,
                                   reason="Unreachable")
        return await super().delete(res, name, namespace, **kw)


@FOLLOW
@pytest.mark.parametrize("done", [False, True], ids=["not-sent", "sent"])
@pytest.mark.parametrize("seed", SEEDS)
async def test_a_delete_that_gets_no_answer_is_sent_again(seed: int, done: bool,
                                                          follow: bool) -> None:
    # 1,000 StopJobs at once on the local cluster: one DELETE timed out and the whole stop
    # raised. Its deletes are idempotent under the UID precondition: it sends them again.
    k = LostAnswers(seed, done, (TRAINJOB, WORKLOAD))
    await a_job(k)
    mine = left(k, *ALL)
    report = await stop(k, follow)
    assert k.lost == 2
    assert report.complete
    assert left(k, *ALL) == set()
    assert {(r.kind, r.name) for r in report.stopped} == mine


@FOLLOW
async def test_a_stop_keeps_only_the_metadata_of_what_it_saw(
        follow: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """1,000 concurrent stops each holding their TrainJob, Workloads and pods whole grew the
    client by hundreds of MB (bench/scale.py, N = 1,000): a stop reads metadata alone."""
    k = FakeKube()
    await a_job(k)
    big = {"spec": {"blob": "x" * 10_000}, "status": {"blob": "y" * 10_000}}
    for res in ALL:
        for o in k.all(res):
            await k.patch(res, o["metadata"]["name"], {
                **big, "metadata": {"managedFields": [{"manager": "m", "blob": "z" * 1000}]}},
                NS)
    kept: list[Obj] = []
    report_of = stop_mod._Stop.report

    def report(self: stop_mod._Stop) -> StopReport:
        kept.extend(f.obj for f in self.seen.values())
        kept.extend(f.obj for kind in self.kinds.values() for f in kind.live.values())
        return report_of(self)

    monkeypatch.setattr(stop_mod._Stop, "report", report)
    report_ = await stop(k, follow)
    assert len(report_.stopped) == len(kept) >= 7
    assert not left(k, *ALL)
    for obj in kept:
        assert set(obj) == {"metadata"}, obj.keys()
        assert "managedFields" not in obj["metadata"]
        assert obj["metadata"]["name"]
        assert obj["metadata"]["uid"]


async def test_stops_follow_the_informers_the_waits_run() -> None:
    """A Backend's StopJob follows the very informers its waits run (one watch and one cache
    per kind, whatever each keeps)."""
    from dispatch_kubeflow.observe import subscriptions

    waits = {feed.res: feed.source for feed, _ in subscriptions(KUEUE_MODE, NS, "tj", "u")}
    stops = stop_mod.stop_feeds(NS)
    assert stops[TRAINJOB].source == waits[TRAINJOB]
    assert stops[POD].source == waits[POD]
    assert WORKLOAD_FEED.source == waits[WORKLOAD]


class HeldLists(FakeKube):
    """The fake, whose lists of pods are answered only when let go (each a round's)."""

    def __init__(self) -> None:
        super().__init__(0)
        self.sent: list[asyncio.Event] = []
        self.error: errors.KubeError | None = None

    async def list(self, res: Resource, namespace: str | None = None, *,
                   label_selector: str | None = None,
                   field_selector: str | None = None,
                   trim: Callable[[Obj], Obj] | None = None,
                   metadata: bool = False) -> tuple[list[Obj], str]:
        # Read when sent; answered when let go.
        got = await super().list(res, namespace, label_selector=label_selector,
                                 field_selector=field_selector, trim=trim,
                                 metadata=metadata)
        if res is POD:
            go = asyncio.Event()
            self.sent.append(go)
            await go.wait()
            if self.error is not None:
                raise self.error
        return got


async def test_a_shared_list_serves_only_the_stops_that_asked_before_it_was_sent() -> None:
    # The proof needs, for each stop, a list sent after its makers were proven gone: a stop
    # that asks while a round is in flight must get the next round, never the one in flight.
    k = HeldLists()
    await k.create(POD, labelled("p0"), NS)
    rounds = stop_mod._Rounds(k, POD, NS, names.JOB_ID_LABEL)
    first = asyncio.create_task(rounds.fresh())
    await asyncio.sleep(0.01)
    assert len(k.sent) == 1  # round 1 in flight
    await k.create(POD, labelled("p1"), NS)  # made after round 1 was sent
    late = [asyncio.create_task(rounds.fresh()) for _ in range(3)]
    await asyncio.sleep(0.01)
    assert len(k.sent) == 1  # the late ones wait for round 1 to end, then share round 2
    k.sent[0].set()
    items, _ = await first
    assert {o["metadata"]["name"] for o in items} == {"p0"}
    await asyncio.sleep(0.01)
    assert len(k.sent) == 2
    assert not any(t.done() for t in late)
    k.sent[1].set()
    for t in late:
        items, _ = await t
        assert {o["metadata"]["name"] for o in items} == {"p0", "p1"}
        # Metadata alone: all a stop reads of what it lists.
        assert all(set(o) == {"metadata"} for o in items)
    assert len(k.sent) == 2


async def test_a_shared_list_that_fails_fails_every_stop_of_its_round() -> None:
    k = HeldLists()
    rounds = stop_mod._Rounds(k, POD, NS, names.JOB_ID_LABEL)
    waiting = [asyncio.create_task(rounds.fresh()) for _ in range(3)]
    await asyncio.sleep(0.01)
    waiting[0].cancel()  # one stop gone: the round goes on for the others
    await asyncio.sleep(0.01)
    k.error = status_error(503, "ServiceUnavailable", "busy")
    k.sent[0].set()
    for t in waiting[1:]:
        # Each stop judges the failure as it would its own list's (list_kind: again later).
        with pytest.raises(errors.KubeError) as raised:
            await t
        assert raised.value.status == 503
    assert waiting[0].cancelled()
    assert len(k.sent) == 1

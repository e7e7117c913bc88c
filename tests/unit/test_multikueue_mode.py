"""MultiKueue mode's orchestration across a manager and its workers, against in-memory fakes
of our own transport port (one per cluster): the runtime copy in every worker, Open putting
a missing one back, Inspect, StopJob, find and Output reaching into the worker that runs
the job, each naming the worker it speaks of, and the preflight naming what a worker lacks.
Kueue's MultiKueue itself is exercised on the local clusters (tests/multikueue)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dispatch_kubeflow import Backend, errors, output
from dispatch_kubeflow import start as start_mod
from dispatch_kubeflow.backend import select_mode
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Resource
from dispatch_kubeflow.kube.resources import (
    CLUSTER_TRAINING_RUNTIME,
    JOB,
    JOBSET,
    LEASE,
    MULTIKUEUE_CLUSTER,
    POD,
    TRAINING_RUNTIME,
    TRAINJOB,
    WORKLOAD,
)
from dispatch_kubeflow.mode_multikueue import MultiKueueMode, inactive, worker_settings
from dispatch_kubeflow.model import (
    Actor,
    ActorKind,
    CallMeta,
    Capability,
    HoldMeta,
    Image,
    JobID,
    JobSpec,
    ObjectRef,
    ObjectState,
    RuntimeRef,
    StartRequest,
)
from dispatch_kubeflow.preflight.workers import check_workers
from dispatch_kubeflow.settings import Settings
from dispatch_kubeflow.workers import Workers
from tests.unit.fake_kube import FakeKube, status_error

pytestmark = [pytest.mark.asyncio, pytest.mark.virtual_time]

NS = "ns"
JOB_ID = JobID.new(datetime(2026, 5, 1, tzinfo=UTC), bytes(10))
SETTINGS = Settings.parse({
    "namespace": NS, "probeRuntime": {"name": "dispatch-kind"},
    "kueue": {"localQueue": "lq", "multiKueue": {"workers": {
        "w1": {"kubeconfig": "/nowhere/w1"}, "w2": {"kubeconfig": "/nowhere/w2"}}}},
    "timeouts": {"start": "5s", "stopJob": "10s"}})
SOURCE = {"metadata": {"name": "dispatch-kind"}, "spec": {
    "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {
        "template": {"spec": {"containers": [{"name": "node", "image": "i"}]}}}}}]}}}}
TJ = names.trainjob_name(str(JOB_ID), 1)
Obj = dict[str, Any]


def request(text: str = "echo hi") -> StartRequest:
    spec = JobSpec(["/bin/sh", "-c", text], 1,
                   [Image("localhost/dispatch-busybox:kind"),
                    RuntimeRef("ClusterTrainingRuntime", "dispatch-kind")])
    return StartRequest(JOB_ID, 1, 1, spec)


class Manager(FakeKube):
    """The manager's fake: Kueue's Workload made for each TrainJob as Kueue would
    (straight into the fake, right after the TrainJob)."""

    async def create(self, res: Resource, body: Obj, namespace: str | None = None,
                     **kw: Any) -> Obj:
        made = await super().create(res, body, namespace, **kw)
        if res is TRAINJOB:
            await super().create(WORKLOAD, {"metadata": {
                "name": f"trainjob-{made['metadata']['name']}",
                "labels": {names.KUEUE_JOB_UID_LABEL: made["metadata"]["uid"]}}}, namespace)
        return made


class Clusters:
    """A manager and two workers, each its own fake."""

    def __init__(self) -> None:
        self.manager, self.w1, self.w2 = Manager(1), FakeKube(2), FakeKube(3)
        self.workers = Workers({"w1": self.w1, "w2": self.w2})
        mode = select_mode(SETTINGS, self.workers)
        assert isinstance(mode, MultiKueueMode)
        self.mode = mode

    async def start(self, req: StartRequest | None = None) -> ObjectRef:
        if not self.manager.all(CLUSTER_TRAINING_RUNTIME):
            await self.manager.create(CLUSTER_TRAINING_RUNTIME, SOURCE)
        return await start_mod.start(self.manager, SETTINGS, self.mode, req or request())


def unreachable(verb: str, res: Resource, name: str) -> None:
    raise errors.KubeUnreachable("connection refused", sent=False)


async def test_start_puts_the_runtime_copy_in_every_worker_once() -> None:
    c = Clusters()
    ref = await c.start()
    tj = c.manager.all(TRAINJOB)[0]
    assert tj["spec"]["managedBy"] == names.MULTIKUEUE_CONTROLLER
    mine = c.manager.all(TRAINING_RUNTIME)[0]
    for worker in (c.w1, c.w2):
        copies = worker.all(TRAINING_RUNTIME)
        assert [o["metadata"]["name"] for o in copies] == [TJ]
        copy = copies[0]
        assert copy["spec"] == mine["spec"]
        assert copy["metadata"]["labels"] == mine["metadata"]["labels"]
        assert copy["metadata"]["labels"][names.JOB_ID_LABEL] == str(JOB_ID)
        assert copy["metadata"]["annotations"][names.SPEC_HASH] == \
            mine["metadata"]["annotations"][names.SPEC_HASH]
        assert not copy["metadata"].get("ownerReferences")  # no TrainJob there to own it
    # Started again: the same reference, and nothing more anywhere.
    assert await c.start() == ref
    assert [len(w.all(TRAINING_RUNTIME)) for w in (c.w1, c.w2)] == [1, 1]


async def test_another_requests_copy_in_a_worker_is_a_conflict_naming_the_worker() -> None:
    c = Clusters()
    await c.w2.create(TRAINING_RUNTIME, {"metadata": {
        "name": TJ, "annotations": {names.SPEC_HASH: "older"}}, "spec": {}}, NS)
    with pytest.raises(errors.ConflictError, match=r"worker w2: TrainingRuntime ns/.* another"):
        await c.start()
    assert c.w2.all(TRAINING_RUNTIME)[0]["metadata"]["annotations"][names.SPEC_HASH] == \
        "older"  # never changed or deleted: StopJob's to remove


async def test_an_unreachable_worker_is_named_and_open_completes_its_copy() -> None:
    c = Clusters()
    c.w2.before = unreachable
    with pytest.raises(errors.KubeUnreachable, match=r"^worker w2: "):
        await c.start()
    assert c.w1.all(TRAINING_RUNTIME)
    assert not c.w2.all(TRAINING_RUNTIME)
    ref = ObjectRef(NS, TJ)
    # Open refuses while a worker has no copy: nothing may be dispatched there yet.
    with pytest.raises(errors.KubeUnreachable, match=r"^worker w2: "):
        await c.mode.open(c.manager, ref)
    gated = c.manager.all(TRAINJOB)[0]["metadata"]["annotations"]
    assert gated[names.ADMISSION_GATED_BY] == names.GATE
    c.w2.before = None
    await c.mode.open(c.manager, ref)
    assert len(c.w2.all(TRAINING_RUNTIME)) == 1
    assert names.ADMISSION_GATED_BY not in c.manager.all(TRAINJOB)[0]["metadata"].get(
        "annotations", {})


async def worker_runs_it(c: Clusters, worker: FakeKube, name: str) -> None:
    """MultiKueue dispatched the job to ``worker``: the manager's Workload names it, and the
    worker holds its copy of the TrainJob, JobSet, Job and pods (with the job's labels, as
    the runtime copy gives them)."""
    await c.mode.open(c.manager, ObjectRef(NS, TJ))
    wl = c.manager.all(WORKLOAD)[0]
    c.manager.write_now(WORKLOAD, wl["metadata"]["name"], NS, {"status": {
        "clusterName": name, "conditions": [
            {"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}]}})
    c.manager.write_now(TRAINJOB, TJ, NS, {"spec": {"suspend": False}})
    labels = {names.JOB_ID_LABEL: str(JOB_ID), names.SUBMISSION_LABEL: "1"}
    tj = await worker.create(TRAINJOB, {"metadata": {"name": TJ, "labels": {
        **labels, names.MULTIKUEUE_ORIGIN_LABEL: "multikueue"}}}, NS)
    owner = [{"apiVersion": TRAINJOB.api_version, "kind": "TrainJob", "name": TJ,
              "uid": tj["metadata"]["uid"], "controller": True}]
    await worker.create(JOBSET, {"metadata": {"name": TJ, "labels": labels,
                                              "ownerReferences": owner}}, NS)
    await worker.create(JOB, {"metadata": {"name": f"{TJ}-node-0", "labels": labels}}, NS)
    for i in range(2):
        await worker.create(POD, {
            "metadata": {"name": f"{TJ}-node-0-{i}", "labels": {
                **labels, names.JOBSET_NAME_LABEL: TJ,
                names.COMPLETION_INDEX_LABEL: str(i)}},
            "spec": {"nodeName": "n1", "containers": [{"name": names.TRAINER_CONTAINER}]},
            "status": {"phase": "Running"}}, NS)


async def backend(c: Clusters) -> Backend:
    return await Backend.connect(SETTINGS, kube=c.manager,
                                 workers={"w1": c.w1, "w2": c.w2}, preflight=False)


async def test_inspect_reads_the_pods_in_the_worker_that_runs_it() -> None:
    c = Clusters()
    await c.start()
    async with await backend(c) as b:
        before = await b.inspect(f"{NS}/{TJ}")
        assert (before.cluster, before.pods) == ("", 0)  # not dispatched yet
        await worker_runs_it(c, c.w1, "w1")
        obs = await b.inspect(f"{NS}/{TJ}")
        listed = await b.jobs()  # what kubectl dispatch get prints (-o wide: WORKER)
    assert obs.cluster == "w1"
    assert [j.observation.cluster for j in listed] == ["w1"]
    assert (obs.state.value, obs.pods, obs.pods_running) == ("running", 2, 2)


async def test_listing_counts_the_pods_in_the_worker_that_runs_it() -> None:
    """What kubectl dispatch get and describe print: the pods are the worker's (the manager
    has none of a MultiKueue job), read where Inspect reads them; a listing's watch too."""
    c = Clusters()
    await c.start()
    await worker_runs_it(c, c.w1, "w1")
    # A pod of the job left in the other worker (an old copy) is not this execution's.
    await c.w2.create(POD, {"metadata": {"name": f"{TJ}-node-0-0-old", "labels": {
        names.JOBSET_NAME_LABEL: TJ, names.JOB_ID_LABEL: str(JOB_ID)}},
        "status": {"phase": "Running"}}, NS)
    async with await backend(c) as b:
        listed = await b.jobs()
        watched = b.watch_jobs()
        first = await anext(watched)
        await watched.aclose()  # type: ignore[attr-defined]  # an async generator
        obs = await b.inspect(f"{NS}/{TJ}")
    for got in (listed, first):
        o = got[0].observation
        assert (o.cluster, o.pods, o.pods_running) == ("w1", 2, 2), o
    assert (obs.pods, obs.pods_running) == (2, 2)


async def test_held_only_once_the_workers_pods_are_gone() -> None:
    """Evicted by the hold, the Workload names no worker any more while the execution's
    pods may still be going there: Inspect reads every worker's, and says holding."""
    c = Clusters()
    await c.start()
    await worker_runs_it(c, c.w1, "w1")
    now = datetime.now(UTC)
    meta = HoldMeta(1, Actor(ActorKind.HUMAN, "t"), CallMeta(now + timedelta(seconds=30)))
    async with await backend(c) as b:
        await b.hold(f"{NS}/{TJ}", meta)
        # Kueue evicts the deactivated Workload and suspends the TrainJob; MultiKueue clears
        # the worker's name (written straight into the fake).
        wl = c.manager.all(WORKLOAD)[0]
        c.manager.write_now(WORKLOAD, wl["metadata"]["name"], NS, {"status": {
            "clusterName": None, "conditions": [
                {"type": "Evicted", "status": "True", "reason": "Deactivated"}]}})
        c.manager.write_now(TRAINJOB, TJ, NS, {"spec": {"suspend": True}})
        holding = await b.inspect(f"{NS}/{TJ}")
        for pod in c.w1.all(POD):
            await c.w1.delete(POD, pod["metadata"]["name"], NS)
        held = await b.inspect(f"{NS}/{TJ}")
    assert (holding.state, holding.pods, holding.cluster) == (ObjectState.HOLDING, 2, "")
    assert (held.state, held.pods) == (ObjectState.HELD, 0)


LOST = {"type": "Active", "status": "False", "reason": "ClientConnectionFailed",
        "message": "dial tcp 10.0.0.7:6443: connect: connection refused"}


async def multikueue_cluster(c: Clusters, name: str, *conditions: Obj) -> None:
    """The manager's MultiKueueCluster ``name`` (cluster-scoped), with these conditions."""
    await c.manager.create(MULTIKUEUE_CLUSTER, {"metadata": {"name": name}, "spec": {},
                                                "status": {"conditions": list(conditions)}})


def count_reads(kube: FakeKube) -> list[str]:
    """The names of the MultiKueueClusters ``kube`` is asked for, as asked (a ``before``
    hook that lets every call through)."""
    read: list[str] = []

    def record(verb: str, res: Resource, name: str) -> None:
        if res is MULTIKUEUE_CLUSTER:
            read.append(f"{verb} {name}")

    kube.before = record
    return read


async def test_inspect_says_when_the_manager_lost_the_worker() -> None:
    """Kueue sets the MultiKueueCluster of a worker it cannot reach Active=False and evicts
    its jobs only after workerLostTimeout: until then the Workload still says admitted to
    that worker, and Inspect's cause says why nothing moves, the state unchanged."""
    c = Clusters()
    await c.start()
    await multikueue_cluster(c, "w1", LOST)
    read = count_reads(c.manager)
    async with await backend(c) as b:
        before = await b.inspect(f"{NS}/{TJ}")  # not dispatched: no worker to ask about
        await worker_runs_it(c, c.w1, "w1")
        obs = await b.inspect(f"{NS}/{TJ}")
    assert read == ["get w1"]  # one GET, and none while no worker is named
    assert "MultiKueue" not in before.cause.detail
    table, _, remark = obs.cause.detail.partition("; ")
    assert table  # the state table's detail, kept in front
    assert remark == (
        "worker w1 is inactive in the manager's MultiKueue (ClientConnectionFailed: dial tcp "
        "10.0.0.7:6443: connect: connection refused): Kueue evicts the job from it after its "
        "workerLostTimeout")
    assert (obs.state, obs.cause.reason, obs.cluster) == (ObjectState.RUNNING, "Admitted", "w1")


async def test_inspect_says_nothing_more_of_an_active_worker() -> None:
    c = Clusters()
    await c.start()
    await multikueue_cluster(c, "w1", {"type": "Active", "status": "True",
                                       "reason": "Active", "message": "Connected"})
    await worker_runs_it(c, c.w1, "w1")
    read = count_reads(c.manager)
    async with await backend(c) as b:
        obs = await b.inspect(f"{NS}/{TJ}")
    assert read == ["get w1"]  # asked, and Active: nothing to say
    assert (obs.state, obs.cluster) == (ObjectState.RUNNING, "w1")
    assert "w1" not in obs.cause.detail
    assert "; " not in obs.cause.detail


async def test_inspect_says_a_worker_has_no_multikueuecluster() -> None:
    c = Clusters()
    await c.start()
    await worker_runs_it(c, c.w2, "w2")
    async with await backend(c) as b:
        obs = await b.inspect(f"{NS}/{TJ}")
    assert obs.cause.detail.endswith("; worker w2 has no MultiKueueCluster in the manager")
    assert obs.state is ObjectState.RUNNING


async def test_a_multikueuecluster_the_library_may_not_read_changes_nothing() -> None:
    """The permission is optional: without it, Inspect says what the Workload says."""
    c = Clusters()
    await c.start()
    await multikueue_cluster(c, "w1", LOST)
    await worker_runs_it(c, c.w1, "w1")
    async with await backend(c) as b:
        plain = await b.inspect(f"{NS}/{TJ}")

        refused: list[str] = []

        def forbid(verb: str, res: Resource, name: str) -> None:
            if res is MULTIKUEUE_CLUSTER:
                refused.append(name)
                raise status_error(403, "Forbidden", "multikueueclusters.kueue.x-k8s.io "
                                   f'"{name}" is forbidden', res, name)

        c.manager.before = forbid
        forbidden = await b.inspect(f"{NS}/{TJ}")
        assert refused == ["w1"]

        def fail(verb: str, res: Resource, name: str) -> None:
            if res is MULTIKUEUE_CLUSTER:
                raise status_error(500, "InternalError", "etcd is down", res, name)

        c.manager.before = fail
        with pytest.raises(errors.KubeError, match="etcd is down"):
            await b.inspect(f"{NS}/{TJ}")  # as any other read of Inspect's fails
    assert "inactive" in plain.cause.detail  # readable, it was said
    assert forbidden.cause == replace(plain.cause, detail=plain.cause.detail.split("; ")[0])
    assert forbidden.state is plain.state is ObjectState.RUNNING


async def test_a_worker_not_active_for_any_reason_is_said_inactive() -> None:
    says = "worker w1 is inactive in the manager's MultiKueue ({}): Kueue evicts the job " \
        "from it after its workerLostTimeout"
    unknown = {"status": {"conditions": [{"type": "Active", "status": "Unknown"}]}}
    assert inactive("w1", unknown) == says.format("Active is Unknown")
    assert inactive("w1", {"status": {}}) == says.format("no Active condition")
    assert inactive("w1", {"status": {"conditions": [{**LOST, "message": ""}]}}) == \
        says.format("ClientConnectionFailed")


async def test_a_finished_job_says_nothing_of_its_worker() -> None:
    """Kueue never dispatches a finished Workload again: no read, nothing said."""
    c = Clusters()
    await c.start()
    await multikueue_cluster(c, "w1", LOST)
    await worker_runs_it(c, c.w1, "w1")
    wl = c.manager.all(WORKLOAD)[0]
    c.manager.write_now(WORKLOAD, wl["metadata"]["name"], NS, {"status": {"conditions": [
        {"type": "Finished", "status": "True", "reason": "Succeeded"}]}})
    c.manager.write_now(TRAINJOB, TJ, NS, {"status": {"conditions": [
        {"type": "Complete", "status": "True", "reason": "Completed", "message": "done"}]}})
    read = count_reads(c.manager)
    async with await backend(c) as b:
        obs = await b.inspect(f"{NS}/{TJ}")
    assert (obs.state, obs.cause.detail, read) == (ObjectState.SUCCEEDED, "done", [])


def stamp(seconds_ago: float) -> str:
    return (datetime.now(UTC) - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


async def evicted_keeping_quota(c: Clusters, seconds_ago: float, active: int = 1) -> None:
    """The manager as kueue#15380 leaves a released job: the Workload evicted
    ``seconds_ago`` (the hold's eviction), still reserving quota, naming no worker; the
    TrainJob suspended, its status the worker's last (``active`` jobs); the worker's copy
    and its pods deleted by MultiKueue."""
    wl = c.manager.all(WORKLOAD)[0]
    c.manager.write_now(WORKLOAD, wl["metadata"]["name"], NS, {
        "spec": {"active": True}, "status": {"clusterName": None, "conditions": [
            {"type": "QuotaReserved", "status": "True", "lastTransitionTime": stamp(600)},
            {"type": "Evicted", "status": "True", "reason": "InactiveWorkload",
             "lastTransitionTime": stamp(seconds_ago)}]}})
    c.manager.write_now(TRAINJOB, TJ, NS, {"spec": {"suspend": True}, "status": {
        "jobsStatus": [{"name": "node", "active": active, "ready": active}]}})
    for res in (POD, JOB, JOBSET, TRAINJOB):
        for obj in c.w1.all(res):
            await c.w1.delete(res, obj["metadata"]["name"], NS)


STUCK = ("Kueue keeps the job's quota, evicted, until the manager's TrainJob says its job "
         "stopped, but that status is MultiKueue's last copy from a worker (1 active) and no "
         "worker holds the job any more, so it never will (kueue#15380): StopJob the job and "
         "start a later attempt")


async def test_inspect_says_an_eviction_that_cannot_end_and_what_to_do() -> None:
    """kueue#15380 (seen on the local clusters with Kueue v0.19.2): after a hold MultiKueue
    deleted the worker's copy before its status said the job stopped, so the manager's
    TrainJob says a job active for ever and Kueue never frees the quota; released, the job
    never runs. Inspect says so, and the fix, once the eviction is 30 s old."""
    c = Clusters()
    await c.start()
    await worker_runs_it(c, c.w1, "w1")
    await evicted_keeping_quota(c, seconds_ago=60)
    async with await backend(c) as b:
        obs = await b.inspect(f"{NS}/{TJ}")
    assert obs.cause.detail.endswith(STUCK), obs.cause.detail
    assert obs.cluster == ""


async def test_an_eviction_that_can_still_end_says_nothing_of_kueue_15380() -> None:
    """Young (MultiKueue copies the worker's stopped status within seconds), or a worker
    that still holds a copy or does not answer (it may still send one), or nothing active,
    or the quota freed: no remark."""
    says = []
    for case in ("young", "copy", "unanswered", "inactive", "freed"):
        c = Clusters()
        await c.start()
        await worker_runs_it(c, c.w1, "w1")
        await evicted_keeping_quota(c, seconds_ago=10 if case == "young" else 60,
                                    active=0 if case == "inactive" else 1)
        if case == "copy":
            await c.w2.create(TRAINJOB, {"metadata": {"name": TJ}}, NS)
        if case == "unanswered":
            c.w2.before = lambda verb, res, name: unreachable(verb, res, name) \
                if res is TRAINJOB else None
        if case == "freed":
            wl = c.manager.all(WORKLOAD)[0]
            c.manager.write_now(WORKLOAD, wl["metadata"]["name"], NS, {"status": {
                "conditions": [{"type": "Evicted", "status": "True",
                                "lastTransitionTime": stamp(60)},
                               {"type": "QuotaReserved", "status": "False"}]}})
        async with await backend(c) as b:
            obs = await b.inspect(f"{NS}/{TJ}")
        says.append((case, "kueue#15380" in obs.cause.detail))
    assert says == [(case, False) for case, _ in says]


async def test_kueue_mode_never_reads_a_multikueuecluster() -> None:
    """The same objects (a Workload naming a lost worker) read by a MultiKueue backend and
    by a Kueue-mode one: only the first asks the manager about the worker."""
    c = Clusters()
    await c.start()
    await multikueue_cluster(c, "w1", LOST)
    await worker_runs_it(c, c.w1, "w1")
    read = count_reads(c.manager)
    async with await backend(c) as b:
        multi = await b.inspect(f"{NS}/{TJ}")
    assert (read, "inactive" in multi.cause.detail) == (["get w1"], True)
    read.clear()
    kueue = Settings.parse({"namespace": NS, "probeRuntime": {"name": "dispatch-kind"},
                            "kueue": {"localQueue": "lq"}})
    async with await Backend.connect(kueue, kube=c.manager, preflight=False) as b:
        obs = await b.inspect(f"{NS}/{TJ}")
    assert read == []
    assert "inactive" not in obs.cause.detail


async def test_output_reads_rank_0_from_the_worker_that_runs_it() -> None:
    c = Clusters()
    await c.start()
    await worker_runs_it(c, c.w2, "w2")
    c.w2.logs[(NS, f"{TJ}-node-0-0", None)] = [b"hello from w2\n"]
    c.w2.logs[(NS, f"{TJ}-node-0-0", "Stdout")] = [b"hello from w2\n"]
    async with await backend(c) as b, b.output(str(JOB_ID)) as log:
        assert await log.read() == b"hello from w2\n"
    assert (c.w2.calls["log"], c.manager.calls["log"]) == (1, 0)


async def test_output_with_a_log_window_reads_the_worker() -> None:
    """kubectl dispatch logs --tail reads the library's output with its window through the
    backend's workers: in the worker that runs the job."""
    c = Clusters()
    await c.start()
    await worker_runs_it(c, c.w2, "w2")
    c.w2.logs[(NS, f"{TJ}-node-0-0", "Stdout")] = [b"one\ntwo\n"]
    async with await backend(c) as b:
        assert set(b.workers) == {"w1", "w2"}
        async with await output.output(b.kube, NS, JOB_ID, tail_lines=1,
                                       since=timedelta(minutes=5), workers=b.workers) as log:
            await log.read()
    assert (c.w2.calls["log"], c.manager.calls["log"]) == (1, 0)


async def test_stop_job_proves_the_manager_and_every_worker_empty() -> None:
    c = Clusters()
    await c.start()
    await worker_runs_it(c, c.w1, "w1")
    async with await backend(c) as b:
        found = await b.find(str(JOB_ID))
        assert {r.cluster for r in found} == {"", "w1", "w2"}  # w2: the runtime copy
        report = await b.stop_job(str(JOB_ID), "done")
    assert report.complete
    for k in (c.manager, c.w1, c.w2):
        assert not [o for res in (TRAINJOB, TRAINING_RUNTIME, JOBSET, JOB, POD)
                    for o in k.all(res)]
    stopped = {(r.cluster, r.kind, r.name) for r in report.stopped}
    assert ("w1", "Pod", f"{TJ}-node-0-1") in stopped
    assert ("w2", "TrainingRuntime", TJ) in stopped
    assert ("", "TrainJob", TJ) in stopped


async def test_a_worker_stop_job_cannot_read_is_unproven_naming_it() -> None:
    c = Clusters()
    await c.start()
    await worker_runs_it(c, c.w1, "w1")
    c.w1.before = unreachable
    async with await backend(c) as b:
        report = await b.stop_job(str(JOB_ID), "done")
    assert not report.complete
    unread = {(r.cluster, r.kind) for r in report.unproven if not r.name}
    assert {("w1", "Pod"), ("w1", "TrainJob")} <= unread
    assert all(r.cluster == "w1" for r in report.unproven)
    assert len(c.w1.all(POD)) == 2  # still there: the report says so rather than "stopped"


def webhook_refuses_dispatch_pods(verb: str, res: Resource, name: str) -> None:
    """dispatch-admission's pod webhook in a worker, as the API server reports its refusal
    of a pod no approved execution stands behind (tests/cluster prove the real one does)."""
    if verb == "create" and res is POD:
        raise errors.KubeWebhookDenied("admission webhook denied the request", status=403,
                                       reason="Forbidden", webhook=names.WEBHOOK_NAME)


def serving(c: Clusters) -> None:
    """Each worker serves Trainer's, JobSet's and Kueue's APIs, and its dispatch-admission
    webhook refuses the pods of a job that does not exist there."""
    for k in (c.w1, c.w2):
        k.served = {names.TRAINER_GROUP: [names.TRAINER_VERSION],
                    names.JOBSET_GROUP: [names.JOBSET_VERSION],
                    names.KUEUE_GROUP: [names.KUEUE_VERSION]}
        k.before = webhook_refuses_dispatch_pods


async def test_the_preflight_names_what_a_worker_lacks() -> None:
    c = Clusters()
    serving(c)
    await permits(c, {"w1": "dispatch-admission-a", "w2": "dispatch-admission-b"})
    assert await check_workers(c.workers, NS, c.manager) == {}
    assert not c.w1.all(POD)  # a dry run: nothing made
    sg, ai = Capability.START_GATE, Capability.ATTEMPT_INJECTION
    c.w1.denied[("delete", "pods")] = "no"
    c.w2.served.pop(names.TRAINER_GROUP)
    problems = await check_workers(c.workers, NS, c.manager)
    assert list(problems) == [sg]
    w1, w2 = problems[sg]
    assert w1.startswith("worker w1: missing permissions: ")
    assert "delete pods in ns" in w1
    assert w2.startswith("worker w2: the cluster does not serve trainer")
    # A worker whose pods no webhook guards: attempt injection is no there, naming it.
    c.w1.denied.clear()
    c.w1.before = None
    problems = await check_workers(c.workers, NS, c.manager)
    assert problems[ai] == [
        "worker w1: a dry-run pod of a dispatch job that does not exist there was admitted: "
        f"dispatch-admission's pod webhook ({names.WEBHOOK_NAME}) does not guard its pods; "
        "install deploy/admission in its worker mode there"]
    assert not c.w1.all(POD)
    c.w2.before = unreachable
    assert problems[sg][0].startswith("worker w2: the cluster does not serve")
    assert (await check_workers(c.workers, NS, c.manager))[sg][0].startswith(
        "worker w2: could not be checked: ")


async def permits(c: Clusters, holders: dict[str, str]) -> None:
    """Each worker's permit Lease in the manager, renewed by ``holders[worker]`` ("": never
    renewed, as the manager component makes it)."""
    for worker, holder in holders.items():
        await c.manager.create(LEASE, {"metadata": {"name": f"dispatch-worker-{worker}"},
                                       "spec": {"holderIdentity": holder} if holder else {}},
                               names.CONTROLLER_NAMESPACE)


async def test_the_preflight_proves_each_worker_renews_its_permit() -> None:
    """A dispatch-admission not in its worker mode refuses the preflight's dry-run pod as the
    worker mode does, and then refuses every pod MultiKueue's copy makes: only the worker's
    permit, renewed in the manager by its agent, shows the worker mode runs there."""
    c = Clusters()
    serving(c)
    await permits(c, {"w1": ""})  # made, never renewed; w2's not made at all
    problems = await check_workers(c.workers, NS, c.manager)
    assert list(problems) == [Capability.ATTEMPT_INJECTION]
    w1, w2 = problems[Capability.ATTEMPT_INJECTION]
    assert w1.startswith("worker w1: its permit (Lease dispatch-system/dispatch-worker-w1 in "
                         "the manager) was never renewed"), w1
    assert "multikueue-worker" in w1
    assert w2.startswith("worker w2: no permit Lease dispatch-system/dispatch-worker-w2 in "
                         "the manager"), w2
    assert "multikueue-manager" in w2
    # Renewed once (and revoked since, a worker cut off now): its worker mode runs there.
    c.manager.write_now(LEASE, "dispatch-worker-w1", names.CONTROLLER_NAMESPACE, {
        "metadata": {"annotations": {names.PERMIT_REVOKED: "7"}},
        "spec": {"holderIdentity": "dispatch-admission-a"}})
    await permits(c, {"w2": "dispatch-admission-b"})
    assert await check_workers(c.workers, NS, c.manager) == {}


async def test_a_worker_kubeconfig_that_does_not_load_names_the_worker() -> None:
    with pytest.raises(errors.SettingsError) as caught:
        await Workers.connect(SETTINGS, worker_settings(SETTINGS))
    assert caught.value.field == "kueue.multiKueue.workers.w1.kubeconfig"
    assert "kueue.multiKueue.workers.w1" in str(caught.value)


async def test_the_mode_is_chosen_once_by_the_settings() -> None:
    assert select_mode(SETTINGS).name == "multikueue"
    kueue = Settings.parse({"namespace": NS, "probeRuntime": {"name": "r"},
                            "kueue": {"localQueue": "lq"}})
    assert select_mode(kueue).name == "kueue"

"""The adapter against the local cluster in Kueue mode: the seed's tutorial and its edges.

Needs the local cluster (``kubeconfig``/``kube`` fixtures) and the admission controller
(``admission`` fixture: host processes holding the Lease and serving the webhook).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from dispatch_kubeflow import (
    Actor,
    ActorKind,
    Backend,
    CallMeta,
    Capability,
    CapabilityValue,
    ConflictError,
    DeadlineExceeded,
    HoldError,
    HoldMeta,
    Image,
    JobID,
    JobSpec,
    ObjectRef,
    ObjectState,
    Observation,
    ObserveOnlyError,
    OutputStream,
    RuntimeRef,
    SpecError,
    StartRequest,
    errors,
)
from dispatch_kubeflow import start as start_mod
from dispatch_kubeflow import stop as stop_mod
from dispatch_kubeflow.backend import select_mode
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube, Resource
from dispatch_kubeflow.kube import resources as r
from tests.cluster.helpers import (
    IMAGE,
    controller_manager_paused,
    delete_cluster_queue,
    eventually,
    make_queues,
    token_kubeconfig,
    why_not_local,
)
from tests.conftest import LOCAL_CLUSTER

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio]

SCRIPT = ("env | grep '^DISPATCH_' | sort; echo tutorial-ready; trap 'exit 143' TERM; "
          "while :; do sleep 1; done")
# Prints to both streams every second, and takes ~3 s to end after SIGTERM, so a hold
# has a window in which the execution's pods are still there.
TALKER = ("env | grep '^DISPATCH_' | sort; trap 'sleep 3; exit 143' TERM; i=0; "
          "while :; do echo out-$i; echo err-$i >&2; i=$((i+1)); sleep 1; done")


def settings(kubeconfig: str, namespace: str, **kueue: Any) -> dict[str, Any]:
    return {
        "cluster": {"kubeconfig": kubeconfig},
        "namespace": namespace,
        "probeRuntime": {"kind": "ClusterTrainingRuntime", "name": "dispatch-kind"},
        "kueue": {"localQueue": "lq", "admissionCheck": names.ADMISSION_CHECK, **kueue},
        "timeouts": {"request": "10s", "stopJob": "2m", "preflightProbe": "5s"},
    }


def spec(nodes: int = 2, command: str = SCRIPT) -> JobSpec:
    return JobSpec(["/bin/sh", "-c", command], nodes,
                   [Image(IMAGE, "IfNotPresent"), RuntimeRef("ClusterTrainingRuntime",
                                                             "dispatch-kind")])


def deadline(seconds: float = 180) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def hold_meta(instance: int = 1, seconds: float = 60) -> HoldMeta:
    now = datetime.now(UTC)
    return HoldMeta(instance, Actor(ActorKind.HUMAN, "test"),
                    CallMeta(now + timedelta(seconds=seconds)),
                    until=now + timedelta(hours=1), reason="a test's hold")


@pytest_asyncio.fixture
async def queued(kube: Kube, namespace: str) -> AsyncIterator[str]:
    await make_queues(kube, namespace, checks=[names.ADMISSION_CHECK], cpu="1", memory="1Gi")
    try:
        yield namespace
    finally:
        await delete_cluster_queue(kube, namespace)


@pytest_asyncio.fixture
async def backend(kubeconfig: str, queued: str, admission: Any, kube: Kube
                  ) -> AsyncIterator[Backend]:
    await admission.deployed(kube)
    async with await Backend.connect(settings(kubeconfig, queued)) as b:
        yield b


async def held_only_once_pods_are_gone(backend: Backend, kube: Kube,
                                       ref: ObjectRef) -> Observation:
    """Inspect until HELD, asserting HOLDING (with pods seen) before and no pod at HELD."""
    saw_holding_with_pods = False
    while True:
        obs = await backend.inspect(ref)
        pods, _ = await kube.list(r.POD, ref.namespace,
                                  label_selector=names.pods_of(ref.name))
        if obs.state is ObjectState.HELD:
            assert pods == [], "Held reported while a pod of the execution is there"
            assert saw_holding_with_pods
            return obs
        assert obs.state is ObjectState.HOLDING, obs
        saw_holding_with_pods |= obs.pods > 0
        await asyncio.sleep(0.2)


async def objects_of(kube: Kube, namespace: str, job: JobID) -> list[str]:
    out = []
    for res in (r.TRAINJOB, r.TRAINING_RUNTIME, r.WORKLOAD, r.JOBSET, r.JOB, r.POD):
        items, _ = await kube.list(res, namespace)
        out += [f"{res.kind}/{i['metadata']['name']}" for i in items
                if job.lower() in i["metadata"]["name"]]
    return out


async def rank_zero_log(b: Backend, job: JobID, marker: str) -> str:
    async def read() -> str | None:
        try:
            async with await b.output(job, 0, OutputStream.STDOUT) as stream:
                text = (await stream.read()).decode()
        except errors.DispatchError:  # not there yet (a typed answer; a bug raises)
            return None
        return text if marker in text else None

    return await eventually(read, 120, f"{marker!r} in rank 0's log", interval=1)


async def test_preflight_proves_everything(backend: Backend, queued: str) -> None:
    caps = await backend.capabilities()
    for cap in Capability:
        assert caps[cap].value is CapabilityValue.YES, (cap, caps[cap])
    assert caps[Capability.READMISSION_GATE].reason == (
        f"ClusterQueue {queued} lists AdmissionCheck dispatch-admission, whose controller "
        "holds Lease dispatch-system/dispatch-admission")
    assert not backend.observe_only


async def test_tutorial_flow(backend: Backend, kube: Kube, queued: str) -> None:
    job = JobID.new()
    ref = await backend.start(StartRequest(job, 1, 1, spec()))
    assert ref.id == f"{queued}/dj-{job.lower()}-s1"
    obs = await backend.inspect(ref)
    assert obs.state is ObjectState.GATED
    assert obs.cause.detail == ""
    tj = await kube.get(r.TRAINJOB, ref.name, queued)
    assert tj["metadata"]["annotations"][names.ADMISSION_GATED_BY] == names.GATE
    rt = await kube.get(r.TRAINING_RUNTIME, ref.name, queued)
    assert rt["metadata"]["ownerReferences"][0]["uid"] == tj["metadata"]["uid"]
    assert await backend.start(StartRequest(job, 1, 1, spec())) == ref  # idempotent
    with pytest.raises(ConflictError):
        await backend.start(StartRequest(job, 1, 1, spec(nodes=1)))

    await backend.open(ref)
    await backend.open(ref)  # harmless twice
    await eventually(lambda: _state(backend, ref, ObjectState.RUNNING), 180, "running")
    first = await rank_zero_log(backend, job, "tutorial-ready")
    assert f"DISPATCH_ATTEMPT={job}.1.1.1.0" in first
    assert "DISPATCH_EPOCH=1000001" in first

    await backend.hold(ref, hold_meta(1))
    wl = (await kube.list(r.WORKLOAD, queued, label_selector=(
        f"{names.KUEUE_JOB_UID_LABEL}={tj['metadata']['uid']}")))[0][0]
    assert wl["spec"]["active"] is False
    assert set(names.HOLD_ANNOTATIONS) <= set(wl["metadata"]["annotations"])
    held = await eventually(lambda: _state(backend, ref, ObjectState.HELD), 120, "held")
    assert held.hold_instance == 1
    with pytest.raises(HoldError):
        await backend.release(ref, hold_meta(2))
    assert (await backend.inspect(ref)).state is ObjectState.HELD  # the hold stays

    await backend.release(ref, hold_meta(1))
    await eventually(lambda: _state(backend, ref, ObjectState.RUNNING), 180, "running again")
    second = await rank_zero_log(backend, job, "DISPATCH_EPOCH=1000002")
    assert f"DISPATCH_ATTEMPT={job}.1.1.2.0" in second

    report = await backend.stop_job(job, "the test is over")
    assert not report.alive
    assert not report.unproven
    assert any(s.kind == "TrainJob" for s in report.stopped)
    assert await backend.find(job) == ()
    assert await objects_of(kube, queued, job) == []


async def _state(b: Backend, ref: Any, want: ObjectState) -> Any:
    obs = await b.inspect(ref)
    return obs if obs.state is want else None


async def test_foreign_gate_stays(backend: Backend, kube: Kube, queued: str) -> None:
    """A TrainJob made with dispatch's gate and someone else's: Open removes only ours."""
    from dispatch_kubeflow import start as start_mod

    valid = start_mod.validate(StartRequest(JobID.new(), 1, 1, spec()))
    req = valid.request
    source = await kube.get(r.CLUSTER_TRAINING_RUNTIME, "dispatch-kind")
    await kube.create(r.TRAINING_RUNTIME, start_mod.runtime_copy(source, valid, queued), queued)
    body = start_mod.trainjob_body(valid, backend.settings, select_mode(backend.settings))
    body["metadata"]["annotations"][names.ADMISSION_GATED_BY] = \
        f"{names.GATE},example.com/theirs"
    await start_mod.create_trainjob(kube, queued, body)
    ref = await backend.start(req)  # the same request: adopts both, waits for the Workload
    before = await backend.inspect(ref)
    assert before.state is ObjectState.GATED
    assert before.cause.detail == "gated by example.com/theirs"
    await backend.open(ref)
    await backend.open(ref)
    obs = await backend.inspect(ref)
    assert obs.state is ObjectState.GATED
    assert obs.cause.detail == "gated by example.com/theirs"
    ann = (await kube.get(r.TRAINJOB, valid.name, queued))["metadata"]["annotations"]
    assert ann[names.ADMISSION_GATED_BY] == "example.com/theirs"
    report = await backend.stop_job(req.job, "done")
    assert not report.alive


async def test_bad_inputs_leave_nothing(backend: Backend, kube: Kube, queued: str) -> None:
    job = JobID.new()
    bad = [
        StartRequest(job, 1, 1, JobSpec(["true"], 1, [RuntimeRef("ClusterTrainingRuntime",
                                                                "dispatch-kind")])),
        StartRequest(job, 1, 1, JobSpec(["true"], 1, [Image(IMAGE)])),
        StartRequest(job, 1, 1, dataclasses.replace(spec(), nodes=0)),
        StartRequest(job, 10**40, 1, spec()),
        StartRequest(job, 1, 1, JobSpec(["true"], 1, [Image(IMAGE), RuntimeRef(
            "ClusterTrainingRuntime", "no-such-runtime")])),
    ]
    for req in bad:
        with pytest.raises(SpecError):
            await backend.start(req)
    with pytest.raises(SpecError):
        await backend.start(StartRequest("not-a-job-id", 1, 1, spec()))  # type: ignore[arg-type]
    assert await objects_of(kube, queued, job) == []


async def test_cluster_queue_with_on_flavors_is_refused(
        kubeconfig: str, kube: Kube, namespace: str, admission: Any) -> None:
    await admission.deployed(kube)
    await make_queues(kube, namespace, checks=[names.ADMISSION_CHECK],
                      on_flavors=["default-flavor"])
    try:
        async with await Backend.connect(settings(kubeconfig, namespace)) as b:
            st = (await b.capabilities())[Capability.READMISSION_GATE]
            assert st.value is CapabilityValue.NO
            assert "a check limited to some flavors lets workloads on other flavors be " \
                   "admitted without it" in st.reason
            with pytest.raises(ObserveOnlyError) as err:
                await b.start(StartRequest(JobID.new(), 1, 1, spec()))
            assert any("onFlavors" in reason for reason in err.value.reasons)
    finally:
        await delete_cluster_queue(kube, namespace)


async def test_dead_controller_is_observe_only(
        kubeconfig: str, kube: Kube, queued: str, admission: Any) -> None:
    rep = admission.start()
    await admission.wait_leader(kube)
    rep.kill9()  # no release: the Lease goes stale after its duration
    await asyncio.sleep(admission.lease_duration + 1)
    async with await Backend.connect(settings(kubeconfig, queued)) as b:
        st = (await b.capabilities())[Capability.READMISSION_GATE]
        assert st.value is CapabilityValue.NO
        assert "Lease dispatch-system/dispatch-admission" in st.reason
        with pytest.raises(ObserveOnlyError):
            await b.start(StartRequest(JobID.new(), 1, 1, spec()))
        assert await b.find(JobID.new()) == ()  # observing still works


# --- RBAC: a service account that may do only part of what the library needs ---------------

ROLE = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDING = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
CLUSTER_ROLE = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole",
                        namespaced=False)
CLUSTER_ROLE_BINDING = Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings",
                                "ClusterRoleBinding", namespaced=False)
SELF_SUBJECT_REVIEW = Resource("authentication.k8s.io", "v1", "selfsubjectreviews",
                               "SelfSubjectReview", namespaced=False)

# Everything namespaced the library uses except: create and delete pods, patch workloads.
PARTIAL_ROLE = [
    {"apiGroups": [names.TRAINER_GROUP], "resources": ["trainjobs"],
     "verbs": ["create", "get", "list", "watch", "delete", "patch"]},
    {"apiGroups": [names.TRAINER_GROUP], "resources": ["trainingruntimes"],
     "verbs": ["create", "get", "list", "patch", "delete"]},
    {"apiGroups": [names.JOBSET_GROUP], "resources": ["jobsets"], "verbs": ["list", "delete"]},
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list", "delete"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
    {"apiGroups": [names.KUEUE_GROUP], "resources": ["workloads"],
     "verbs": ["get", "list", "watch", "delete"]},
    {"apiGroups": [names.KUEUE_GROUP], "resources": ["localqueues"], "verbs": ["get"]},
]
# Cluster-wide reads; the Lease in dispatch-system is not granted at all.
PARTIAL_CLUSTER_ROLE = [
    {"apiGroups": [names.TRAINER_GROUP], "resources": ["clustertrainingruntimes"],
     "verbs": ["get"]},
    {"apiGroups": [names.KUEUE_GROUP], "resources": ["clusterqueues", "admissionchecks"],
     "verbs": ["get"]},
]


async def test_missing_rbac_is_named(kubeconfig: str, kube: Kube, queued: str,
                                     tmp_path: Path) -> None:
    """A service account granted part of what the library needs: preflight names the rest."""
    ns, sa = queued, "partial"
    cluster_name = f"dispatch-test-{ns}"
    await kube.create(r.SERVICE_ACCOUNT, {"metadata": {"name": sa}}, ns)
    await kube.create(ROLE, {"metadata": {"name": sa}, "rules": PARTIAL_ROLE}, ns)
    await kube.create(ROLE_BINDING, {
        "metadata": {"name": sa},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": sa},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]}, ns)
    await kube.create(CLUSTER_ROLE, {"metadata": {"name": cluster_name},
                                     "rules": PARTIAL_CLUSTER_ROLE})
    try:
        await kube.create(CLUSTER_ROLE_BINDING, {
            "metadata": {"name": cluster_name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": cluster_name},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]})
        issued = await kube.create(
            r.SERVICE_ACCOUNT, {"apiVersion": "authentication.k8s.io/v1",
                              "kind": "TokenRequest", "spec": {"expirationSeconds": 600}},
            ns, name=sa, subresource="token")
        path = token_kubeconfig(kubeconfig, issued["status"]["token"], tmp_path / "sa.yaml")

        # Bearer auth goes through the transport: the server knows who is asking.
        async with await Kube.connect(kubeconfig=path) as as_sa:
            who = await as_sa.create(SELF_SUBJECT_REVIEW, {})
            assert who["status"]["userInfo"]["username"] == f"system:serviceaccount:{ns}:{sa}"
            allowed, why = await as_sa.access_review("list", "trainjobs",
                                                     group=names.TRAINER_GROUP, namespace=ns)
            assert allowed, why
            assert f'RoleBinding "{sa}/{ns}"' in why or "RoleBinding" in why

        async with await Backend.connect(settings(path, ns)) as b:
            caps = await b.capabilities()
            assert b.observe_only
            expected = {
                Capability.START_GATE: [f"delete pods in {ns}"],
                Capability.ATTEMPT_INJECTION: [f"create pods in {ns}"],
                Capability.HOLD: [f"patch workloads.kueue.x-k8s.io in {ns}"],
                Capability.READMISSION_GATE: [
                    "get leases.coordination.k8s.io in dispatch-system",
                    "watch leases.coordination.k8s.io in dispatch-system"],
            }
            for cap, missing in expected.items():
                st = caps[cap]
                assert st.value is CapabilityValue.NO, (cap, st)
                assert st.reason.startswith("missing permissions: "), (cap, st)
                named = st.reason.removeprefix("missing permissions: ").split(", ")
                assert sorted(named) == sorted(missing), (cap, st.reason)
            # What the Role grants is not named anywhere.
            everything = " ".join(st.reason for st in caps.values())
            assert "trainjobs" not in everything
            assert "clustertrainingruntimes" not in everything

            job = JobID.new()
            with pytest.raises(ObserveOnlyError) as err:
                await b.start(StartRequest(job, 1, 1, spec()))
            assert len(err.value.reasons) == 4
            assert any(f"delete pods in {ns}" in reason for reason in err.value.reasons)
            assert any("watch leases.coordination.k8s.io in dispatch-system" in reason
                       for reason in err.value.reasons)
            # Observing still works with the partial grant.
            assert await b.find(job) == ()
            report = await b.stop_job(job, "nothing to stop")
            assert report.stopped == report.alive == report.unproven == ()
            assert await objects_of(kube, ns, job) == []
        # The preflight did not probe (no permission), so no probe TrainJob was made.
        trainjobs, _ = await kube.list(r.TRAINJOB, ns)
        assert trainjobs == []
    finally:
        await kube.delete(CLUSTER_ROLE_BINDING, cluster_name)
        await kube.delete(CLUSTER_ROLE, cluster_name)
    assert await kube.get_or_none(CLUSTER_ROLE_BINDING, cluster_name) is None
    assert await kube.get_or_none(CLUSTER_ROLE, cluster_name) is None



# --- Start: idempotence, conflicts, interruption ----------------------------------------------


async def job_objects(kube: Kube, namespace: str, job: JobID) -> dict[str, list[str]]:
    """Every object of the job by kind, found by its job-id label or its name."""
    out: dict[str, list[str]] = {}
    for res in (r.TRAINJOB, r.TRAINING_RUNTIME, r.WORKLOAD, r.JOBSET, r.JOB, r.POD):
        items, _ = await kube.list(res, namespace)
        hits = sorted(i["metadata"]["name"] for i in items
                      if job.lower() in i["metadata"]["name"]
                      or (i["metadata"].get("labels") or {}).get(names.JOB_ID_LABEL) == str(job))
        if hits:
            out[res.kind] = hits
    return out


async def test_start_is_idempotent_and_refuses_another_spec(
        backend: Backend, kube: Kube, queued: str) -> None:
    job = JobID.new()
    ref = await backend.start(StartRequest(job, 1, 1, spec()))
    again = await backend.start(StartRequest(job, 1, 1, spec()))
    assert again == ref
    assert (await job_objects(kube, queued, job)).get("TrainJob") == [ref.name]
    before_tj = await kube.get(r.TRAINJOB, ref.name, queued)
    before_rt = await kube.get(r.TRAINING_RUNTIME, ref.name, queued)
    for other in (spec(nodes=1), spec(command="echo other"),
                  dataclasses.replace(spec(), extensions=(Image(IMAGE, "Always"), RuntimeRef(
                      "ClusterTrainingRuntime", "dispatch-kind")))):
        with pytest.raises(ConflictError):
            await backend.start(StartRequest(job, 1, 1, other))
    with pytest.raises(ConflictError):
        await backend.start(StartRequest(job, 1, 2, spec()))  # another attempt, same submission
    after_tj = await kube.get(r.TRAINJOB, ref.name, queued)
    after_rt = await kube.get(r.TRAINING_RUNTIME, ref.name, queued)
    # (Controllers update the TrainJob's status meanwhile; what Start writes is unchanged.)
    assert what_start_writes(after_tj) == what_start_writes(before_tj)
    assert what_start_writes(after_rt) == what_start_writes(before_rt)
    assert (await job_objects(kube, queued, job)).get("TrainJob") == [ref.name]
    assert (await backend.inspect(ref)).state is ObjectState.GATED
    report = await backend.stop_job(job, "done")
    assert not report.alive
    assert not report.unproven
    assert await job_objects(kube, queued, job) == {}


def what_start_writes(obj: dict[str, Any]) -> tuple[Any, ...]:
    m = obj["metadata"]
    return (m["uid"], m.get("labels"), m.get("annotations"), m.get("ownerReferences"),
            obj.get("spec"))


async def interrupted_start(backend: Backend, kube: Kube, req: StartRequest, *,
                            with_trainjob: bool) -> str:
    """Write what a Start interrupted after its first (or second) write leaves."""
    valid = start_mod.validate(req)
    source = await kube.get(r.CLUSTER_TRAINING_RUNTIME, "dispatch-kind")
    ns = backend.settings.namespace
    await kube.create(r.TRAINING_RUNTIME, start_mod.runtime_copy(source, valid, ns), ns)
    if with_trainjob:  # the TrainJob made, the copy's ownerReference not yet set
        await start_mod.create_trainjob(kube, ns, start_mod.trainjob_body(
            valid, backend.settings, select_mode(backend.settings)))
    return valid.name


async def test_interrupted_start_is_found_and_stopped(
        backend: Backend, kube: Kube, queued: str) -> None:
    job = JobID.new()
    copy_only = await interrupted_start(backend, kube, StartRequest(job, 1, 1, spec()),
                                        with_trainjob=False)
    both = await interrupted_start(backend, kube, StartRequest(job, 2, 1, spec()),
                                   with_trainjob=True)
    found = {(f.kind, f.name) for f in await backend.find(job)}
    assert {("TrainingRuntime", copy_only), ("TrainingRuntime", both),
            ("TrainJob", both)} <= found
    report = await backend.stop_job(job, "interrupted")
    stopped = {(s.kind, s.name) for s in report.stopped}
    assert {("TrainingRuntime", copy_only), ("TrainingRuntime", both),
            ("TrainJob", both)} <= stopped
    assert not report.alive
    assert not report.unproven
    assert await backend.find(job) == ()
    assert await job_objects(kube, queued, job) == {}


# --- StopJob and find ---------------------------------------------------------------------------


async def running_job(b: Backend, command: str = SCRIPT, nodes: int = 2
                      ) -> tuple[JobID, ObjectRef]:
    job = JobID.new()
    ref = await b.start(StartRequest(job, 1, 1, spec(nodes, command)))
    await b.open(ref)
    await b.wait(ref, ObjectState.RUNNING, deadline=deadline())
    return job, ref


async def test_stop_job_reports_and_leaves_nothing(
        backend: Backend, kube: Kube, queued: str) -> None:
    job, ref = await running_job(backend)
    await eventually(lambda: _pods_running(kube, queued, ref.name, 2), 120, "2 pods running")
    assert {"TrainJob", "TrainingRuntime", "Workload", "JobSet", "Job", "Pod"} <= set(
        await job_objects(kube, queued, job))
    report = await backend.stop_job(job, "the test is over")
    assert not report.alive
    assert not report.unproven
    assert ("TrainJob", ref.name) in {(s.kind, s.name) for s in report.stopped}
    assert await job_objects(kube, queued, job) == {}
    assert await backend.find(job) == ()
    events, _ = await kube.list(r.EVENT, queued)
    assert any(e.get("reason") == "StopJob" and e.get("note") == "the test is over"
               and e["regarding"]["name"] == ref.name for e in events)
    assert (await backend.inspect(ref)).state is ObjectState.GONE


async def test_concurrent_stops_follow_the_backends_informers(
        backend: Backend, kube: Kube, queued: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Three jobs, one running (pods, Jobs, a JobSet) and two queued behind it, stopped at
    # once: no stop opens a watch of its own, each kind is watched once for all three, and
    # every object of every job is gone (read directly, not from the informers).
    jobs = [(await running_job(backend))[0]]
    for _ in range(2):
        job = JobID.new()
        await backend.open(await backend.start(StartRequest(job, 1, 1, spec())))
        jobs.append(job)
    watches: list[tuple[str, str | None]] = []
    kube_of_backend = backend._kube  # what the Backend sends is the point
    real_watch = kube_of_backend.watch

    def counted(res: Resource, namespace: str | None = None, **kw: Any) -> Any:
        watches.append((res.plural, kw.get("label_selector")))
        return real_watch(res, namespace, **kw)

    monkeypatch.setattr(kube_of_backend, "watch", counted)
    # A stop shares a kind's informer only while at least Limits.crowd stops run (or the
    # informer runs already); the two queued jobs' stops may end before the running job's
    # reaches its Jobs, and then that stop, alone, rightly watches them alone (CI,
    # 2026-12-04). Both ways are tests/unit/test_stop_*.py's; here, that concurrent stops
    # share at all.
    monkeypatch.setattr(backend, "_stop_limits", dataclasses.replace(stop_mod.LIMITS, crowd=1))
    reports = await asyncio.gather(*(backend.stop_job(job, "all at once") for job in jobs))
    for job, report in zip(jobs, reports, strict=True):
        assert report.complete, report
        assert await job_objects(kube, queued, job) == {}
    # Only the informers' selectors (a label that exists, or none): a stop's own watch
    # would name its job (job-id=<job>) or its TrainJobs' UIDs (job-uid in (...)).
    assert watches
    assert {sel for _, sel in watches} <= {None, names.JOB_ID_LABEL, names.JOBSET_NAME_LABEL,
                                           names.KUEUE_JOB_UID_LABEL}, watches


async def test_stop_job_ends_though_the_controller_manager_does_not_answer(
        backend: Backend, kube: Kube, queued: str, kubeconfig: str) -> None:
    # The fault suite's seed 6029: after etcd compactions the kube-controller-manager's
    # informers stayed stale, its Job controller never released the job-tracking finalizer
    # of a stopped job's pods, and StopJob ran out its time with them alive. Here the
    # controller manager is stopped outright: no garbage collector and no Job controller.
    # StopJob deletes what lost its owners itself and releases the finalizer of pods whose
    # Job is gone; the kubelet still ends their containers.
    why = why_not_local(kubeconfig, LOCAL_CLUSTER)
    if why:
        pytest.skip(why)
    job, ref = await running_job(backend)
    await eventually(lambda: _pods_running(kube, queued, ref.name, 2), 120, "2 pods running")
    with controller_manager_paused(LOCAL_CLUSTER):
        began = time.monotonic()
        report = await backend.stop_job(job, "the controller manager is down")
        took = time.monotonic() - began
        left = await job_objects(kube, queued, job)
    assert not report.alive, (report.alive, left)
    assert not report.unproven
    assert left == {}
    assert {"TrainJob", "JobSet", "Job", "Pod", "Workload"} <= {s.kind for s in report.stopped}
    assert took < 60, took  # the pods end on TERM at once; well inside timeouts.stopJob


async def _pods_running(kube: Kube, ns: str, name: str, n: int) -> bool:
    pods, _ = await kube.list(r.POD, ns, label_selector=names.pods_of(name))
    return sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running") >= n


async def test_find_returns_orphans_and_stop_job_removes_them(
        backend: Backend, kube: Kube, queued: str) -> None:
    job, ref = await running_job(backend)
    await eventually(lambda: _pods_running(kube, queued, ref.name, 2), 120, "2 pods running")
    # Someone deletes the TrainJob and orphans everything beneath it.
    await kube.delete(r.TRAINJOB, ref.name, queued, propagation="Orphan")
    await eventually(lambda: _gone(kube, r.TRAINJOB, ref.name, queued), 60, "TrainJob gone")
    found = {f.kind for f in await backend.find(job)}
    assert {"TrainingRuntime", "Workload", "JobSet", "Job", "Pod"} <= found, found
    assert "TrainJob" not in found
    report = await backend.stop_job(job, "orphans")
    stopped = {s.kind for s in report.stopped}
    assert {"TrainingRuntime", "Workload", "JobSet", "Job", "Pod"} <= stopped, report
    assert not report.alive
    assert not report.unproven
    assert await backend.find(job) == ()
    assert await job_objects(kube, queued, job) == {}


async def _gone(kube: Kube, res: Resource, name: str, ns: str) -> bool:
    return await kube.get_or_none(res, name, ns) is None


# --- Output --------------------------------------------------------------------------------------


async def test_output_follows_without_blocking_and_splits_streams(
        backend: Backend, kube: Kube, queued: str) -> None:
    job, _ = await running_job(backend, TALKER, nodes=1)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.02)
            ticks += 1

    async def open_when_there(stream: OutputStream, follow: bool) -> Any:
        async def try_open() -> Any:
            try:
                return await backend.output(job, 0, stream, follow)
            except errors.DispatchError:  # the container may not have started yet
                return None
        return await eventually(try_open, 60, f"rank 0's {stream} log")

    tick_task = asyncio.create_task(ticker())
    try:
        stream = await open_when_there(OutputStream.STDOUT, True)
        assert stream.split
        arrivals: dict[str, float] = {}
        started = time.monotonic()
        ticks_at_start = ticks
        buf = b""
        async with stream:
            async for chunk in stream:
                buf += chunk
                for line in buf.decode().splitlines():
                    arrivals.setdefault(line, time.monotonic())
                outs = [ln for ln in arrivals if ln.startswith("out-")]
                if len(outs) >= 5 and time.monotonic() - started > 3:
                    break
        elapsed = time.monotonic() - started
    finally:
        tick_task.cancel()
    timed = sorted((t, ln) for ln, t in arrivals.items() if ln.startswith("out-"))
    # Lines came as they were printed (about one a second), not all at the end.
    assert timed[-1][0] - timed[0][0] >= 2.0, timed
    # The event loop kept running while the stream was read.
    assert ticks - ticks_at_start >= elapsed / 0.02 * 0.5, (ticks - ticks_at_start, elapsed)
    assert not any(ln.startswith("err-") for ln in arrivals)

    async with await open_when_there(OutputStream.STDERR, False) as err:
        text = (await err.read()).decode()
    assert "err-0" in text
    assert "out-" not in text
    assert "DISPATCH_" not in text
    async with await open_when_there(OutputStream.STDOUT, False) as out:
        text = (await out.read()).decode()
    assert "out-0" in text
    assert "err-" not in text
    async with await open_when_there(OutputStream.ALL, False) as both:
        text = (await both.read()).decode()
    assert "out-0" in text
    assert "err-0" in text
    await backend.stop_job(job, "done")


async def test_output_is_of_the_current_execution(
        backend: Backend, kube: Kube, queued: str) -> None:
    job, ref = await running_job(backend, TALKER, nodes=1)
    first = await rank_zero_log(backend, job, "out-0")
    assert f"DISPATCH_ATTEMPT={job}.1.1.1.0" in first
    async with await backend.output(job) as s:
        first_pod = s.pod
    await backend.hold(ref, hold_meta(1))
    await backend.wait(ref, ObjectState.HELD, deadline=deadline())
    await backend.release(ref, hold_meta(1))
    await backend.wait(ref, ObjectState.RUNNING, deadline=deadline())
    # The new execution's pod exists from here on: Output reads it, not the old one.
    second = await rank_zero_log(backend, job, "DISPATCH_EPOCH=")
    assert f"DISPATCH_ATTEMPT={job}.1.1.2.0" in second
    assert "DISPATCH_EPOCH=1000002" in second
    assert ".1.1.1.0" not in second
    async with await backend.output(job) as s:
        assert s.pod != first_pod
    await backend.stop_job(job, "done")


# --- Hold and release ----------------------------------------------------------------------------


async def test_hold_and_release_rules(backend: Backend, kube: Kube, queued: str) -> None:
    job, ref = await running_job(backend, TALKER, nodes=2)
    await eventually(lambda: _pods_running(kube, queued, ref.name, 2), 120, "2 pods running")
    tj = await kube.get(r.TRAINJOB, ref.name, queued)

    async def workload() -> dict[str, Any]:
        items, _ = await kube.list(r.WORKLOAD, queued, label_selector=(
            f"{names.KUEUE_JOB_UID_LABEL}={tj['metadata']['uid']}"))
        return items[0]

    # A hold whose deadline has passed changes nothing.
    with pytest.raises(DeadlineExceeded):
        await backend.hold(ref, hold_meta(1, seconds=-1))
    wl = await workload()
    assert wl["spec"]["active"] is True
    assert not set(names.HOLD_ANNOTATIONS) & set(wl["metadata"].get("annotations") or {})
    assert (await backend.inspect(ref)).state is ObjectState.RUNNING

    # Held only once no pod of the execution remains; holding while any is there.
    await backend.hold(ref, hold_meta(1))
    obs = await held_only_once_pods_are_gone(backend, kube, ref)
    assert obs.hold_instance == 1

    # Release of another instance: HoldError, and the hold stays.
    with pytest.raises(HoldError):
        await backend.release(ref, hold_meta(2))
    # A release whose deadline has passed changes nothing either.
    with pytest.raises(DeadlineExceeded):
        await backend.release(ref, hold_meta(1, seconds=-1))
    wl = await workload()
    assert wl["spec"]["active"] is False
    assert wl["metadata"]["annotations"][names.HOLD_INSTANCE] == "1"
    obs = await backend.inspect(ref)
    assert obs.state is ObjectState.HELD
    assert obs.hold_instance == 1

    await backend.release(ref, hold_meta(1))
    obs = await backend.wait(ref, ObjectState.RUNNING, deadline=deadline())
    assert obs.admissions == 2
    wl = await workload()
    assert not set(names.HOLD_ANNOTATIONS) & set(wl["metadata"].get("annotations") or {})
    report = await backend.stop_job(job, "done")
    assert not report.alive

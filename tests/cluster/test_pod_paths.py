"""The promise on paths that make a pod without passing the readmission gate (issue 26).

Each test is a path seen on the real cluster to break "never two executions at once, every
execution a strictly higher identity" before the pod became the last fence
(dispatch_kubeflow.core.execution): a JobSet deleted under a running job, a later attempt
after StopJob, a rank that finished before a hold, a held job's Workload deleted, a
ClusterQueue that stops listing the check. Pods are judged from a watch of the job's pods,
in the order the API server reports them, not from samples. Then a controller killed right
after each of the writes those paths added, and the path found by reading: a Workload in
deletion.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dispatch_kubeflow import (
    Actor,
    ActorKind,
    Backend,
    CallMeta,
    HoldMeta,
    JobID,
    ObjectRef,
    ObjectState,
    StartRequest,
)
from dispatch_kubeflow.core import errors, names
from dispatch_kubeflow.core.execution import is_alive
from dispatch_kubeflow.core.scheduling_gate import gated, lift_patch
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r
from tests.cluster.admission_fixture import AdmissionHandle, Replica
from tests.cluster.helpers import eventually, pods_of
from tests.cluster.test_adapter_kueue import (  # noqa: F401  (fixtures)
    backend,
    deadline,
    hold_meta,
    queued,
    rank_zero_log,
    spec,
)
from tests.cluster.test_admission_cluster import admission_count, workload

pytestmark = [pytest.mark.cluster, pytest.mark.paths, pytest.mark.asyncio]

LINGER = 20
"""Seconds an old pod spends in its TERM handler (a checkpoint on TERM)."""
LINGERING = ("env | grep '^DISPATCH_' | sort; echo ready; "
             f"trap 'sleep {LINGER}; exit 143' TERM; while :; do sleep 1; done")
RANK_ONE_ENDS = ("env | grep '^DISPATCH_' | sort; echo ready; "
                 'if [ "$JOB_COMPLETION_INDEX" = 1 ]; then exit 0; fi; '
                 "trap 'exit 143' TERM; while :; do sleep 1; done")


def attempt_of(pod: dict[str, Any]) -> str:
    for c in (pod.get("spec") or {}).get("containers") or []:
        for e in c.get("env") or []:
            if e.get("name") == names.ENV_ATTEMPT:
                return str(e.get("value"))
    return ""


@dataclass
class PodLog:
    """What a watch of the job's pods reported, in order: (type, pod) pairs."""

    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    synced: list[dict[str, Any]] = field(default_factory=list)
    """The pods there when the watch began."""

    def terminating(self, attempt: str) -> list[dict[str, Any]]:
        """The pods with identity ``attempt`` the watch saw being deleted (lingering in a
        TERM handler): that a test's old execution really overlapped its fault."""
        return [p for _, p in self.events
                if attempt_of(p) == attempt and p["metadata"].get("deletionTimestamp")]

    def overlaps(self) -> list[str]:
        """Pairs of pods alive at once that are not different ranks of one execution (the
        checker's rule): same rank, or another JobSet, A or J."""
        alive: dict[str, dict[str, Any]] = {}
        bad: list[str] = []
        for typ, pod in self.events:
            name = pod["metadata"]["name"]
            if typ == "DELETED" or not is_alive(pod):
                alive.pop(name, None)
                continue
            if (pod.get("status") or {}).get("phase") != "Running":
                continue
            alive[name] = pod
            me = _who(pod)
            for other_name, other in alive.items():
                if other_name != name and (_who(other)[:2] != me[:2] or _who(other)[2] == me[2]):
                    bad.append(f"{name} {me} beside {other_name} {_who(other)}")
        return bad


def _who(pod: dict[str, Any]) -> tuple[str, str, str]:
    labels = pod["metadata"].get("labels") or {}
    return (str(labels.get(names.JOBSET_UID_LABEL)), attempt_of(pod),
            str(labels.get(names.COMPLETION_INDEX_LABEL)))


@contextlib.asynccontextmanager
async def watching(kube: Kube, ref: ObjectRef) -> AsyncIterator[PodLog]:
    log = PodLog()

    async def pump() -> None:
        stream = kube.observe(r.POD, ref.namespace,
                              label_selector=names.pods_of(ref.name))
        async for ev in stream:
            if ev.type == "SYNC":
                if not log.events:
                    log.synced = list(ev.items)
                log.events += [("ADDED", o) for o in ev.items]
            else:
                log.events.append((ev.type, ev.object))

    task = asyncio.create_task(pump())
    try:
        yield log
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def running(b: Backend, command: str, attempt: int = 1,
                  job: JobID | None = None) -> tuple[JobID, ObjectRef]:
    job = job or JobID.new()
    ref = await b.start(StartRequest(job, 1, attempt, spec(2, command)))
    await b.open(ref)
    await b.wait(ref, ObjectState.RUNNING, deadline=deadline())
    return job, ref


async def running_pods(kube: Kube, ref: ObjectRef, n: int) -> list[dict[str, Any]] | None:
    pods = [p for p in await pods_of(kube, ref.namespace, ref.name)
            if (p.get("status") or {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")]
    return pods if len(pods) >= n else None


async def runs_again_at_a_two(backend: Backend, ref: ObjectRef,  # noqa: F811
                              job: JobID) -> None:
    """A held job, released (or its hold expired), runs again at A = 2; then it is stopped,
    leaving nothing alive."""
    obs = await backend.wait(ref, ObjectState.RUNNING, deadline=deadline(120))
    assert obs.admissions == 2
    await rank_zero_log(backend, job, f"{job}.1.1.2.0")
    assert not (await backend.stop_job(job, "done")).alive


async def test_a_deleted_jobset_is_a_new_execution_after_the_old_pods(
        backend: Backend, kube: Kube, queued: str) -> None:  # noqa: F811
    """Case 1: `kubectl delete jobset` under a running job. Trainer re-makes the JobSet at
    once under the Workload Kueue still holds admitted; its pods must wait for the old ones
    (in a 20 s TERM handler), and run with A raised."""
    job, ref = await running(backend, LINGERING)
    old = await eventually(lambda: running_pods(kube, ref, 2), 120, "2 pods running")
    old_uid = old[0]["metadata"]["labels"][names.JOBSET_UID_LABEL]
    assert {attempt_of(p) for p in old} == {f"{job}.1.1.1.0"}
    async with watching(kube, ref) as log:
        await kube.delete(r.JOBSET, ref.name, queued)  # background, as kubectl does

        async def new_running() -> list[dict[str, Any]] | None:
            pods = await running_pods(kube, ref, 2)
            if pods and all(p["metadata"]["labels"][names.JOBSET_UID_LABEL] != old_uid
                            for p in pods):
                return pods
            return None

        new = await eventually(new_running, LINGER + 150, "the re-made JobSet's pods running")
    assert log.overlaps() == []
    # A rises past every identity the old JobSet could reach: 1 + its maxRestarts (3 in
    # dispatch-kind), since the new JobSet's J starts at 0 again (core.execution.raise_step).
    assert {attempt_of(p) for p in new} == {f"{job}.1.1.5.0"}, "A must rise past the old J"
    tj = await kube.get(r.TRAINJOB, ref.name, queued)
    assert tj["metadata"]["annotations"][names.APPROVED_JOBSET] == \
        new[0]["metadata"]["labels"][names.JOBSET_UID_LABEL]
    assert not (await backend.stop_job(job, "done")).alive


RANK_ZERO_FAILS_FIRST = (
    "env | grep '^DISPATCH_' | sort; echo ready; "
    'case "$DISPATCH_ATTEMPT" in *.0) if [ "$JOB_COMPLETION_INDEX" = 0 ]; then sleep 3; '
    "exit 1; fi;; esac; "
    f"trap 'sleep {LINGER}; exit 143' TERM; while :; do sleep 1; done")


async def test_a_jobset_restart_waits_for_the_lingering_ranks(
        backend: Backend, kube: Kube, queued: str) -> None:  # noqa: F811
    """JobSet's own restart (J + 1) is not the gate's: rank 0 fails at J = 0 while rank 1
    spends 20 s in its TERM handler; the restarted execution's pods (J = 1) must not run
    beside it, and then run at .1.1.1.1."""
    job = JobID.new()
    ref = await backend.start(StartRequest(job, 1, 1, spec(2, RANK_ZERO_FAILS_FIRST)))
    async with watching(kube, ref) as log:
        await backend.open(ref)

        async def restarted() -> list[dict[str, Any]] | None:
            pods = await running_pods(kube, ref, 2)
            return pods if pods and all(attempt_of(p) == f"{job}.1.1.1.1" for p in pods) \
                else None

        await eventually(restarted, LINGER + 180, "the restarted execution's pods running")
    assert log.overlaps() == []
    assert log.terminating(f"{job}.1.1.1.0"), \
        "no pod of J = 0 was seen terminating: the test tried nothing"
    assert not (await backend.stop_job(job, "done")).alive


async def test_a_later_attempt_runs_above_every_execution_of_the_earlier_one(
        backend: Backend, kube: Kube, queued: str) -> None:  # noqa: F811
    """Case 2: attempt 1 held and released (epoch 1000002), stopped; attempt 2 of the same
    job and submission is a new TrainJob whose A starts again, and must still run higher."""
    job, ref = await running(backend, LINGERING.replace(str(LINGER), "1"))
    await backend.hold(ref, hold_meta(1))
    await backend.wait(ref, ObjectState.HELD, deadline=deadline())
    await backend.release(ref, hold_meta(1))
    await backend.wait(ref, ObjectState.RUNNING, deadline=deadline())
    first = await rank_zero_log(backend, job, f"{names.ENV_EPOCH}=1000002")
    assert f"{job}.1.1.2.0" in first
    assert not (await backend.stop_job(job, "attempt 1 is over")).alive
    _, ref2 = await running(backend, SCRIPT_READY, attempt=2, job=job)
    second = await rank_zero_log(backend, job, f"{names.ENV_EPOCH}=1010001")
    assert f"{job}.1.2.1.0" in second
    assert ref2.name == ref.name  # the same TrainJob name: only the attempt tells them apart
    assert not (await backend.stop_job(job, "done")).alive


SCRIPT_READY = ("env | grep '^DISPATCH_' | sort; echo ready; trap 'exit 143' TERM; "
                "while :; do sleep 1; done")


async def test_a_rank_that_finished_before_a_hold_never_blocks(
        backend: Backend, kube: Kube, queued: str) -> None:  # noqa: F811
    """Case 3: rank 1 exits 0 while rank 0 runs on; then Hold. The suspended Indexed Job
    keeps rank 1's Succeeded pod: the job must still be held, and released run again."""
    job, ref = await running(backend, RANK_ONE_ENDS)

    async def rank_one_done() -> bool:
        return any((p.get("status") or {}).get("phase") == "Succeeded"
                   for p in await pods_of(kube, queued, ref.name))

    await eventually(rank_one_done, 120, "rank 1 Succeeded")
    await backend.hold(ref, hold_meta(1))
    held = await backend.wait(ref, ObjectState.HELD, deadline=deadline(120))
    assert held.hold_instance == 1
    await backend.release(ref, hold_meta(1))
    obs = await backend.wait(ref, ObjectState.RUNNING, deadline=deadline(60))
    assert obs.admissions == 2
    # Every pod of the new execution carries its new identity; the finished rank is not
    # run again (its Job keeps the completed index), and keeps the old one.
    pods = await eventually(lambda: running_pods(kube, ref, 1), 60, "rank 0 running again")
    assert {attempt_of(p) for p in pods} == {f"{job}.1.1.2.0"}
    assert not (await backend.stop_job(job, "done")).alive


async def test_a_held_job_whose_workload_is_deleted_stays_held(
        backend: Backend, kube: Kube, queued: str) -> None:  # noqa: F811
    """Case 4: the Workload of a held job is deleted (by anyone; Kueue re-makes Workloads
    itself too). Kueue makes a new, active Workload at once: nothing may run until Release,
    Inspect says held with the same instance, and Release runs the job again, higher."""
    job, ref = await running(backend, SCRIPT_READY)
    await backend.hold(ref, hold_meta(1))
    await backend.wait(ref, ObjectState.HELD, deadline=deadline())
    old = await workload(kube, queued, ref.name)
    assert old is not None
    async with watching(kube, ref) as log:
        deleted_at = datetime.now(UTC)
        await kube.delete(r.WORKLOAD, old["metadata"]["name"], queued)

        async def remade() -> dict[str, Any] | None:
            wl = await workload(kube, queued, ref.name)
            return wl if wl is not None and wl["metadata"]["uid"] != old["metadata"]["uid"] \
                else None

        new = await eventually(remade, 60, "Kueue's new Workload")
        await asyncio.sleep(60)  # nothing may run meanwhile
        inspected = await backend.inspect(ref)
    # The held execution's pods may still be there (Failed, being deleted): only a pod made
    # after the delete, or one seen running, would be a held job running.
    before = {p["metadata"]["uid"] for p in log.synced}
    started = {p["metadata"]["name"] for _, p in log.events
               if p["metadata"]["uid"] not in before
               or (p.get("status") or {}).get("phase") == "Running"}
    assert not started, f"pods of a held job ran after {deleted_at}: " + "; ".join(
        f"{typ} {p['metadata']['name']} made {p['metadata'].get('creationTimestamp')} "
        f"{(p.get('status') or {}).get('phase')} {attempt_of(p)} "
        f"deleting {p['metadata'].get('deletionTimestamp')}"
        for typ, p in log.events if p["metadata"]["name"] in started)
    assert inspected.state is ObjectState.HELD, inspected
    assert inspected.hold_instance == 1
    held = await kube.get(r.WORKLOAD, new["metadata"]["name"], queued)
    assert held["spec"]["active"] is False  # the controller put the hold back
    assert held["metadata"]["annotations"][names.HOLD_INSTANCE] == "1"
    await backend.release(ref, hold_meta(1))
    await runs_again_at_a_two(backend, ref, job)


async def test_a_queue_that_drops_the_check_runs_no_pod_beside_the_old_one(
        backend: Backend, kube: Kube, queued: str) -> None:  # noqa: F811
    """Case 6: an admin removes the check from the ClusterQueue while a held job's old pods
    are in their TERM handler, then the job is released: Kueue admits at once, without the
    gate. No pod of the job may run beside the old ones, nor after them (the gate approved
    no admission since)."""
    job, ref = await running(backend, LINGERING)
    await eventually(lambda: running_pods(kube, ref, 2), 120, "2 pods running")
    async with watching(kube, ref) as log:
        await backend.hold(ref, hold_meta(1))
        await eventually(lambda: _terminating(kube, ref), 60, "the old pods terminating")
        await kube.patch(r.CLUSTER_QUEUE, queued,
                         {"spec": {"admissionChecksStrategy": None}}, kind="merge")
        await backend.release(ref, hold_meta(1))
        await asyncio.sleep(LINGER + 10)  # the old pods' whole TERM handler, and then some
    assert log.overlaps() == []
    # Nor after them: Kueue's admission without the check is not one the gate approved, so
    # a pod now would run the job again at the identity it ran at before.
    before = {p["metadata"]["uid"] for p in log.synced}
    made = sorted({f"{p['metadata']['name']} {attempt_of(p)}" for _, p in log.events
                   if p["metadata"]["uid"] not in before})
    assert made == [], f"pods of an admission the gate never approved: {made}"
    assert not (await backend.stop_job(job, "done")).alive


async def _terminating(kube: Kube, ref: ObjectRef) -> bool:
    pods = await pods_of(kube, ref.namespace, ref.name)
    return bool(pods) and all(p["metadata"].get("deletionTimestamp") for p in pods)


# --- a controller crash right after each new write ---------------------------------------
# The model crashes a replica at every step (verify/readmission.pml); these kill the one
# replica right after the write, before its Event or anything else, and let the next
# leader carry on from what the cluster holds.


async def _killed(crasher: Replica, what: str) -> None:
    await eventually(lambda: asyncio.sleep(0, not crasher.alive()), 150,
                     f"the controller killing itself {what}")
    assert crasher.proc.returncode == -signal.SIGKILL, crasher.log_text()[-3000:]


async def test_a_crash_right_after_a_rebind_raises_a_once(
        backend: Backend, kube: Kube, queued: str,  # noqa: F811
        admission: AdmissionHandle) -> None:
    """The rebind's raise (A and the new JobSet, one write fenced by the TrainJob's
    resourceVersion) lands and the controller dies: the next leader finds the JobSet
    approved, raises nothing more, and the re-made JobSet runs at that A."""
    job, ref = await running(backend, SCRIPT_READY)
    await eventually(lambda: running_pods(kube, ref, 2), 120, "2 pods running")
    crasher = admission.start(args=("--fault", "kill-after-rebind"))
    await admission.wait_leader(kube, among=[crasher], limit=60)
    await kube.delete(r.JOBSET, ref.name, queued)
    await _killed(crasher, "after the rebind")
    tj = await kube.get(r.TRAINJOB, ref.name, queued)
    jobset = await kube.get(r.JOBSET, ref.name, queued)
    # 1 + 1 + maxRestarts (3): past every J the old JobSet had
    assert tj["metadata"]["annotations"][names.ADMISSION_COUNT] == "5"
    assert tj["metadata"]["annotations"][names.APPROVED_JOBSET] == jobset["metadata"]["uid"]
    admission.start()

    async def new_running() -> list[dict[str, Any]] | None:
        pods = await running_pods(kube, ref, 2)
        return pods if pods and {attempt_of(p) for p in pods} == {f"{job}.1.1.5.0"} else None

    await eventually(new_running, 180, "the re-made JobSet's pods running at A = 5")
    await asyncio.sleep(5)  # a second raise would come now, if any
    assert await admission_count(kube, queued, ref.name) == 5
    assert not (await backend.stop_job(job, "done")).alive


async def test_a_crash_right_after_a_hold_copy_keeps_the_job_held(
        backend: Backend, kube: Kube, queued: str,  # noqa: F811
        admission: AdmissionHandle) -> None:
    """The hold put back on a held job's re-made Workload (one merge patch fenced by the
    Workload's resourceVersion) lands and the controller dies: the Workload stays held under
    the next leader, nothing runs, and Release runs the job with A raised once."""
    job, ref = await running(backend, SCRIPT_READY)
    await backend.hold(ref, hold_meta(1))
    await backend.wait(ref, ObjectState.HELD, deadline=deadline())
    crasher = admission.start(args=("--fault", "kill-after-hold-copy"))
    await admission.wait_leader(kube, among=[crasher], limit=60)
    old = await workload(kube, queued, ref.name)
    assert old is not None
    await kube.delete(r.WORKLOAD, old["metadata"]["name"], queued)
    await _killed(crasher, "after putting the hold back")
    new = await workload(kube, queued, ref.name)
    assert new is not None
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert new["spec"]["active"] is False
    assert new["metadata"]["annotations"][names.HOLD_INSTANCE] == "1"
    async with watching(kube, ref) as log:
        admission.start()
        await asyncio.sleep(20)  # nothing may run meanwhile
        inspected = await backend.inspect(ref)
    before = {p["metadata"]["uid"] for p in log.synced}
    assert [p["metadata"]["name"] for _, p in log.events
            if p["metadata"]["uid"] not in before] == []
    assert (inspected.state, inspected.hold_instance) == (ObjectState.HELD, 1)
    assert await admission_count(kube, queued, ref.name) == 1
    await backend.release(ref, hold_meta(1))
    await runs_again_at_a_two(backend, ref, job)


async def test_a_crash_between_the_writes_of_a_hold_expiry_still_releases(
        backend: Backend, kube: Kube, queued: str,  # noqa: F811
        admission: AdmissionHandle) -> None:
    """A hold expires: the controller clears the TrainJob's record (a merge patch; a 409
    is judged again) and dies before it releases the Workload. The Workload's record still
    says the hold is over, so the next leader releases it, and the job runs again."""
    crasher = admission.start(args=("--fault", "kill-after-expiry-clear"))
    await admission.wait_leader(kube, among=[crasher], limit=60)
    job, ref = await running(backend, SCRIPT_READY)
    now = datetime.now(UTC)
    meta = HoldMeta(1, Actor(ActorKind.HUMAN, "test"), CallMeta(now + timedelta(seconds=60)),
                    until=now + timedelta(seconds=20), reason="a test's short hold")
    await backend.hold(ref, meta)
    await backend.wait(ref, ObjectState.HELD, deadline=deadline())
    await _killed(crasher, "after clearing the expired hold's TrainJob record")
    tj = await kube.get(r.TRAINJOB, ref.name, queued)
    assert names.HOLD_INSTANCE not in (tj["metadata"].get("annotations") or {})
    wl = await workload(kube, queued, ref.name)
    assert wl is not None
    assert wl["spec"]["active"] is False
    assert (await backend.inspect(ref)).state is ObjectState.HELD
    admission.start()
    await runs_again_at_a_two(backend, ref, job)


# --- found by reading --------------------------------------------------------------------
KEEP = "dispatch.test/keep"
"""A finalizer of the test's own: the Workload stays in deletion until the test lets go."""


async def _keep(kube: Kube, ns: str, name: str, keep: bool) -> None:
    """Add or remove KEEP, fenced by the version read (Kueue's own finalizer stays), again
    after a 409: Kueue writes a new Workload often."""
    for _ in range(20):
        wl = await kube.get_or_none(r.WORKLOAD, name, ns)
        if wl is None:
            return
        finalizers = [f for f in wl["metadata"].get("finalizers") or [] if f != KEEP]
        try:
            await kube.patch(r.WORKLOAD, name, {"metadata": {
                "resourceVersion": wl["metadata"]["resourceVersion"],
                "finalizers": [*finalizers, KEEP] if keep else finalizers}}, ns, kind="merge")
            return
        except errors.KubeConflict:
            await asyncio.sleep(0.2)
    raise AssertionError(f"the finalizer {KEEP} of Workload {name}: 20 conflicts")


async def test_a_workload_being_deleted_never_raises_a(
        backend: Backend, kube: Kube, queued: str,  # noqa: F811
        admission: AdmissionHandle) -> None:
    """Found by reading: decide() takes a Workload in deletion for a pending one, and Kueue
    even reserves quota for it. The controller judges it and must raise nothing (its live
    read before the raise sees the deletion); once it is gone, Kueue's new Workload is the
    admission, at A = 1."""
    admission.none()  # while the stage is set: the check inactive, no quota reserved
    job = JobID.new()
    ref = await backend.start(StartRequest(job, 1, 1, spec(2, SCRIPT_READY)))
    await backend.open(ref)
    old = await eventually(lambda: workload(kube, queued, ref.name), 60, "Kueue's Workload")
    name = old["metadata"]["name"]
    await _keep(kube, queued, name, True)
    try:
        await kube.delete(r.WORKLOAD, name, queued)
        rep = admission.start()

        async def reserved() -> bool:
            wl = await kube.get(r.WORKLOAD, name, queued)
            return bool(wl["metadata"].get("deletionTimestamp")) and any(
                c["type"] == "QuotaReserved" and c["status"] == "True"
                for c in (wl.get("status") or {}).get("conditions") or [])

        await eventually(reserved, 60, "quota reserved for the Workload in deletion")

        async def judged() -> bool:
            return ("being deleted since it was judged" in rep.log_text()
                    or await admission_count(kube, queued, ref.name) > 0)

        await eventually(judged, 30, "the controller judging the Workload in deletion")
        await asyncio.sleep(5)  # a raise or a Ready would land now
        assert await admission_count(kube, queued, ref.name) == 0
        deleting = await kube.get(r.WORKLOAD, name, queued)
        checks = (deleting.get("status") or {}).get("admissionChecks") or []
        assert [c["state"] for c in checks] == ["Pending"]
    finally:
        await _keep(kube, queued, name, False)
    obs = await backend.wait(ref, ObjectState.RUNNING, deadline=deadline(120))
    assert obs.admissions == 1
    await rank_zero_log(backend, job, f"{job}.1.1.1.0")
    new = await workload(kube, queued, ref.name)
    assert new is not None
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    tj = await kube.get(r.TRAINJOB, ref.name, queued)
    assert tj["metadata"]["annotations"][names.ADMISSION_TOKEN].startswith(
        new["metadata"]["uid"])
    assert not (await backend.stop_job(job, "done")).alive


# --- the start, judged after the pod is stored -------------------------------------------
async def test_a_stored_pod_starts_only_when_its_gate_lift_is_judged(
        backend: Backend, kube: Kube, queued: str,  # noqa: F811
        admission: AdmissionHandle) -> None:
    """Every dispatch pod is stored behind dispatch's scheduling gate, and the webhook
    judges the gate's lift after the pod is stored, whoever sends it. Here the controller
    asks for no lift (a fault), and the test lifts the gate of a pod of a held job itself:
    refused, saying why; the pod never runs, and the readmission waits for it to go."""
    job, ref = await running(backend, SCRIPT_READY)
    pods = await eventually(lambda: running_pods(kube, ref, 2), 120, "2 pods running")
    assert all(not gated(p) for p in pods)  # lifted: the controller started them
    admission.start(args=("--fault", "no-gate-lift"))
    # A pod of the running execution, for a rank it does not have: admitted, and gated.
    labels = {k: v for k, v in pods[0]["metadata"]["labels"].items()
              if k.startswith((names.DOMAIN, "jobset.sigs.k8s.io"))}
    extra = await kube.create(r.POD, {
        "metadata": {"name": f"{ref.name}-extra",
                     "labels": {**labels, names.COMPLETION_INDEX_LABEL: "7"}},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "node", "image": pods[0]["spec"]["containers"][0][
                     "image"], "command": ["sh", "-c", "sleep 600"]}]}}, queued)
    assert gated(extra)
    await backend.hold(ref, hold_meta(1))

    async def others_gone() -> bool:
        return all(p["metadata"]["name"] == extra["metadata"]["name"]
                   for p in await pods_of(kube, queued, ref.name))

    await eventually(others_gone, 120, "the held execution's pods gone")
    with pytest.raises(errors.KubeWebhookDenied) as refused:
        await kube.patch(r.POD, extra["metadata"]["name"], lift_patch(extra), queued,
                         kind="json")
    assert refused.value.webhook == names.WEBHOOK_NAME
    assert "is held" in refused.value.denial
    assert job in refused.value.denial
    stored = await kube.get(r.POD, extra["metadata"]["name"], queued)
    assert gated(stored)
    assert (stored.get("status") or {}).get("phase") == "Pending"
    assert not (stored.get("spec") or {}).get("nodeName")
    await kube.delete(r.POD, extra["metadata"]["name"], queued, grace_period=0)
    await admission.deployed(kube)
    await backend.release(ref, hold_meta(1))
    obs = await backend.wait(ref, ObjectState.RUNNING, deadline=deadline(120))
    assert obs.admissions == 2
    assert not (await backend.stop_job(job, "done")).alive

"""A hold outlives its Workload (issue 26, case 4): the record on the TrainJob, the library's
order of writes, the controller that never approves a held job and puts the hold back on a
re-made Workload, and the expiry that clears both. Against the fake port; what Kueue does
with a deleted Workload is tests/cluster/test_pod_paths.py's."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from admission.decision import PENDING, READY, decide
from admission.holds import HoldExpiry
from admission.observability import EventRecorder
from dispatch_kubeflow import errors
from dispatch_kubeflow.core import hold, names
from dispatch_kubeflow.core.times import format_time
from dispatch_kubeflow.kube.resources import TRAINJOB, WORKLOAD
from dispatch_kubeflow.mode_kueue import KueueMode
from dispatch_kubeflow.model import Actor, ActorKind, HoldMeta, ObjectRef, ObjectState
from dispatch_kubeflow.settings import Settings
from dispatch_kubeflow.state import observe
from tests.unit.fake_kube import FakeKube
from tests.unit.test_readmission_act import CHECK, KEY, NS, TJ, WL, World, trainjob, workload
from tests.unit.test_readmission_act import world as make_world

Obj = dict[str, Any]
KUEUE = Settings.parse({"namespace": NS, "probeRuntime": {"name": "rt"},
                        "kueue": {"localQueue": "lq"}})
WHO = Actor(ActorKind.HUMAN, "ops")


def record(instance: int = 1, until: datetime | None = None) -> dict[str, str]:
    ann = {names.HOLD_INSTANCE: str(instance), names.HOLD_WHO: "human:ops",
           names.HOLD_SINCE: "2026-01-01T00:00:00Z", names.HOLD_REASON: "maintenance"}
    if until is not None:
        ann[names.HOLD_UNTIL] = format_time(until)
    return ann


def owned() -> Obj:
    """A TrainJob with the UID :func:`workload`'s owner reference names."""
    tj = trainjob()
    tj["metadata"]["uid"] = "t1"
    return tj


def with_hold(obj: Obj, instance: int = 1) -> Obj:
    return {**obj, "metadata": {**obj["metadata"], "annotations": record(instance)}}


def deactivated(wl: Obj) -> Obj:
    return {**wl, "spec": {**wl["spec"], "active": False}}


# --- the rule (core.hold) ---------------------------------------------------------------------


def test_the_workloads_record_holds_else_the_trainjobs() -> None:
    tj, wl = with_hold(trainjob(), 2), workload()
    assert hold.kueue_holder(tj, wl) is tj  # a Workload re-made under the hold
    held_wl = with_hold(wl, 3)
    assert hold.kueue_holder(tj, held_wl) is held_wl
    assert hold.kueue_holder(trainjob(), wl) is None
    assert hold.instance(tj) == 2
    assert hold.record(trainjob()) is None


def test_an_earlier_trainjob_of_the_same_name_lends_no_hold() -> None:
    tj = with_hold(trainjob())
    tj["metadata"]["uid"] = "old"
    assert hold.of_trainjob(workload(owner_uid="new"), tj) is None
    assert not hold.lacks_hold(tj, workload(owner_uid="new"))
    assert hold.lacks_hold(tj, workload(owner_uid="old"))
    # A Workload that carries the record but is active again was resumed outside dispatch.
    assert hold.lacks_hold(tj, with_hold(workload(owner_uid="old")))
    assert not hold.lacks_hold(tj, deactivated(with_hold(workload(owner_uid="old"))))
    deleting = workload(owner_uid="old")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert not hold.lacks_hold(tj, deleting)


def test_the_patches_are_fenced_by_the_version_judged() -> None:
    wl = workload()
    wl["metadata"]["resourceVersion"] = "7"
    patch = hold.keep_patch(wl, record(4))
    assert patch == {"metadata": {"resourceVersion": "7", "annotations": record(4)},
                     "spec": {"active": False}}
    cleared = hold.clear_patch(wl)["metadata"]
    assert cleared["resourceVersion"] == "7"
    assert cleared["annotations"] == dict.fromkeys(names.HOLD_ANNOTATIONS)


def test_inspect_says_held_with_the_same_instance_on_a_remade_workload() -> None:
    tj = with_hold({**trainjob(), "metadata": {**trainjob()["metadata"],
                                               "labels": {names.QUEUE_NAME_LABEL: "lq"}}}, 5)
    remade = workload()  # active, quota reserved, no hold of its own
    obs = observe({**tj, "spec": {"suspend": True}}, remade, [])
    assert obs.state is ObjectState.HELD
    assert obs.hold_instance == 5
    assert "human:ops" in obs.cause.detail


def test_held_only_once_the_trainjob_is_suspended() -> None:
    """Until Kueue suspends the TrainJob its Job may still make pods: holding, not held."""
    tj = {**trainjob(), "metadata": {**trainjob()["metadata"],
                                     "labels": {names.QUEUE_NAME_LABEL: "lq"}}}
    wl = {**with_hold(workload(), 1), "spec": {"active": False}}
    obs = observe(tj, wl, [])
    assert obs.state is ObjectState.HOLDING
    assert "waiting for the TrainJob to be suspended" in obs.cause.detail
    assert observe({**tj, "spec": {"suspend": True}}, wl, []).state is ObjectState.HELD


# --- the decision -----------------------------------------------------------------------------


def judged(wl: Obj, tj: Obj | None, jobset_uid: str | None = None) -> str:
    return decide(wl, check_names=frozenset({CHECK}), cluster_queues={"cq": frozenset({CHECK})},
                  pods_left=0, jobset_uid=jobset_uid, trainjob=tj).kind


def test_a_workload_of_a_held_trainjob_is_never_approved() -> None:
    tj = with_hold(owned())
    assert judged(workload(), owned()) == "approve"
    assert judged(workload(), tj) == "hold"  # re-made under the hold: put it back
    assert judged(deactivated(with_hold(workload())), tj) == "idle"  # it carries it already
    # Resumed outside dispatch (kueuectl resume workload, a patch of spec.active): the
    # record is there but the Workload is active again: put the deactivation back.
    assert judged(with_hold(workload()), tj) == "hold"
    other = {**tj, "metadata": {**tj["metadata"], "uid": "earlier"}}
    assert judged(workload(owner_uid="t1"), other) == "approve"  # not the Workload's


def test_a_held_job_is_never_rebound() -> None:
    """An admitted Workload whose JobSet was re-made: a rebind, unless the job is held."""
    tj = owned()
    tj["metadata"]["annotations"] = {names.APPROVED_JOBSET: "js1",
                                     names.ADMISSION_TOKEN: "wl-uid/0"}
    wl = workload()
    wl["metadata"]["uid"] = "wl-uid"
    wl["status"]["admissionChecks"][0]["state"] = READY
    wl["status"]["conditions"].append({"type": "Admitted", "status": "True"})
    assert judged(wl, tj, jobset_uid="js2") == "rebind"
    tj["metadata"]["annotations"].update(record())
    assert judged(wl, tj, jobset_uid="js2") == "hold"


# --- the controller's writes ------------------------------------------------------------------


async def held_world(seed: int = 0) -> World:
    w = await make_world(seed)
    w.k.write_now(TRAINJOB, TJ, NS, {"metadata": {"annotations": record(2)}})
    return w


def wl_now(w: World) -> Obj:
    return w.k.objects[(WORKLOAD.plural, NS, WL)]


@pytest.mark.asyncio
@pytest.mark.parametrize("seed", range(4))
async def test_the_controller_puts_the_hold_back_and_approves_nothing(seed: int) -> None:
    w = await held_world(seed)
    await w.r.reconcile(KEY)
    await w.r.settle()
    assert wl_now(w)["spec"]["active"] is False
    assert hold.record(wl_now(w)) == record(2)
    assert names.ADMISSION_COUNT not in w.annotations()
    assert w.check()["state"] == PENDING
    assert w.decisions("held") == 1
    assert len(w.events("HoldKept")) == 1
    await w.r.reconcile(KEY)  # carries it now: nothing more
    assert w.decisions("held") == 1


@pytest.mark.asyncio
async def test_a_hold_resumed_outside_dispatch_is_put_back() -> None:
    """``kueuectl resume workload`` on a job dispatch holds: the Workload keeps the record
    but is active again. Never approved either way; deactivated again, so it does not sit
    on quota it can never use, and the Event says who may release it."""
    w = await held_world()
    w.k.write_now(WORKLOAD, WL, NS, {"metadata": {"annotations": record(2)},
                                     "spec": {"active": True}})
    await w.r.reconcile(KEY)
    await w.r.settle()
    assert wl_now(w)["spec"]["active"] is False
    assert hold.record(wl_now(w)) == record(2)
    assert w.check()["state"] == PENDING
    [event] = w.events("HoldKept")
    assert "resumed outside dispatch" in event["note"]
    assert "dispatch release" in event["note"]


@pytest.mark.asyncio
async def test_a_release_seen_live_is_never_undone() -> None:
    """The index still shows the TrainJob held; Release cleared it: the live read says so."""
    w = await held_world()
    w.indexes["trainjobs"].pin(TJ)
    w.k.write_now(TRAINJOB, TJ, NS, {"metadata": {"annotations": dict.fromkeys(
        names.HOLD_ANNOTATIONS)}})
    await w.r.reconcile(KEY)
    assert wl_now(w)["spec"].get("active") is not False
    assert w.decisions("held") == 0


@pytest.mark.asyncio
async def test_a_release_landing_before_the_write_meets_the_fence() -> None:
    """Release changes the Workload between the controller's reads and its write: 409."""
    w = await held_world()
    w.when("patch", WORKLOAD, lambda: w.k.write_now(
        WORKLOAD, WL, NS, {"metadata": {"labels": {"released": "yes"}}}))
    await w.r.reconcile(KEY)
    assert wl_now(w)["spec"].get("active") is not False
    assert w.decisions("stale") == 1
    assert len(w.r.queue) == 1


@pytest.mark.asyncio
async def test_a_hold_written_after_the_index_read_stops_the_raise() -> None:
    w = await make_world(0)
    w.indexes["trainjobs"].pin(TJ)  # the index has not seen the hold
    w.k.write_now(TRAINJOB, TJ, NS, {"metadata": {"annotations": record()}})
    await w.act()
    assert names.ADMISSION_COUNT not in w.annotations()  # the raise's fence refused it
    assert w.check()["state"] == PENDING


# --- the library: the order of writes ---------------------------------------------------------


async def kueue_job(k: FakeKube) -> ObjectRef:
    tj = trainjob()
    tj["metadata"]["labels"][names.QUEUE_NAME_LABEL] = "lq"
    made = await k.create(TRAINJOB, tj, NS)
    wl = workload(made["metadata"]["uid"])
    wl["metadata"]["labels"] = {names.KUEUE_JOB_UID_LABEL: made["metadata"]["uid"]}
    await k.create(WORKLOAD, wl, NS)
    return ObjectRef(NS, TJ)


async def kueue_setup() -> tuple[FakeKube, ObjectRef, KueueMode]:
    """A fake with a Kueue-mode job, its ref, and the Kueue mode that acts on it."""
    k = FakeKube()
    ref = await kueue_job(k)
    return k, ref, KueueMode(KUEUE, KUEUE.kueue)  # type: ignore[arg-type]


def writes(k: FakeKube) -> list[str]:
    """The kinds modified, in order."""
    return [c.key[0] for c in k.changes if c.type == "MODIFIED"]


@pytest.mark.asyncio
async def test_hold_records_on_the_trainjob_first_and_release_clears_it_first() -> None:
    k, ref, mode = await kueue_setup()
    await mode.hold(k, ref, HoldMeta(3, WHO, reason="maintenance"))
    assert writes(k) == [TRAINJOB.plural, WORKLOAD.plural]
    tj, wl = k.all(TRAINJOB)[0], k.all(WORKLOAD)[0]
    assert hold.record(tj) == hold.record(wl)  # one record, one hold-since
    assert wl["spec"]["active"] is False
    assert not tj["spec"].get("suspend")
    k.changes.clear()
    assert await mode.release(k, ref, 3)
    assert writes(k) == [TRAINJOB.plural, WORKLOAD.plural]
    assert hold.instance(k.all(TRAINJOB)[0]) == 0 == hold.instance(k.all(WORKLOAD)[0])
    assert k.all(WORKLOAD)[0]["spec"]["active"] is True


@pytest.mark.asyncio
async def test_another_instance_is_refused_before_anything_is_written() -> None:
    k, ref, mode = await kueue_setup()
    await mode.hold(k, ref, HoldMeta(1, WHO))
    k.changes.clear()
    with pytest.raises(errors.HoldError, match="instance 1"):
        await mode.hold(k, ref, HoldMeta(2, WHO))
    with pytest.raises(errors.HoldError, match="instance 1, not 2"):
        await mode.release(k, ref, 2)
    assert writes(k) == []


@pytest.mark.asyncio
async def test_a_release_with_the_workload_gone_clears_the_trainjob() -> None:
    k, ref, mode = await kueue_setup()
    await mode.hold(k, ref, HoldMeta(1, WHO))
    await k.delete(WORKLOAD, WL, NS)
    assert await mode.release(k, ref, 1)
    assert hold.instance(k.all(TRAINJOB)[0]) == 0


# --- the expiry -------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_an_expired_hold_is_cleared_on_the_trainjob_first() -> None:
    w = await make_world(0)
    past = datetime.now(UTC) - timedelta(minutes=1)
    w.k.write_now(TRAINJOB, TJ, NS, {"metadata": {"annotations": record(1, past)}})
    w.k.write_now(WORKLOAD, WL, NS, {"metadata": {"annotations": record(1, past)},
                                     "spec": {"active": False}})
    expiry = HoldExpiry(w.k, w.elector, w.r.caches, w.feeds["workloads"], w.r.metrics)
    w.k.changes.clear()
    await expiry._release_once(KEY)
    assert writes(w.k) == [TRAINJOB.plural, WORKLOAD.plural]
    assert hold.instance(w.k.objects[(TRAINJOB.plural, NS, TJ)]) == 0
    assert wl_now(w)["spec"]["active"] is True
    expiry.close()


@pytest.mark.asyncio
async def test_an_expiry_that_fails_comes_back_after_its_backoff() -> None:
    """The expiry runs on the work queue: a failure, even a bug, brings the key back after
    its backoff instead of ending the release (a bare task lost it)."""
    w = await make_world(0)
    past = datetime.now(UTC) - timedelta(minutes=1)
    w.k.write_now(TRAINJOB, TJ, NS, {"metadata": {"annotations": record(1, past)}})
    w.k.write_now(WORKLOAD, WL, NS, {"metadata": {"annotations": record(1, past)},
                                     "spec": {"active": False}})
    expiry = HoldExpiry(w.k, w.elector, w.r.caches, w.feeds["workloads"], w.r.metrics)

    def bug() -> None:
        raise RuntimeError("a bug in the first release")

    w.when("patch", WORKLOAD, bug)
    expiry._schedule(KEY, wl_now(w))
    runner = asyncio.ensure_future(expiry.run())
    try:
        for _ in range(100):
            if wl_now(w)["spec"]["active"] is True:
                break
            await asyncio.sleep(0.05)
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        expiry.close()
    assert wl_now(w)["spec"]["active"] is True
    assert hold.instance(w.k.objects[(TRAINJOB.plural, NS, TJ)]) == 0


@pytest.mark.asyncio
async def test_an_unreadable_hold_until_is_told_once_and_the_hold_kept() -> None:
    w = await make_world(0)
    ann = {**record(1), names.HOLD_UNTIL: "next tuesday"}
    w.k.write_now(TRAINJOB, TJ, NS, {"metadata": {"annotations": ann}})
    w.k.write_now(WORKLOAD, WL, NS, {"metadata": {"annotations": ann},
                                     "spec": {"active": False}})
    expiry = HoldExpiry(w.k, w.elector, w.r.caches, w.feeds["workloads"], w.r.metrics,
                        events=EventRecorder(w.k, instance="me"))
    runner = asyncio.ensure_future(expiry.run())
    try:
        for _ in range(3):  # seen again (a relist, a leader change): told once
            expiry._schedule(KEY, wl_now(w))
            for _ in range(40):
                if w.events("HoldUntilUnreadable"):
                    break
                await asyncio.sleep(0.05)
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        expiry.close()
    told = w.events("HoldUntilUnreadable")
    assert len(told) == 1
    assert told[0]["type"] == "Warning"
    assert "next tuesday" in told[0]["note"]
    assert w.r.metrics.registry.get_sample_value(
        "dispatch_admission_hold_until_unreadable_total") == 1
    assert wl_now(w)["spec"]["active"] is False  # still held: only Release ends it


@pytest.mark.asyncio
async def test_a_release_writes_a_workload_remade_under_the_hold() -> None:
    """No record on the Workload (re-made, the controller has not put the hold back yet):
    the release still writes it, so a copy judged from the older version meets its fence."""
    k, ref, mode = await kueue_setup()
    await mode.hold(k, ref, HoldMeta(1, WHO))
    k.write_now(WORKLOAD, WL, NS, {"metadata": {"annotations": dict.fromkeys(
        names.HOLD_ANNOTATIONS)}, "spec": {"active": True}})  # as if re-made
    rv = k.all(WORKLOAD)[0]["metadata"]["resourceVersion"]
    k.changes.clear()
    assert await mode.release(k, ref, 1)
    assert writes(k) == [TRAINJOB.plural, WORKLOAD.plural]
    wl = k.all(WORKLOAD)[0]
    assert wl["metadata"]["resourceVersion"] != rv
    assert wl["metadata"]["annotations"][names.HOLD_RELEASED].startswith("1 ")
    k.changes.clear()
    assert not await mode.release(k, ref, 1)  # nothing held: nothing written
    assert writes(k) == []


@pytest.mark.asyncio
async def test_a_copy_judged_before_the_release_meets_the_fence() -> None:
    """The controller read the Workload (no record) and the TrainJob (held); the release
    then clears the TrainJob and writes the Workload before the copy lands: 409."""
    w = await held_world()
    w.when("patch", WORKLOAD, lambda: (
        w.k.write_now(TRAINJOB, TJ, NS, {"metadata": {"annotations": dict.fromkeys(
            names.HOLD_ANNOTATIONS)}}),
        w.k.write_now(WORKLOAD, WL, NS, {"metadata": {"annotations": {
            names.HOLD_RELEASED: "2 now"}}})))
    await w.r.reconcile(KEY)
    assert wl_now(w)["spec"].get("active") is not False
    assert w.decisions("held") == 0
    await w.r.reconcile(KEY)  # judged again: the TrainJob holds nothing now
    assert wl_now(w)["spec"].get("active") is not False

"""Start's orchestration under concurrent callers, against the in-memory fake transport.

Hundreds of seeded interleavings of 2 to 5 Starts of one job and submission (same and
different requests); every one must end in the state linearizability promises. The real
API server, Trainer and Kueue are exercised by tests/cluster/test_start_race.py; this
checks the orchestration's logic under far more interleavings than a cluster can run.
"""

from __future__ import annotations

import asyncio
import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from dispatch_kubeflow import errors
from dispatch_kubeflow import start as start_mod
from dispatch_kubeflow.backend import select_mode
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import CLUSTER_TRAINING_RUNTIME, TRAINING_RUNTIME, TRAINJOB
from dispatch_kubeflow.model import Image, JobID, JobSpec, ObjectRef, RuntimeRef, StartRequest
from dispatch_kubeflow.settings import Settings
from tests.unit.fake_kube import FakeKube

pytestmark = [pytest.mark.asyncio, pytest.mark.virtual_time]
JOB = JobID.new(datetime(2026, 5, 1, tzinfo=UTC), bytes(10))
PLAIN = Settings.parse({"namespace": "ns", "probeRuntime": {"name": "dispatch-kind"}})
PLAIN_MODE = select_mode(PLAIN)
SOURCE = {"metadata": {"name": "dispatch-kind", "labels": {"x": "y"}}, "spec": {
    "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {
        "template": {"spec": {"containers": [{"name": "node", "image": "i"}]}}}}}]}}}}


def request(k: int) -> StartRequest:
    spec = JobSpec(["/bin/sh", "-c", f"echo {k}"], 1,
                   [Image("localhost/dispatch-busybox:kind"),
                    RuntimeRef("ClusterTrainingRuntime", "dispatch-kind")])
    return StartRequest(JOB, 1, k + 1, spec)


async def fake(seed: int) -> FakeKube:
    k = FakeKube(seed)
    await k.create(CLUSTER_TRAINING_RUNTIME, SOURCE)
    return k


def as_kube(k: FakeKube) -> KubeAPI:
    return k


def check_linearizable(k: FakeKube, reqs: list[StartRequest], outcomes: list[Any]) -> None:
    for o in outcomes:
        assert isinstance(o, ObjectRef | errors.ConflictError), repr(o)
    trainjobs, copies = k.all(TRAINJOB), k.all(TRAINING_RUNTIME)
    assert len(trainjobs) == 1, trainjobs
    tj = trainjobs[0]
    winner_doc = json.loads(tj["metadata"]["annotations"][names.REQUEST])
    docs = [start_mod.request_doc(r) for r in reqs]
    for doc, o in zip(docs, outcomes, strict=True):
        if doc == winner_doc:
            assert isinstance(o, ObjectRef), o
            assert o.uid == tj["metadata"]["uid"]
        else:
            assert isinstance(o, errors.ConflictError), o
            assert f"attempt {winner_doc['attempt']} there, {doc['attempt']} here" in str(o)
    assert len(copies) == 1
    rt = copies[0]
    assert rt["metadata"]["annotations"][names.SPEC_HASH] == \
        tj["metadata"]["annotations"][names.SPEC_HASH]
    assert rt["metadata"]["labels"][names.ATTEMPT_LABEL] == str(winner_doc["attempt"])
    assert [o["uid"] for o in rt["metadata"]["ownerReferences"]] == [tj["metadata"]["uid"]]


@pytest.mark.parametrize("n", [2, 3, 5])
async def test_concurrent_starts_end_linearizable_under_every_seed(n: int) -> None:
    for seed in range(200):
        k = await fake(seed * 10 + n)
        distinct = min(n, 3)
        reqs = [request(i % distinct) for i in range(n)]
        outcomes = await asyncio.gather(*(start_mod.start(as_kube(k), PLAIN, PLAIN_MODE, r)
                                          for r in reqs),
                                        return_exceptions=True)
        try:
            check_linearizable(k, reqs, list(outcomes))
        except AssertionError as exc:
            raise AssertionError(f"seed {seed * 10 + n}: {exc}") from exc


async def test_a_copy_left_by_another_request_is_refused_not_replaced() -> None:
    k = await fake(1)
    k.max_yields = 0
    first, second = request(0), request(1)
    # An interrupted (or still running) Start of `first`: its copy, no TrainJob.
    await k.create(TRAINING_RUNTIME, start_mod.runtime_copy(
        SOURCE, start_mod.validate(first), "ns"), "ns")
    with pytest.raises(errors.ConflictError, match="attempt 1 there, 2 here") as exc:
        await start_mod.start(as_kube(k), PLAIN, PLAIN_MODE, second)
    assert "start that request again" in str(exc.value)
    assert k.all(TRAINJOB) == []
    # The interrupted request's own Start completes it.
    ref = await start_mod.start(as_kube(k), PLAIN, PLAIN_MODE, first)
    assert [t["metadata"]["uid"] for t in k.all(TRAINJOB)] == [ref.uid]
    check_linearizable(k, [first], [ref])


async def test_a_copy_swapped_under_start_makes_it_delete_its_own_trainjob() -> None:
    """A concurrent StopJob removes the copy right after Start checked it, and another
    request's Start makes its own: Start's TrainJob would be built from that copy."""
    k = await fake(2)
    k.max_yields = 0
    mine, other = request(0), request(1)
    valid_other = start_mod.validate(other)
    name = valid_other.name
    other_copy = start_mod.runtime_copy(SOURCE, valid_other, "ns")
    swapped = False

    def swap(verb: str, res: Any, _name: str) -> None:
        nonlocal swapped
        if verb == "create" and res is TRAINJOB and not swapped:
            swapped = True
            key = ("trainingruntimes", "ns", name)
            k.objects[key] = {**other_copy, "metadata": {
                **other_copy["metadata"], "uid": "other", "resourceVersion": "999"}}
    k.before = swap
    with pytest.raises(errors.ConflictError, match="removed or replaced"):
        await start_mod.start(as_kube(k), PLAIN, PLAIN_MODE, mine)
    assert swapped
    assert k.all(TRAINJOB) == []  # deleted again, under its own UID
    assert [c["metadata"]["uid"] for c in k.all(TRAINING_RUNTIME)] == ["other"]


async def test_the_owner_patch_lands_only_on_the_copy_it_judged() -> None:
    k = await fake(3)
    k.max_yields = 0
    req = request(0)
    bumped = False

    def touch(verb: str, res: Any, name: str) -> None:
        nonlocal bumped
        if verb == "patch" and res is TRAINING_RUNTIME and not bumped:
            bumped = True  # someone labels the copy between Start's read and its patch
            obj = k.objects[("trainingruntimes", "ns", name)]
            obj["metadata"].setdefault("labels", {})["touched"] = "1"
            k._bump(obj)
    k.before = touch
    ref = await start_mod.start(as_kube(k), PLAIN, PLAIN_MODE, req)
    assert bumped
    check_linearizable(k, [req], [ref])
    assert k.all(TRAINING_RUNTIME)[0]["metadata"]["labels"]["touched"] == "1"


async def test_a_first_start_makes_the_fewest_requests_and_a_repeat_changes_nothing() -> None:
    k = await fake(4)
    k.max_yields = 0
    req = request(0)
    ref = await start_mod.start(as_kube(k), PLAIN, PLAIN_MODE, req)
    # The fewest for what Start makes (plain mode waits for nothing after): read the
    # runtime, create its copy, create the TrainJob, make the TrainJob own the copy.
    assert (k.requests, dict(k.calls)) == (4 + 1, {"create": 3, "get": 1, "patch": 1}), k.calls
    # (the fixture's own create of the ClusterTrainingRuntime is the 1 and one "create")
    before = k.requests
    again = await start_mod.start(as_kube(k), PLAIN, PLAIN_MODE, req)
    assert again == ref
    check_linearizable(k, [req], [ref])
    # A repeat reads: the runtime, the copy's create refused, the TrainJob, the copy.
    assert k.requests - before == 4
    assert [o["metadata"]["uid"] for o in k.all(TRAINJOB)] == [ref.uid]


async def test_a_repeated_start_needs_no_runtime() -> None:
    """The job's objects are there: Start answers though the runtime it was made from is
    gone (the copy is what the TrainJob runs)."""
    k = await fake(5)
    k.max_yields = 0
    req = request(0)
    ref = await start_mod.start(as_kube(k), PLAIN, PLAIN_MODE, req)
    await k.delete(CLUSTER_TRAINING_RUNTIME, "dispatch-kind")
    assert await start_mod.start(as_kube(k), PLAIN, PLAIN_MODE, req) == ref
    with pytest.raises(errors.SpecError, match="RuntimeRef"):
        await start_mod.start(as_kube(k), PLAIN, PLAIN_MODE, StartRequest(
            JobID.new(datetime(2026, 5, 2, tzinfo=UTC), bytes(10)), 1, 1, req.spec))


async def test_concurrent_kueue_starts_share_one_watch_of_the_workloads() -> None:
    """Start returns once Kueue's Workload exists; N Starts of one Backend wait for theirs
    through the Backend's informer (one list and one watch), not a list and a watch each."""
    from dispatch_kubeflow.informer import LINGER_SECONDS, Informers
    from dispatch_kubeflow.kube.resources import WORKLOAD
    kueue = Settings.parse({"namespace": "ns", "probeRuntime": {"name": "dispatch-kind"},
                            "kueue": {"localQueue": "lq"}})
    k = await fake(6)
    n = 20
    shared = Informers(k)  # as a Backend owns one, for its Starts and waits
    mode = select_mode(kueue)
    jobs = [JobID.new(datetime(2026, 5, 3, tzinfo=UTC), bytes([i]) * 10) for i in range(n)]
    reqs = [StartRequest(j, 1, 1, request(0).spec) for j in jobs]
    made: set[str] = set()

    async def as_kueue_would() -> None:
        """The Workload of each TrainJob (Kueue's part, written straight into the fake)."""
        while len(made) < n:
            for tj in k.all(TRAINJOB):
                uid = tj["metadata"]["uid"]
                if uid not in made:
                    made.add(uid)
                    await k.create(WORKLOAD, {"metadata": {
                        "name": f"trainjob-{tj['metadata']['name']}",
                        "labels": {names.KUEUE_JOB_UID_LABEL: uid}}}, "ns")
            await asyncio.sleep(0.001)
    kueue_task = asyncio.create_task(as_kueue_would())
    before = dict(k.calls)
    refs = await asyncio.gather(*(start_mod.start(as_kube(k), kueue, mode, r, shared=shared)
                                  for r in reqs))
    await kueue_task
    assert sorted(r.uid for r in refs) == sorted(made)
    calls = {v: k.calls[v] - before.get(v, 0) for v in k.calls}
    # Each Start: get the runtime, create the copy and the TrainJob, patch the copy's owner;
    # all of them: the informer's list and watch (Kueue's creates are counted too: n).
    assert calls.get("watch", 0) <= 2, calls
    assert calls.get("list", 0) <= 2, calls
    assert calls["get"] == n, calls
    assert calls["patch"] == n, calls
    assert calls["create"] == 3 * n, calls
    assert shared.feeds == 1  # the watch lingers after the last Start left ...
    await asyncio.sleep(LINGER_SECONDS + 1)
    assert shared.feeds == 0  # ... and then stops
    await shared.close()


async def test_a_runtime_whose_restarts_have_no_bound_is_refused_and_nothing_made() -> None:
    """JobSet's RestartJobSetAndIgnoreMaxRestarts lets J grow past maxRestarts: no raise of
    A is known to pass the old execution's J, so Start refuses the runtime before it makes
    anything."""
    k = FakeKube(0)
    unbounded: dict[str, Any] = copy.deepcopy(SOURCE)
    unbounded["spec"]["template"]["spec"]["failurePolicy"] = {"maxRestarts": 3, "rules": [
        {"action": "RestartJobSet"}, {"action": "RestartJobSetAndIgnoreMaxRestarts"}]}
    await k.create(CLUSTER_TRAINING_RUNTIME, unbounded)
    with pytest.raises(errors.SpecError) as err:
        await start_mod.start(as_kube(k), PLAIN, PLAIN_MODE, request(0))
    assert err.value.field == "spec.extensions.RuntimeRef"
    assert "spec.template.spec.failurePolicy.rules[1].action" in str(err.value)
    assert k.all(TRAINJOB) == []
    assert k.all(TRAINING_RUNTIME) == []

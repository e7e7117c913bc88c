"""Start's orchestration under concurrent callers, against the in-memory fake transport.

Hundreds of seeded interleavings of 2 to 5 Starts of one job and submission (same and
different requests); every one must end in the state linearizability promises. The real
API server, Trainer and Kueue are exercised by tests/cluster/test_start_race.py; this
checks the orchestration's logic under far more interleavings than a cluster can run.
"""

from __future__ import annotations

import asyncio
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

pytestmark = pytest.mark.asyncio
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
    _, name, image, _ = start_mod.validate(first)
    # An interrupted (or still running) Start of `first`: its copy, no TrainJob.
    await k.create(TRAINING_RUNTIME, start_mod.runtime_copy(
        SOURCE, name=name, namespace="ns", labels=start_mod.job_labels(first),
        digest=start_mod.spec_hash(first), image=image,
        request=json.dumps(start_mod.request_doc(first))), "ns")
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
    _, name, image, _ = start_mod.validate(other)
    other_copy = start_mod.runtime_copy(
        SOURCE, name=name, namespace="ns", labels=start_mod.job_labels(other),
        digest=start_mod.spec_hash(other), image=image,
        request=json.dumps(start_mod.request_doc(other)))
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

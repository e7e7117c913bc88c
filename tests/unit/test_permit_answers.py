"""admission.permit_answers (a worker agent's answer to a pod's "how long") against two
in-memory fake ports, the manager's and the worker's API servers: a pod starts only at the
job's current admission and where MultiKueue dispatched it, read live in the manager
(Workload and TrainJob) before its first answer; later answers read nothing; the answer
is the permit as it stands after the reads; a manager that cannot be read never yields a
start."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from admission.fence import AUDIENCE
from admission.permit_answers import (
    POD_NAME_EXTRA,
    POD_UID_EXTRA,
    NotAPod,
    PermitAnswers,
    routes,
)
from admission.permit_renewal import PermitRenewal
from dispatch_kubeflow.core import errors, names
from dispatch_kubeflow.core.permit import lease_name
from dispatch_kubeflow.kube.resources import (
    LEASE,
    POD,
    TOKEN_REVIEW,
    TRAINJOB,
    WORKLOAD,
    Resource,
)
from tests.unit.fake_kube import FakeKube
from tests.unit.shipped_rbac import shipped_rbac

pytestmark = pytest.mark.asyncio
NS = "team-a"
LENGTH = 30.0
WL = "trainjob-dj-abc-s1-1f2e3"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def world(a: int = 2, dispatched: str | None = "w1", remote_a: int = 2,
                ) -> tuple[FakeKube, FakeKube, Clock, PermitAnswers]:
    """A manager whose job is at admission ``a`` and dispatched to ``dispatched``; worker w1
    with the remote TrainJob (made at ``remote_a``) and a permit renewed just now."""
    manager, worker, clock = FakeKube(0), FakeKube(1), Clock()
    await manager.create(LEASE, {"metadata": {"name": lease_name("w1")}, "spec": {}},
                         names.CONTROLLER_NAMESPACE)
    await manager.create(TRAINJOB, trainjob(a), NS)
    await manager.create(WORKLOAD, {"metadata": {"name": WL},
                                    "status": {"clusterName": dispatched} if dispatched else {}},
                         NS)
    remote = trainjob(remote_a)
    remote["metadata"]["annotations"][names.PREBUILT_WORKLOAD] = WL
    await worker.create(TRAINJOB, remote, NS)
    permit = PermitRenewal(manager, "w1", "agent-1", length=LENGTH, clock=clock)
    assert await permit.renew_once()
    return manager, worker, clock, PermitAnswers(manager, worker, permit, "w1", clock=clock)


def trainjob(a: int) -> dict[str, Any]:
    return {"metadata": {"name": "dj-abc-s1", "annotations": {names.ADMISSION_COUNT: str(a)}}}


async def test_a_current_pod_gets_the_permit_left_and_later_answers_read_nothing() -> None:
    manager, _, clock, agent = await world()
    clock.now += 5
    got = await agent.answer(NS, "pod-1", "dj-abc-s1", 2)
    assert got.seconds == LENGTH - 5
    assert got.reason == ""

    def cut(verb: str, res: Resource, _name: str) -> None:
        raise errors.KubeError("connection refused", status=0, reason="Unreachable")
    manager.before = cut  # the manager unreachable: a confirmed pod still gets its share
    clock.now += 5
    assert (await agent.answer(NS, "pod-1", "dj-abc-s1", 2)).seconds == LENGTH - 10
    clock.now += LENGTH - 10
    got = await agent.answer(NS, "pod-1", "dj-abc-s1", 2)
    assert got.seconds == 0
    assert "ran out or was revoked" in got.reason


@pytest.mark.parametrize(("a", "dispatched", "remote_a", "why"), [
    # A remote TrainJob left on a worker that was lost: A moved on in the manager.
    (3, "w1", 2, "admission count in the manager is 3, the pod's 2"),
    (3, "w2", 2, "dispatched the job to w2, not to w1"),
    # Readmission under way: nothing dispatched yet.
    (2, None, 2, "to no worker"),
])
async def test_a_pod_of_a_stale_remote_never_starts(a: int, dispatched: str | None,
                                                    remote_a: int, why: str) -> None:
    _, _, _, agent = await world(a, dispatched, remote_a)
    got = await agent.answer(NS, "pod-1", "dj-abc-s1", remote_a)
    assert got.seconds == 0
    assert why in got.reason


async def test_both_are_read_live_in_the_manager() -> None:
    manager, _, _, agent = await world()
    reads: list[str] = []

    def record(verb: str, res: Resource, name: str) -> None:
        reads.append(f"{verb} {res.kind}")
    manager.before = record
    assert (await agent.answer(NS, "pod-1", "dj-abc-s1", 2)).seconds > 0
    assert sorted(reads) == ["get TrainJob", "get Workload"]


async def test_the_answer_is_the_permit_after_the_reads() -> None:
    # The permit is revoked while the agent reads the manager: the answer is 0, not what
    # was left before the reads.
    manager, _, _, agent = await world()

    def revoke(verb: str, res: Resource, _name: str) -> None:
        if res is TRAINJOB:
            agent.permit.permit.revoked()
    manager.before = revoke
    got = await agent.answer(NS, "pod-1", "dj-abc-s1", 2)
    assert got.seconds == 0


async def test_no_permit_no_read_and_no_start() -> None:
    manager, _, clock, agent = await world()
    clock.now += LENGTH
    reads: list[str] = []
    manager.before = lambda verb, res, name: reads.append(verb)
    got = await agent.answer(NS, "pod-1", "dj-abc-s1", 2)
    assert got.seconds == 0
    assert "holds no permit" in got.reason
    assert reads == []


async def test_an_unreadable_manager_gives_no_start_and_no_confirmation() -> None:
    manager, _, _, agent = await world()

    def cut(verb: str, res: Resource, _name: str) -> None:
        raise errors.KubeError("connection refused", status=0, reason="Unreachable")
    manager.before = cut
    got = await agent.answer(NS, "pod-1", "dj-abc-s1", 2)
    assert got.seconds == 0
    assert "cannot read the job in the manager" in got.reason
    manager.before = None
    # Not confirmed by the failure: the next question reads again, and A has moved on.
    manager.write_now(TRAINJOB, "dj-abc-s1", NS,
                      {"metadata": {"annotations": {names.ADMISSION_COUNT: "3"}}})
    assert (await agent.answer(NS, "pod-1", "dj-abc-s1", 2)).seconds == 0


async def test_a_refusal_is_logged_once_a_pod_and_reason(
        caplog: pytest.LogCaptureFixture) -> None:
    """A refused fence asks every second: the agent's log says why once for each pod and
    reason, not each time."""
    _, _, clock, agent = await world()
    clock.now += LENGTH  # no permit
    with caplog.at_level("WARNING", logger="admission.permit_answers"):
        for _ in range(3):
            assert (await agent.answer(NS, "pod-1", "dj-abc-s1", 2)).seconds == 0
        await agent.answer(NS, "pod-2", "dj-abc-s1", 2)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2, said
    assert said[0] == (f"worker {agent.cluster}: a pod of TrainJob {NS}/dj-abc-s1 may not "
                       f"start: worker {agent.cluster} holds no permit from the manager")


async def test_a_pod_silent_for_a_whole_permit_is_confirmed_again() -> None:
    manager, _, clock, agent = await world()
    assert (await agent.answer(NS, "pod-1", "dj-abc-s1", 2)).seconds > 0
    clock.now += LENGTH + 1
    assert await agent.permit.renew_once()
    manager.write_now(WORKLOAD, WL, NS, {"status": {"clusterName": "w2"}})
    got = await agent.answer(NS, "pod-1", "dj-abc-s1", 2)
    assert got.seconds == 0
    assert "not to w1" in got.reason


async def test_a_trainjob_not_made_by_multikueue_is_refused() -> None:
    _, worker, _, agent = await world()
    await worker.create(TRAINJOB, {"metadata": {"name": "local-one"}}, NS)
    got = await agent.answer(NS, "pod-1", "local-one", 1)
    assert got.seconds == 0
    assert names.PREBUILT_WORKLOAD in got.reason


# --- who asks: the pod's token, reviewed in the worker -----------------------------------------

class Worker(FakeKube):
    """The worker's API server, with TokenReview: ``tokens`` maps a token to the pod it is
    bound to (namespace, name, uid) and its audience."""

    def __init__(self) -> None:
        super().__init__(1)
        self.tokens: dict[str, tuple[str, str, str, str]] = {}

    async def create(self, res: Resource, body: dict[str, Any], namespace: str | None = None,
                     **kw: Any) -> dict[str, Any]:
        if res is not TOKEN_REVIEW:
            return await super().create(res, body, namespace, **kw)
        bound = self.tokens.get(body["spec"]["token"])
        if bound is None or bound[3] not in body["spec"]["audiences"]:
            return {**body, "status": {"authenticated": False, "error": "invalid bearer token"}}
        ns, name, uid, audience = bound
        return {**body, "status": {"authenticated": True, "audiences": [audience], "user": {
            "username": f"system:serviceaccount:{ns}:default",
            "extra": {POD_NAME_EXTRA: [name], POD_UID_EXTRA: [uid]}}}}


async def worker_pod(worker: FakeKube, a: int, *, identity: bool = True) -> str:
    env = [{"name": names.ENV_ATTEMPT, "value": f"jabc.1.1.{a}.0"}] if identity else []
    made = await worker.create(POD, {
        "metadata": {"name": "dj-abc-s1-node-0-0", "labels": {
            names.JOB_ID_LABEL: "jabc", names.JOBSET_NAME_LABEL: "dj-abc-s1"}},
        "spec": {"containers": [{"name": "node", "env": env}]}}, NS)
    return str(made["metadata"]["uid"])


async def door(a: int = 2, pod_a: int = 2, *, identity: bool = True
               ) -> tuple[Worker, PermitAnswers, str]:
    manager, _, clock, _ = await world(a)
    worker = Worker()
    remote = trainjob(a)
    remote["metadata"]["annotations"][names.PREBUILT_WORKLOAD] = WL
    await worker.create(TRAINJOB, remote, NS)
    uid = await worker_pod(worker, pod_a, identity=identity)
    worker.tokens["good"] = (NS, "dj-abc-s1-node-0-0", uid, AUDIENCE)
    worker.tokens["api"] = (NS, "dj-abc-s1-node-0-0", uid, "https://kubernetes.default.svc")
    worker.tokens["replaced"] = (NS, "dj-abc-s1-node-0-0", "another-uid", AUDIENCE)
    permit = PermitRenewal(manager, "w1", "agent-1", length=LENGTH, clock=clock)
    assert await permit.renew_once()
    return worker, PermitAnswers(manager, worker, permit, "w1", clock=clock), uid


async def test_the_agent_answers_with_the_rbac_it_ships_with() -> None:
    """Seen on the local MultiKueue clusters: the agent's get of the asking pod was
    forbidden (the ClusterRole lists and watches pods, and grants no get), so every fence
    was told no and no pod of a MultiKueue job ever started."""
    worker, agent, _ = await door()
    worker.before = shipped_rbac("rbac.yaml", "multikueue-worker/tokenreview-rbac.yaml")
    assert (await agent.question("good")).seconds == LENGTH


async def test_a_pods_own_token_gets_its_answer() -> None:
    _, agent, _ = await door()
    assert (await agent.question("good")).seconds == LENGTH
    _, agent, _ = await door(a=3, pod_a=2)  # the manager's A moved on
    got = await agent.question("good")
    assert got.seconds == 0
    assert "the pod's 2" in got.reason


@pytest.mark.parametrize(("token", "why"), [
    ("nobody", "not one for dispatch-fence"),
    ("api", "not one for dispatch-fence"),  # the pod's API token: another audience
    ("replaced", "is gone"),  # bound to a pod of that name that no longer exists
])
async def test_a_token_that_names_no_dispatch_pod_is_refused(token: str, why: str) -> None:
    _, agent, _ = await door()
    with pytest.raises(NotAPod, match=why):
        await agent.question(token)


async def test_a_pod_without_an_identity_from_the_webhook_is_refused() -> None:
    _, agent, _ = await door(identity=False)
    with pytest.raises(NotAPod, match="not a dispatch pod with an identity"):
        await agent.question("good")


async def test_the_door_answers_in_json_and_refuses_strangers() -> None:
    _, agent, _ = await door()
    app = web.Application()
    app.add_routes(routes(agent))
    async with TestClient(TestServer(app)) as client:
        resp = await client.post("/fence")
        assert resp.status == 401
        resp = await client.post("/fence", headers={"Authorization": "Bearer nobody"})
        assert resp.status == 403
        resp = await client.post("/fence", headers={"Authorization": "Bearer good"})
        assert resp.status == 200
        assert await resp.json() == {"seconds": LENGTH, "reason": ""}

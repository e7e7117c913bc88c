"""admission.permit_clearing (a worker's pods that wait on a revoked permit) against the
in-memory fake port as both API servers, the worker's under the RBAC it ships: while the
manager has revoked the permit, an alive pod carrying the fence is deleted, by its UID, so
that the manager can grant the permit again (the campaign's run 30000-84 left such a pod
waiting, and the job stuck, for good); nothing else is deleted: not a finished pod, not a
worker's own dispatch pod without the fence, not a pod made after a grant, and not while
the permit is held."""

from __future__ import annotations

from typing import Any

import pytest

from admission.permit_clearing import PermitClearing, waiting_on_the_permit
from admission.permit_renewal import PermitRenewal
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.permit import grant, lease_name, revocation
from dispatch_kubeflow.kube.resources import LEASE, POD, Resource
from tests.unit.fake_kube import FakeKube
from tests.unit.shipped_rbac import shipped_rbac

pytestmark = pytest.mark.asyncio
NS = names.CONTROLLER_NAMESPACE
JOBS = "team-a"


def pod(name: str, *, fenced: bool = True, phase: str = "Pending") -> dict[str, Any]:
    init = [{"name": names.FENCE_CONTAINER, "image": "fence", "restartPolicy": "Always"}]
    return {"metadata": {"name": name, "labels": {names.JOB_ID_LABEL: "01JOB"}},
            "spec": {"initContainers": init if fenced else [],
                     "containers": [{"name": "node", "image": "busybox"}]},
            "status": {"phase": phase}}


async def worker_with(*pods: dict[str, Any]) -> FakeKube:
    worker = FakeKube(1)
    for p in pods:
        await worker.create(POD, p, JOBS)
    # The worker's controller as it ships: the base role and the worker component's.
    worker.before = shipped_rbac("rbac.yaml", "multikueue-worker/permit-clearing.yaml")
    return worker


async def revoked(manager: FakeKube, renewal: PermitRenewal) -> None:
    """The manager revokes the permit, and the replica's next round reads it so."""
    lease = await manager.get(LEASE, lease_name("w1"), NS)
    await manager.replace(LEASE, revocation(lease), NS)
    assert not await renewal.renew_once()
    assert renewal.revoked
    assert renewal.left() == 0


async def a_replica() -> tuple[FakeKube, PermitRenewal]:
    manager = FakeKube(0)
    await manager.create(LEASE, {"metadata": {"name": lease_name("w1")}, "spec": {}}, NS)
    renewal = PermitRenewal(manager, "w1", "replica-a", length=60.0)
    assert await renewal.renew_once()
    return manager, renewal


def names_of(kube: FakeKube) -> set[str]:
    return {o["metadata"]["name"] for o in kube.all(POD)}


async def test_a_revoked_worker_deletes_the_pods_that_wait_on_its_permit() -> None:
    manager, renewal = await a_replica()
    worker = await worker_with(
        pod("waiting"),                                   # the run 84 pod: waits, for good
        pod("started", phase="Running"),                  # its share ended: stopped, alive
        pod("stopped", phase="Failed"),                   # finished: not alive, kept
        pod("own", fenced=False),                         # the worker's own dispatch job
    )
    clearing = PermitClearing(worker, renewal)
    assert await clearing.clear_once() == 0  # the permit is held: nothing
    assert names_of(worker) == {"waiting", "started", "stopped", "own"}

    await revoked(manager, renewal)
    assert await clearing.clear_once() == 2
    assert names_of(worker) == {"stopped", "own"}
    assert clearing.deleted == 2
    assert await clearing.clear_once() == 0  # nothing left to wait


async def test_nothing_is_deleted_once_the_manager_granted_the_permit_again() -> None:
    """The replica last read the permit revoked, and the manager has granted it since (its
    list found no pod): a pod listed now may be the grant's own, and is spared."""
    manager, renewal = await a_replica()
    await revoked(manager, renewal)
    worker = await worker_with(pod("of-the-grant"))
    lease = await manager.get(LEASE, lease_name("w1"), NS)
    await manager.replace(LEASE, grant(lease), NS)
    assert renewal.revoked  # its own view: not read again yet
    assert await PermitClearing(worker, renewal).clear_once() == 0
    assert names_of(worker) == {"of-the-grant"}


async def test_a_pod_made_since_under_the_same_name_is_spared() -> None:
    """Listed, then gone and made again under the same name before the delete: the delete
    carries the listed pod's UID, so the new pod (judged on its own) stays."""
    manager, renewal = await a_replica()
    await revoked(manager, renewal)
    worker = await worker_with(pod("node-0"))
    rbac = worker.before
    assert rbac is not None

    def remade(verb: str, res: Resource, name: str) -> None:
        rbac(verb, res, name)
        if verb == "delete":
            worker.objects[(POD.plural, JOBS, "node-0")]["metadata"]["uid"] = "a-new-pod"
    worker.before = remade
    assert await PermitClearing(worker, renewal).clear_once() == 0
    assert names_of(worker) == {"node-0"}


async def test_a_pod_being_deleted_already_is_left_to_go() -> None:
    terminating = pod("terminating")
    terminating["metadata"]["deletionTimestamp"] = "2026-12-07T00:00:00Z"
    assert not waiting_on_the_permit(terminating)
    assert waiting_on_the_permit(pod("waiting"))
    assert not waiting_on_the_permit(pod("own", fenced=False))
    assert not waiting_on_the_permit(pod("done", phase="Succeeded"))

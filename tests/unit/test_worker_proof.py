"""admission.worker_proof (the manager's gate across clusters) against in-memory fake ports
for the manager and two workers: a worker is proven free of the job's pods by a live list
showing none alive (a pending pod counts) or by its permit revoked in the manager; a worker
that cannot be listed and is not revoked proves nothing, and neither does a missing Lease."""

from __future__ import annotations

from typing import Any

import pytest

from admission.permit_revocation import PermitRevocation
from admission.worker_proof import prove
from dispatch_kubeflow.core import errors, names
from dispatch_kubeflow.core.permit import lease_name, revocation
from dispatch_kubeflow.kube.resources import LEASE, POD, Resource
from tests.unit.fake_kube import FakeKube

pytestmark = pytest.mark.asyncio
NS = "team-a"
TJ = "dj-abc-s1"
MNS = names.CONTROLLER_NAMESPACE


def pod(name: str, phase: str, *, job: str = TJ, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {names.JOBSET_NAME_LABEL: job}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-05T00:00:00Z"
    return {"metadata": meta, "status": {"phase": phase}}


def unreachable(verb: str, res: Resource, _name: str) -> None:
    raise errors.KubeError("connection refused", status=0, reason="Unreachable")


async def clusters() -> tuple[FakeKube, dict[str, FakeKube], PermitRevocation]:
    manager = FakeKube(0)
    for w in ("w1", "w2"):
        await manager.create(LEASE, {"metadata": {"name": lease_name(w)}, "spec": {}}, MNS)
    return manager, {"w1": FakeKube(1), "w2": FakeKube(2)}, PermitRevocation(manager)


async def revoke(manager: FakeKube, cluster: str) -> None:
    lease = manager.objects[(LEASE.plural, MNS, lease_name(cluster))]
    await manager.replace(LEASE, revocation(lease), MNS)


async def test_workers_listed_empty_are_proven() -> None:
    _, workers, m = await clusters()
    await workers["w1"].create(POD, pod("old-0", "Succeeded"), NS)
    await workers["w2"].create(POD, pod("other-job-0", "Running", job="dj-xyz-s1"), NS)
    proof = await prove(dict(workers), m, NS, TJ)
    assert proof.proven
    assert proof.message() == ""


@pytest.mark.parametrize(("phase", "deleting"), [
    ("Running", False), ("Pending", False),  # a pod waiting for its first answer counts
    ("Succeeded", True),  # finished but not yet gone
])
async def test_an_alive_pod_in_a_worker_is_not_proven(phase: str, deleting: bool) -> None:
    _, workers, m = await clusters()
    await workers["w2"].create(POD, pod("p-0", phase, deleting=deleting), NS)
    proof = await prove(dict(workers), m, NS, TJ)
    assert not proof.proven
    assert proof.message() == "1 pod(s) of the job still alive in worker w2"


async def test_an_unreachable_worker_waits_for_its_revocation() -> None:
    manager, workers, m = await clusters()
    workers["w1"].before = unreachable
    proof = await prove(dict(workers), m, NS, TJ)
    assert not proof.proven
    assert "cannot list worker w1" in proof.message()
    assert "waiting for its permit to lapse" in proof.message()
    await revoke(manager, "w1")
    assert (await prove(dict(workers), m, NS, TJ)).proven


async def test_a_revoked_worker_is_proven_whatever_its_list_shows() -> None:
    # Every share of a revoked permit has ended: a pod object still listed runs nothing.
    manager, workers, m = await clusters()
    await workers["w1"].create(POD, pod("p-0", "Running"), NS)
    await revoke(manager, "w1")
    proof = await prove(dict(workers), m, NS, TJ)
    assert proof.proven
    assert "w1's permit is revoked" in proof.workers[0].how


async def test_a_missing_lease_and_no_list_prove_nothing() -> None:
    manager, workers, m = await clusters()
    await manager.delete(LEASE, lease_name("w1"), MNS)
    workers["w1"].before = unreachable
    assert not (await prove(dict(workers), m, NS, TJ)).proven


async def test_a_manager_that_cannot_read_its_lease_still_has_the_lists() -> None:
    manager, workers, m = await clusters()
    manager.before = unreachable
    assert (await prove(dict(workers), m, NS, TJ)).proven
    await workers["w2"].create(POD, pod("p-0", "Running"), NS)
    assert not (await prove(dict(workers), m, NS, TJ)).proven

"""The manager's readmission gate for a job MultiKueue runs in worker clusters (issue 30).

A manager's TrainJob with ``spec.managedBy: kueue.x-k8s.io/multikueue`` has no JobSet in
the manager (Trainer makes nothing for it) and its pods are the workers'. The gate approves
a dispatch of it only once every worker is proven free of the job's previous execution (a
live list there, or its permit revoked: admission.worker_proof), and its approval names no
JobSet. A controller that knows no worker never approves one, and says so on the check.
Against the in-memory fake ports of the manager and two workers."""

from __future__ import annotations

from typing import Any

import pytest

from admission.decision import PENDING, READY
from admission.permit_revocation import PermitRevocation
from admission.worker_proof import NO_WORKERS, Workers
from dispatch_kubeflow.core import errors, names
from dispatch_kubeflow.core.permit import lease_name, revocation
from dispatch_kubeflow.kube.resources import LEASE, POD, TRAINJOB, Resource
from tests.unit.fake_kube import FakeKube
from tests.unit.test_readmission_act import NS, SEEDS, TJ, World, world

pytestmark = [pytest.mark.asyncio, pytest.mark.virtual_time]
MNS = names.CONTROLLER_NAMESPACE


async def across(seed: int, *, known: bool = True) -> tuple[World, dict[str, FakeKube]]:
    """A manager whose TrainJob MultiKueue runs (no JobSet here), and two workers."""
    w = await world(seed, jobset="")
    tj = w.k.objects[(TRAINJOB.plural, NS, TJ)]
    tj["spec"]["managedBy"] = names.MULTIKUEUE_CONTROLLER
    workers = {"w1": FakeKube(seed + 10), "w2": FakeKube(seed + 20)}
    for c in workers:
        await w.k.create(LEASE, {"metadata": {"name": lease_name(c)}, "spec": {}}, MNS)
    if known:
        w.r.clusters = Workers(workers, PermitRevocation(w.k))
    return w, workers


def pod(name: str, phase: str = "Running") -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {names.JOBSET_NAME_LABEL: TJ}},
            "status": {"phase": phase}}


def unreachable(verb: str, res: Resource, _name: str) -> None:
    raise errors.KubeError("connection refused", status=0, reason="Unreachable")


@pytest.mark.parametrize("seed", SEEDS)
async def test_workers_listed_empty_approve_without_a_jobset(seed: int) -> None:
    w, workers = await across(seed)
    await workers["w1"].create(POD, pod("old-0", "Succeeded"), NS)  # ended: not alive
    await w.act()
    assert w.check()["state"] == READY
    a = w.annotations()
    assert a[names.ADMISSION_COUNT] == "1"
    assert names.APPROVED_JOBSET not in a  # nothing here to name


@pytest.mark.parametrize("seed", SEEDS)
async def test_an_alive_pod_in_a_worker_holds_the_dispatch_back(seed: int) -> None:
    w, workers = await across(seed)
    await workers["w2"].create(POD, pod("old-0", "Pending"), NS)  # could start: counts
    await w.act()
    check = w.check()
    assert check["state"] == PENDING
    assert "alive in worker w2" in check["message"]
    assert names.ADMISSION_COUNT not in w.annotations()
    await workers["w2"].delete(POD, "old-0", NS)
    await w.act()
    assert w.check()["state"] == READY
    assert w.annotations()[names.ADMISSION_COUNT] == "1"


@pytest.mark.parametrize("seed", SEEDS)
async def test_a_cut_off_worker_is_proven_only_by_its_revoked_permit(seed: int) -> None:
    w, workers = await across(seed)
    workers["w1"].before = unreachable
    await w.act()
    assert w.check()["state"] == PENDING
    assert "cannot list worker w1" in w.check()["message"]
    assert names.ADMISSION_COUNT not in w.annotations()
    lease = w.k.objects[(LEASE.plural, MNS, lease_name("w1"))]
    await w.k.replace(LEASE, revocation(lease), MNS)
    await w.act()
    assert w.check()["state"] == READY


@pytest.mark.parametrize("seed", SEEDS)
async def test_a_controller_that_knows_no_worker_never_approves(seed: int) -> None:
    w, _ = await across(seed, known=False)
    await w.act()
    assert w.check()["state"] == PENDING
    assert w.check()["message"] == NO_WORKERS
    assert names.ADMISSION_COUNT not in w.annotations()
    # Nor one given an empty set of workers: nothing says where the job ran.
    w.r.clusters = Workers({}, PermitRevocation(w.k))
    await w.act()
    assert w.check()["state"] == PENDING
    assert names.ADMISSION_COUNT not in w.annotations()


@pytest.mark.parametrize("seed", SEEDS)
async def test_a_single_cluster_job_still_waits_for_its_jobset(seed: int) -> None:
    """The manager's own TrainJobs (not MultiKueue's) keep the single-cluster gate: no
    JobSet yet, no approval, whatever the workers say."""
    w, _ = await across(seed)
    w.k.objects[(TRAINJOB.plural, NS, TJ)]["spec"].pop("managedBy")
    await w.act()
    assert w.check()["state"] == PENDING
    assert "waiting for Trainer to make JobSet" in w.check()["message"]


@pytest.mark.parametrize("seed", SEEDS)
async def test_a_remote_in_a_worker_is_never_approved_there(seed: int) -> None:
    """A worker's ClusterQueue that lists dispatch's check would ask the worker's controller
    about a MultiKueue remote, whose A is the manager's: raising it here would give its pods
    an identity the manager never approved. It stays Pending, saying how to fix it."""
    w = await world(seed)
    tj = w.k.objects[(TRAINJOB.plural, NS, TJ)]
    tj["metadata"].setdefault("labels", {})[names.MULTIKUEUE_ORIGIN_LABEL] = "multikueue"
    await w.act()
    check = w.check()
    assert check["state"] == PENDING
    assert "MultiKueue" in check["message"]
    assert names.ADMISSION_COUNT not in w.annotations()

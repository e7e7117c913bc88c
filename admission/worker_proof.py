"""The manager's gate across clusters: proof that no worker runs a job's previous execution.

Before dispatch's check on a manager Workload may turn Ready again (MultiKueue,
docs/multikueue-fence.md), every worker cluster the job may have run in must be proven free
of the job's alive pods, one of two ways:

- a live list of the job's pods in that worker shows none alive (a pod still waiting for
  its first answer counts: it could start);
- or the worker's permit is revoked, read live in the manager: every share it gave has
  ended, so no process of any of its pods runs, whatever a list would show.

A worker that cannot be listed and whose permit is not revoked proves nothing: the gate
waits (the revocation comes by itself, once the worker has been silent for the manager's
wait). Both reads of a worker are sent side by side; either one proves it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from admission.permit_revocation import PermitRevocation
from dispatch_kubeflow.core import errors, names
from dispatch_kubeflow.core.execution import alive
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import POD

NO_WORKERS = ("dispatch-admission knows no worker cluster, so nothing proves the job's "
              "previous execution gone: give the manager's controller its workers "
              "(docs/multikueue-fence.md)")


@dataclass(frozen=True, slots=True)
class WorkerProof:
    cluster: str
    proven: bool
    how: str
    """How it was proven, or why not: for the check's message and the log."""


@dataclass(frozen=True, slots=True)
class Proof:
    workers: tuple[WorkerProof, ...]

    @property
    def proven(self) -> bool:
        """Every worker proven, and at least one known: with none (the controller given no
        worker, by mistake) nothing says where the job ran, so nothing is proven."""
        return bool(self.workers) and all(w.proven for w in self.workers)

    def message(self) -> str:
        """The check's message while the gate waits ("" when proven)."""
        if not self.workers:
            return NO_WORKERS
        return "; ".join(w.how for w in self.workers if not w.proven)


async def prove_worker(cluster: str, worker: KubeAPI, revocation: PermitRevocation,
                       namespace: str, trainjob: str) -> WorkerProof:
    """Whether the worker ``cluster`` (through ``worker``, a client of its API server) is
    proven free of the alive pods of ``trainjob``'s executions."""
    async def listed() -> int | errors.KubeError:
        try:
            pods, _ = await worker.list(
                POD, namespace, label_selector=names.pods_of(trainjob))
        except errors.KubeError as exc:
            return exc
        return len(alive(pods))

    async def revoked() -> bool | errors.KubeError:
        try:
            return await revocation.revoked_live(cluster)
        except errors.KubeError as exc:
            return exc

    async with asyncio.TaskGroup() as tasks:
        count_task, revoked_task = tasks.create_task(listed()), tasks.create_task(revoked())
    count, is_revoked = count_task.result(), revoked_task.result()
    if is_revoked is True:
        return WorkerProof(cluster, True, f"worker {cluster}'s permit is revoked")
    if count == 0:
        return WorkerProof(cluster, True, f"worker {cluster} lists no alive pod of the job")
    if isinstance(count, int):
        return WorkerProof(cluster, False,
                           f"{count} pod(s) of the job still alive in worker {cluster}")
    return WorkerProof(cluster, False,
                       f"cannot list worker {cluster} ({count.reason or count}); waiting "
                       f"for its permit to lapse")


async def prove(workers: Mapping[str, KubeAPI], revocation: PermitRevocation,
                namespace: str, trainjob: str) -> Proof:
    """Every worker's proof, read side by side (the gate's condition)."""
    async with asyncio.TaskGroup() as tasks:
        each = [tasks.create_task(prove_worker(c, w, revocation, namespace, trainjob))
                for c, w in sorted(workers.items())]
    return Proof(tuple(t.result() for t in each))


class Workers:
    """The manager's worker clusters, a client of each one's API server by MultiKueueCluster
    name, and the permits' revocation: what the readmission gate proves a dispatch job's
    previous execution gone with (:func:`prove`)."""

    def __init__(self, clients: Mapping[str, KubeAPI], revocation: PermitRevocation) -> None:
        self.clients, self.revocation = dict(clients), revocation

    async def prove(self, namespace: str, trainjob: str) -> Proof:
        return await prove(self.clients, self.revocation, namespace, trainjob)

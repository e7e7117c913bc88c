"""Proof 6, MultiKueue mode: every worker can run the job and can be stopped.

Kueue's MultiKueue may dispatch a job to any worker of its config, so each is proved, one at
a time in parallel: it answers, it serves Trainer's and JobSet's APIs (and Kueue's, which
made its copy of the job), and the library may do there what it does in a worker — put the
runtime copy, and find, read and delete everything of the job (StopJob proves a worker
empty too). What a worker lacks counts for the start gate, naming the worker: Start is
refused (observe-only) rather than a job dispatched where it could not run or be stopped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.model import Capability
from dispatch_kubeflow.preflight.access import Permission, check_permissions
from dispatch_kubeflow.preflight.versions import ALWAYS, check_versions


def worker_permissions(ns: str) -> list[Permission]:
    """What the library does in a worker: the runtime copy; find, read and delete the job's
    objects (MultiKueue's copy of the TrainJob, its Workload, JobSet, Jobs, pods); logs."""
    sg = (Capability.START_GATE,)
    tg, jg, kg = names.TRAINER_GROUP, names.JOBSET_GROUP, names.KUEUE_GROUP
    out = [Permission(v, tg, "trainingruntimes", ns, sg) for v in
           ("create", "get", "list", "watch", "delete")]
    out += [Permission(v, tg, "trainjobs", ns, sg) for v in ("list", "watch", "delete")]
    out += [Permission(v, kg, "workloads", ns, sg) for v in ("list", "watch", "delete")]
    out += [Permission(v, jg, "jobsets", ns, sg) for v in ("list", "watch", "delete")]
    out += [Permission(v, "batch", "jobs", ns, sg) for v in ("list", "watch", "delete")]
    out += [Permission(v, "", "pods", ns, sg) for v in ("list", "watch", "delete")]
    out.append(Permission("get", "", "pods", ns, sg, subresource="log"))
    out.append(Permission("create", "events.k8s.io", "events", ns, sg))
    return out


async def check_workers(workers: Mapping[str, KubeAPI], namespace: str) -> list[str]:
    """What keeps each worker from running or stopping a job, each naming the worker
    ([] when every one can)."""

    async def one(name: str, wk: KubeAPI) -> list[str]:
        try:
            served = await check_versions(
                wk, [*ALWAYS, (names.KUEUE_GROUP, names.KUEUE_VERSION)])
            if served:
                return [f"worker {name}: {p}" for p in served]
            missing = await check_permissions(wk, worker_permissions(namespace))
        except errors.KubeError as exc:
            return [f"worker {name}: could not be checked: {exc}"]
        return [f"worker {name}: missing permissions: {', '.join(perms)}"
                for perms in missing.values()]

    found = await asyncio.gather(*(one(n, wk) for n, wk in workers.items()))
    return [p for problems in found for p in problems]

"""Proof 6, MultiKueue mode: every worker can run the job, fences its pods, and can be
stopped.

Kueue's MultiKueue may dispatch a job to any worker of its config, so each is proved, all at
once: it answers, it serves Trainer's and JobSet's APIs (and Kueue's, which made its copy of
the job), and the library may do there what it does in a worker — put the runtime copy, and
find, read and delete everything of the job (StopJob proves a worker empty too); what it
lacks counts for the start gate. And dispatch-admission's pod webhook guards its pods: a
server-side dry-run pod labelled as a pod of a job that does not exist there must be refused
by that webhook (fail-closed: a pod that no approved execution stands behind is never
made); otherwise attempt injection is no. Each reason names the worker: Start is refused
(observe-only) rather than a job dispatched where it could not run, be fenced or be stopped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.permit import lease_name
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import LEASE, POD
from dispatch_kubeflow.model import Capability, JobID
from dispatch_kubeflow.preflight.access import Permission, check_permissions
from dispatch_kubeflow.preflight.attempt import dry_run_pod
from dispatch_kubeflow.preflight.start_gate import PROBE_PREFIX
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
    # The fence's proof: a server-side dry-run pod (nothing is made).
    out.append(Permission("create", "", "pods", ns, (Capability.ATTEMPT_INJECTION,)))
    return out


async def check_workers(workers: Mapping[str, KubeAPI], namespace: str, manager: KubeAPI
                        ) -> dict[Capability, list[str]]:
    """What keeps each worker from running, fencing or stopping a job, by the capability it
    takes away, each naming the worker ({} when every one can). ``manager``: the backend's
    own cluster, where each worker's permit Lease is."""
    sg, ai = Capability.START_GATE, Capability.ATTEMPT_INJECTION

    async def one(name: str, wk: KubeAPI) -> dict[Capability, list[str]]:
        try:
            served = await check_versions(
                wk, [*ALWAYS, (names.KUEUE_GROUP, names.KUEUE_VERSION)])
            if served:
                return {sg: [f"worker {name}: {p}" for p in served]}
            missing = await check_permissions(wk, worker_permissions(namespace))
            out = {cap: [f"worker {name}: missing permissions: {', '.join(perms)}"]
                   for cap, perms in missing.items()}
            if ai not in out:
                unfenced = await fenced(wk, namespace) or await renewing(manager, name)
                if unfenced:
                    out[ai] = [f"worker {name}: {unfenced}"]
            return out
        except errors.KubeError as exc:
            return {sg: [f"worker {name}: could not be checked: {exc}"]}

    merged: dict[Capability, list[str]] = {}
    for found in await asyncio.gather(*(one(n, wk) for n, wk in workers.items())):
        for cap, problems in found.items():
            merged.setdefault(cap, []).extend(problems)
    return merged


async def fenced(kube: KubeAPI, namespace: str) -> str | None:
    """Why dispatch-admission's pod webhook is not the fence in this worker (None: it refused
    a dry-run pod of a job that does not exist there)."""
    job = JobID.new()
    probe = f"{PROBE_PREFIX}{str(job).lower()}"
    try:
        await kube.create(POD, dry_run_pod(job, probe), namespace, dry_run=True)
    except errors.KubeWebhookDenied as exc:
        if exc.webhook == names.WEBHOOK_NAME:
            return None
        return f"a dry-run dispatch pod was refused, but not by {names.WEBHOOK_NAME}: {exc}"
    return (f"a dry-run pod of a dispatch job that does not exist there was admitted: "
            f"dispatch-admission's pod webhook ({names.WEBHOOK_NAME}) does not guard its "
            "pods; install deploy/admission in its worker mode there")


async def renewing(manager: KubeAPI, worker: str) -> str | None:
    """Why ``worker``'s dispatch-admission does not run in its worker mode, as the manager
    shows it (None: it has renewed its permit). Every dispatch-admission refuses the dry-run
    pod of :func:`fenced`; one not in its worker mode refuses the pods of MultiKueue's copy
    too, so the job would never start there. Only the worker mode's agent renews the permit,
    so a Lease that names a holder proves it ran; revoked since (the worker cut off now) it
    still does: the readmission gate, not the preflight, waits for such a worker."""
    lease_ref = f"Lease {names.CONTROLLER_NAMESPACE}/{lease_name(worker)}"
    try:
        lease = await manager.get(LEASE, lease_name(worker), names.CONTROLLER_NAMESPACE)
    except errors.KubeNotFound:
        return (f"no permit {lease_ref} in the manager: install dispatch-admission's "
                "multikueue-manager component there and make the worker's permit Lease "
                "(docs/multikueue.md)")
    if not (lease.get("spec") or {}).get("holderIdentity"):
        return (f"its permit ({lease_ref} in the manager) was never renewed: "
                "dispatch-admission there does not run in its worker mode (install "
                "deploy/admission with its multikueue-worker component, docs/multikueue.md)")
    return None

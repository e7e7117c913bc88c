"""Proof 2, permissions: a SelfSubjectAccessReview for every verb and resource the library
uses. Each missing one is named in the reason of every capability that needs it; Hold is
proved by its permissions alone (Kueue and Trainer do the rest)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, replace

from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.model import Capability


@dataclass(frozen=True, slots=True)
class Permission:
    verb: str
    group: str
    resource: str
    namespace: str | None
    needed_by: tuple[Capability, ...]
    subresource: str | None = None

    def __str__(self) -> str:
        res = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        if self.group:
            res += f".{self.group}"
        where = f" in {self.namespace}" if self.namespace else " (cluster-wide)"
        return f"{self.verb} {res}{where}"

    @property
    def key(self) -> tuple[str, str, str, str | None, str | None]:
        return self.verb, self.group, self.resource, self.namespace, self.subresource


def common_permissions(ns: str) -> list[Permission]:
    """What the library needs in every mode, and which capability needs it.

    Verbs every operation needs (reading and deleting the job's objects) count for the
    start gate: a job that could not be found or stopped must not be started.
    """
    sg, ai = Capability.START_GATE, Capability.ATTEMPT_INJECTION
    tg, jg = names.TRAINER_GROUP, names.JOBSET_GROUP
    out = [Permission(v, tg, "trainjobs", ns, (sg,)) for v in
           ("create", "get", "list", "watch", "delete")]
    # patch: also the dry-run patches that prove who may write A (attempt injection).
    out.append(Permission("patch", tg, "trainjobs", ns, (sg, ai)))
    out += [Permission(v, tg, "trainingruntimes", ns, (sg,)) for v in
            ("create", "get", "list", "patch", "delete")]
    out.append(Permission("get", tg, "clustertrainingruntimes", None, (sg,)))
    out += [Permission(v, jg, "jobsets", ns, (sg,)) for v in ("list", "delete")]
    out += [Permission(v, "batch", "jobs", ns, (sg,)) for v in ("list", "delete")]
    out += [Permission(v, "", "pods", ns, (sg,)) for v in ("list", "watch")]
    out.append(Permission("delete", "", "pods", ns, (sg,)))
    out.append(Permission("get", "", "pods", ns, (sg,), subresource="log"))
    out.append(Permission("create", "", "pods", ns, (ai,)))
    out.append(Permission("create", "events.k8s.io", "events", ns, (sg,)))
    return out


def merged(perms: Iterable[Permission]) -> list[Permission]:
    """One Permission per verb and resource (one review each), needed by every capability
    any of its entries names, in the order first named."""
    out: dict[tuple[str, str, str, str | None, str | None], Permission] = {}
    for p in perms:
        have = out.get(p.key)
        out[p.key] = p if have is None else replace(
            have, needed_by=have.needed_by + tuple(c for c in p.needed_by
                                                   if c not in have.needed_by))
    return list(out.values())


async def check_permissions(kube: KubeAPI,
                            wanted: Iterable[Permission]) -> dict[Capability, list[str]]:
    """The missing permissions, by the capability that needs them."""

    async def review(p: Permission) -> tuple[Permission, bool]:
        allowed, _ = await kube.access_review(p.verb, p.resource, group=p.group,
                                              namespace=p.namespace, subresource=p.subresource)
        return p, allowed

    missing: dict[Capability, list[str]] = {}
    for p, allowed in await asyncio.gather(*(review(p) for p in wanted)):
        if not allowed:
            for cap in p.needed_by:
                missing.setdefault(cap, []).append(str(p))
    return missing


# --- what each mode needs beyond the common ones ----------------------------------------------


def kueue_permissions(ns: str) -> list[Permission]:
    """Kueue mode: Workloads (held by deactivating them), the queue, the check, the Lease."""
    sg, ri, hd = Capability.START_GATE, Capability.READMISSION_GATE, Capability.HOLD
    kg = names.KUEUE_GROUP
    out = [Permission(v, kg, "workloads", ns, (sg,)) for v in ("get", "list", "watch",
                                                               "delete")]
    out.append(Permission("patch", kg, "workloads", ns, (hd,)))
    out.append(Permission("get", kg, "localqueues", ns, (ri,)))
    out += [Permission("get", kg, r, None, (ri,)) for r in ("clusterqueues", "admissionchecks")]
    out += [Permission(v, "coordination.k8s.io", "leases", names.CONTROLLER_NAMESPACE, (ri,))
            for v in ("get", "watch")]
    return out


def plain_permissions(ns: str) -> list[Permission]:
    """Plain mode: a hold patches the TrainJob, and readmission waits for the old pods."""
    ri, hd = Capability.READMISSION_GATE, Capability.HOLD
    return [Permission("patch", names.TRAINER_GROUP, "trainjobs", ns, (hd,)),
            *(Permission(v, "", "pods", ns, (ri,)) for v in ("list", "watch"))]


def kueue_hold_reason(ns: str) -> str:
    return (f"Workloads in {ns} may be deactivated (spec.active) and annotated; Kueue "
            "then evicts them and suspends the TrainJob")


def plain_hold_reason(ns: str) -> str:
    return f"TrainJobs in {ns} may be suspended and annotated"

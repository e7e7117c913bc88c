"""Proof 3, the readmission gate: nothing admits a job again while pods of its previous
execution exist.

Kueue mode: the LocalQueue's ClusterQueue lists the AdmissionCheck with no ``onFlavors``
(a check limited to some flavors lets workloads on other flavors be admitted without it),
the AdmissionCheck's ``controllerName`` is dispatch's, and that controller holds its
Lease, fresh by the rules of leader election: a holder is alive while ``renewTime +
leaseDurationSeconds`` is in the future. The renewTime is compared with this machine's
clock; when that says stale, the Lease is watched for up to its duration (capped by
``timeouts.preflightProbe``) and a renewal seen happen proves the holder alive, whatever
the clocks say (client-go's own rule). Plain mode: the adapter is the gate itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.kueue import check_rules, is_our_check
from dispatch_kubeflow.core.lease import LeaseRecord
from dispatch_kubeflow.core.objects import meta
from dispatch_kubeflow.core.times import parse_time
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import ADMISSION_CHECK, CLUSTER_QUEUE, LEASE, LOCAL_QUEUE
from dispatch_kubeflow.model import CapabilitySource, CapabilityStatus
from dispatch_kubeflow.preflight.verdicts import no, yes
from dispatch_kubeflow.settings import KueueSettings
from dispatch_kubeflow.waits import wait_for


def lease_fresh(lease: Mapping[str, Any], now: datetime) -> tuple[bool, str]:
    """Leader-election freshness judged by renewTime against ``now`` (pure)."""
    record = LeaseRecord.from_lease(lease)
    holder, duration = record.holder, record.duration
    if not holder:
        return False, "has no holder"
    renewed = parse_time(record.renew_time) or parse_time(record.acquire_time)
    if renewed is None or duration <= 0:
        return False, f"is held by {holder} but has no renewTime or leaseDurationSeconds"
    age = (now - renewed).total_seconds()
    if age < duration:
        return True, f"held by {holder}, renewed {max(age, 0):.0f}s ago (duration {duration}s)"
    return False, (f"was last renewed by {holder} {age:.0f}s ago, longer than its "
                   f"leaseDurationSeconds ({duration}s)")


def check_queue(cluster_queue: Mapping[str, Any], check_name: str) -> str | None:
    """Why the ClusterQueue does not gate every workload by the check (None: it does)."""
    cq = meta(cluster_queue).get("name")
    for rule in check_rules(cluster_queue):
        if rule.get("name") == check_name:
            flavors = rule.get("onFlavors") or []
            if flavors:
                return (f"ClusterQueue {cq} lists AdmissionCheck {check_name} only onFlavors "
                        f"{', '.join(flavors)}: a check limited to some flavors lets workloads "
                        "on other flavors be admitted without it; list it with no onFlavors")
            return None
    return (f"ClusterQueue {cq} does not list AdmissionCheck {check_name} in "
            "spec.admissionChecksStrategy.admissionChecks, so Kueue would admit a job again "
            "without waiting for the pods of its previous execution to go")


async def plain_readmission(kube: KubeAPI, watch_for: float) -> CapabilityStatus:
    """Plain mode: the adapter is the gate itself (nothing to read)."""
    return yes("plain mode: the adapter raises A and unsuspends a job only after every "
               "pod of its previous execution has gone", CapabilitySource.MODE)


async def check_readmission(kube: KubeAPI, watch_for: float, *, ns: str,
                            kueue: KueueSettings) -> CapabilityStatus:
    """Kueue mode: the queue lists the check, whose controller is dispatch's and alive."""
    lq = await kube.get_or_none(LOCAL_QUEUE, kueue.local_queue, ns)
    if lq is None:
        return no(f"LocalQueue {ns}/{kueue.local_queue} not found")
    cq_name = str((lq.get("spec") or {}).get("clusterQueue") or "")
    cq = await kube.get_or_none(CLUSTER_QUEUE, cq_name) if cq_name else None
    if cq is None:
        return no(f"LocalQueue {ns}/{kueue.local_queue} points at ClusterQueue "
                   f"{cq_name or '(none)'}, which does not exist")
    problem = check_queue(cq, kueue.admission_check)
    if problem:
        return no(problem)
    ac = await kube.get_or_none(ADMISSION_CHECK, kueue.admission_check)
    if ac is None:
        return no(f"ClusterQueue {cq_name} lists AdmissionCheck {kueue.admission_check}, "
                   "which does not exist")
    if not is_our_check(ac):
        controller = str((ac.get("spec") or {}).get("controllerName") or "")
        return no(f"AdmissionCheck {kueue.admission_check} is served by controller "
                   f"{controller or '(none)'}, not dispatch's admission controller "
                   f"({names.CONTROLLER_NAME})")
    lease_id = f"{names.CONTROLLER_NAMESPACE}/{names.LEASE_NAME}"
    lease = await kube.get_or_none(LEASE, names.LEASE_NAME, names.CONTROLLER_NAMESPACE)
    if lease is None:
        return no(f"Lease {lease_id} of AdmissionCheck {kueue.admission_check}'s controller "
                   "does not exist: the admission controller is not running")
    fresh, how = lease_fresh(lease, datetime.now(UTC))
    if not fresh and (lease.get("spec") or {}).get("holderIdentity"):
        fresh, how = await _watch_renewal(kube, lease, watch_for, how)
    if not fresh:
        return no(f"Lease {lease_id} {how}: the admission controller is not running")
    return yes(f"ClusterQueue {cq_name} lists AdmissionCheck {kueue.admission_check}, whose "
                f"controller holds Lease {lease_id}")


async def _watch_renewal(kube: KubeAPI, lease: Mapping[str, Any], seconds: float,
                         stale: str) -> tuple[bool, str]:
    """Watch the Lease: a renewal seen happen proves its holder alive (clock-independent)."""
    record = LeaseRecord.from_lease(lease)
    duration = float(record.duration)
    first = (record.holder, record.renew_time)

    def renewed(leases: Mapping[str, dict[str, Any]]) -> bool | None:
        now = LeaseRecord.from_lease(leases.get(names.LEASE_NAME) or {})
        if now.holder and (now.holder, now.renew_time) != first:
            return True
        return None

    try:
        async with asyncio.timeout(min(duration, seconds) if duration else seconds):
            await wait_for(kube, LEASE, names.CONTROLLER_NAMESPACE, renewed,
                           field_selector=f"metadata.name={names.LEASE_NAME}")
    except TimeoutError:
        return False, f"{stale}, and was not renewed while watched"
    return True, "renewed while watched"

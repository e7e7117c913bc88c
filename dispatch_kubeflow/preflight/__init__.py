"""The preflight: what the backend proves before it may start jobs.

Run when the backend opens, in this order, one module per proof; what differs between the
modes is the mode's, asked once (:class:`~dispatch_kubeflow.preflight.mode.Proofs`):

1. **API versions** (:mod:`.versions`) — the cluster serves
   ``trainer.kubeflow.org/v1alpha1``, ``jobset.x-k8s.io/v1alpha2`` and, in Kueue mode,
   ``kueue.x-k8s.io/v1beta2``. Otherwise every capability is no. 2. **Permissions**
   (:mod:`.access`) — a SelfSubjectAccessReview for every verb and resource the library
   uses; each missing one is named in the reason of the capability that needs it (verbs
   every operation needs — reading and deleting the job's objects — count for the start
   gate: a job that could not be found or stopped must not be started). 3. **Readmission
   gate** (:mod:`.readmission`, Kueue mode) — the LocalQueue's ClusterQueue lists the
   AdmissionCheck with no ``onFlavors`` (a check limited to some flavors lets workloads on
   other flavors be admitted without it), the AdmissionCheck's ``controllerName`` is
   dispatch's, and that controller holds its Lease, fresh by the rules of leader election: a
   holder is alive while ``renewTime + leaseDurationSeconds`` is in the future. The
   renewTime is compared with this machine's clock; when that says stale, the Lease is
   watched for up to its duration (capped by ``timeouts.preflightProbe``) and a renewal seen
   happen proves the holder alive, whatever the clocks say (client-go's own rule). Plain
   mode: the adapter is the gate itself (yes, source ``mode``). 4. **Start gate**
   (:mod:`.start_gate`, :mod:`.probe_watch`) — a probe TrainJob ``dj-probe-<random id>`` is
   created closed (Kueue: gated and suspended; plain: suspended) and unschedulable (a
   runtime patch gives its pods a node selector no node has), and watched for
   ``timeouts.preflightProbe``: Kueue must report its Workload ``AdmissionGated`` and
   nothing may be admitted and no pod created. It is deleted afterwards, whatever happened.
   A watch that fails proves nothing: the start gate is then unknown, naming the error. 5.
   **Attempt injection** (:mod:`.attempt`, :mod:`.a_writes`) — while the probe exists, a
   server-side dry-run creates a pod labelled as a pod of the probe; the admission
   controller's webhook must have set ``DISPATCH_ATTEMPT=<probe job>.1.1.0.0`` and
   ``DISPATCH_EPOCH=1000000``. Then the identity must be one nobody else can lower: two
   server-side dry-run patches of the probe, one of its A
   (``dispatch.phpboyscout.uk/admission-count``) and one of another annotation. In Kueue
   mode the first must be refused (403 Forbidden or 422 Invalid, about the probe) while the
   second is admitted: ValidatingAdmissionPolicy ``dispatch-admission-count`` is in force,
   so only the admission controller raises A. In plain mode the library raises A itself, so
   both must be admitted. 6. **Workers** (:mod:`.workers`, MultiKueue mode) — every worker
   answers, serves Trainer's, JobSet's and Kueue's APIs, and lets the library put the
   runtime copy and find, read and delete the job's objects (else the start gate is no), and
   its dispatch-admission webhook refuses a dry-run pod of a job that does not exist there
   (else attempt injection is no); each reason names the worker.

Hold: Kueue mode needs Workloads to be patchable (``spec.active`` and annotations),
plain mode TrainJobs; Kueue and Trainer themselves do the rest.

Any capability that is no or unknown makes the backend observe-only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from dispatch_kubeflow import errors
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.model import Capability, CapabilitySource, CapabilityStatus
from dispatch_kubeflow.preflight.a_writes import (
    A_POLICY,
    POLICY_DENIALS,
    SELF_SUBJECT_REVIEW,
    a_binding,
    a_write_patch,
    control_patch,
    judge_kueue_a_writes,
    judge_kueue_guard,
    judge_plain_a_writes,
    judge_plain_guard,
    refused_by_policy,
    resume_patch,
    unqueue_patch,
)
from dispatch_kubeflow.preflight.access import (
    Permission,
    check_permissions,
    common_permissions,
    merged,
)
from dispatch_kubeflow.preflight.attempt import check_injected, dry_run_pod
from dispatch_kubeflow.preflight.mode import PreflightMode, Proofs
from dispatch_kubeflow.preflight.readmission import check_queue, lease_fresh
from dispatch_kubeflow.preflight.start_gate import PROBE_PREFIX, probe, probe_body
from dispatch_kubeflow.preflight.verdicts import ALL, Caps, no, unknown, yes
from dispatch_kubeflow.preflight.versions import ALWAYS, check_versions
from dispatch_kubeflow.preflight.workers import check_workers
from dispatch_kubeflow.settings import Settings

__all__ = [
    "ALL",
    "A_POLICY",
    "POLICY_DENIALS",
    "PROBE_PREFIX",
    "SELF_SUBJECT_REVIEW",
    "Caps",
    "Permission",
    "PreflightMode",
    "Proofs",
    "a_binding",
    "a_write_patch",
    "check_injected",
    "check_queue",
    "control_patch",
    "dry_run_pod",
    "judge_kueue_a_writes",
    "judge_kueue_guard",
    "judge_plain_a_writes",
    "judge_plain_guard",
    "lease_fresh",
    "observe_only_reasons",
    "permissions",
    "probe_body",
    "refused_by_policy",
    "resume_patch",
    "run",
    "unqueue_patch",
]


def permissions(settings: Settings, mode: PreflightMode | Proofs) -> list[Permission]:
    """Every verb and resource the library uses in ``mode``, and which capability needs it."""
    proofs = mode if isinstance(mode, Proofs) else mode.proofs()
    return merged([*common_permissions(settings.namespace), *proofs.permissions])


async def run(kube: KubeAPI, settings: Settings, mode: PreflightMode) -> Caps:
    """Every capability's status in ``mode``; see the module docstring."""
    proofs = mode.proofs()
    try:
        problems = await check_versions(kube, [*ALWAYS, *proofs.api_versions])
    except errors.KubeError as exc:
        return dict.fromkeys(ALL, unknown(f"could not read the served API versions: {exc}",
                                           CapabilitySource.NOT_CHECKED))
    if problems:
        return dict.fromkeys(ALL, no("; ".join(problems)))
    try:
        missing = await check_permissions(kube, permissions(settings, proofs))
    except errors.KubeError as exc:
        return dict.fromkeys(ALL, unknown(f"could not review permissions: {exc}",
                                           CapabilitySource.NOT_CHECKED))
    caps: Caps = {
        Capability.HOLD: yes(proofs.hold_reason),
        Capability.ATTEMPT_INJECTION: unknown("not probed", CapabilitySource.NOT_CHECKED),
        Capability.START_GATE: unknown("not probed", CapabilitySource.NOT_CHECKED),
    }
    seconds = settings.timeouts.preflight_probe.total_seconds()

    async def readmission() -> None:
        if Capability.READMISSION_GATE in missing:
            return
        try:
            caps[Capability.READMISSION_GATE] = await proofs.readmission(kube, seconds)
        except errors.KubeError as exc:
            caps[Capability.READMISSION_GATE] = unknown(f"could not check: {exc}")

    async def start_gate() -> None:
        if Capability.START_GATE in missing:
            return
        try:
            await probe(kube, settings, proofs, caps,
                        try_injection=Capability.ATTEMPT_INJECTION not in missing)
        except errors.KubeError as exc:
            caps[Capability.START_GATE] = unknown(f"the start-gate probe failed: {exc}")

    async def workers() -> dict[Capability, list[str]]:
        return await check_workers(proofs.workers, settings.namespace, kube)

    _, _, lacking = await asyncio.gather(readmission(), start_gate(), workers())
    for cap, perms in missing.items():
        caps[cap] = no("missing permissions: " + ", ".join(perms))
    for cap, problems in lacking.items():
        caps[cap] = no("; ".join(problems))
    return {cap: caps.get(cap, unknown("not checked", CapabilitySource.NOT_CHECKED))
            for cap in ALL}


def observe_only_reasons(caps: Mapping[Capability, CapabilityStatus]) -> list[str]:
    """One line per capability that is not yes."""
    return [f"{cap.value}: {st.value.value} ({st.reason})" for cap, st in caps.items()
            if not st.ok]


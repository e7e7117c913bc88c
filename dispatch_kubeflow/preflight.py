"""The preflight: what the backend proves before it may start jobs.

Run when the backend opens, in this order:

1. **API versions** — the cluster serves ``trainer.kubeflow.org/v1alpha1``,
   ``jobset.x-k8s.io/v1alpha2`` and, in Kueue mode, ``kueue.x-k8s.io/v1beta2``. Otherwise
   every capability is no.
2. **Permissions** — a SelfSubjectAccessReview for every verb and resource the library
   uses; each missing one is named in the reason of the capability that needs it (verbs
   every operation needs — reading and deleting the job's objects — count for the start
   gate: a job that could not be found or stopped must not be started).
3. **Readmission gate** (Kueue mode) — the LocalQueue's ClusterQueue lists the
   AdmissionCheck with no ``onFlavors`` (a check limited to some flavors lets workloads on
   other flavors be admitted without it), the AdmissionCheck's ``controllerName`` is
   dispatch's, and that controller holds its Lease, fresh by the rules of leader election:
   a holder is alive while ``renewTime + leaseDurationSeconds`` is in the future. The
   renewTime is compared with this machine's clock; when that says stale, the Lease is
   watched for up to its duration (capped by ``timeouts.preflightProbe``) and a renewal
   seen happen proves the holder alive, whatever the clocks say (client-go's own rule).
   Plain mode: the adapter is the gate itself (yes, source ``mode``).
4. **Start gate** — a probe TrainJob ``dj-probe-<random id>`` is created closed (Kueue:
   gated and suspended; plain: suspended) and unschedulable (a runtime patch gives its
   pods a node selector no node has), and watched for ``timeouts.preflightProbe``: Kueue
   must report its Workload ``AdmissionGated`` and nothing may be admitted and no pod
   created. It is deleted afterwards, whatever happened.
5. **Attempt injection** — while the probe exists, a server-side dry-run creates a pod
   labelled as a pod of the probe; the admission controller's webhook must have set
   ``DISPATCH_ATTEMPT=<probe job>.1.1.0.0`` and ``DISPATCH_EPOCH=1000000``. Then the identity
   must be one nobody else can lower: two server-side dry-run patches of the probe, one of
   its A (``dispatch.phpboyscout.uk/admission-count``) and one of another annotation. In
   Kueue mode the first must be refused (403 Forbidden or 422 Invalid, about the probe) while
   the second is admitted: ValidatingAdmissionPolicy ``dispatch-admission-count`` is in
   force, so only the admission controller raises A. In plain mode the library raises A
   itself, so both must be admitted.

Hold: Kueue mode needs Workloads to be patchable (``spec.active`` and annotations),
plain mode TrainJobs; Kueue and Trainer themselves do the rest.

Any capability that is no or unknown makes the backend observe-only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from dispatch_kubeflow import errors
from dispatch_kubeflow.core import identity, names
from dispatch_kubeflow.core.objects import condition, meta
from dispatch_kubeflow.core.times import parse_time
from dispatch_kubeflow.kube import Kube, Resource
from dispatch_kubeflow.kube.resources import (
    ADMISSION_CHECK,
    CLUSTER_QUEUE,
    CLUSTER_TRAINING_RUNTIME,
    LEASE,
    LOCAL_QUEUE,
    POD,
    TRAINING_RUNTIME,
    TRAINJOB,
    WORKLOAD,
)
from dispatch_kubeflow.model import (
    Capability,
    CapabilitySource,
    CapabilityStatus,
    CapabilityValue,
    JobID,
)
from dispatch_kubeflow.settings import Settings
from dispatch_kubeflow.waits import cancel_all, wait_for

log = logging.getLogger(__name__)

Caps = dict[Capability, CapabilityStatus]
ALL = tuple(Capability)
PROBE_PREFIX = "dj-probe-"
PROBE_MANAGER = f"{names.DOMAIN}/preflight"
PROBE_NODE_LABEL = f"{names.DOMAIN}/preflight-probe"
PROBE_IMAGE = "registry.k8s.io/pause:3.10"


def _yes(reason: str, source: CapabilitySource = CapabilitySource.PROBED) -> CapabilityStatus:
    return CapabilityStatus(CapabilityValue.YES, source, reason)


def _no(reason: str) -> CapabilityStatus:
    return CapabilityStatus(CapabilityValue.NO, CapabilitySource.PROBED, reason)


def _unknown(reason: str,
             source: CapabilitySource = CapabilitySource.PROBED) -> CapabilityStatus:
    return CapabilityStatus(CapabilityValue.UNKNOWN, source, reason)


# --- 1. API versions ----------------------------------------------------------------------------


def required_versions(kueue: bool) -> list[tuple[str, str]]:
    out = [(names.TRAINER_GROUP, names.TRAINER_VERSION), (names.JOBSET_GROUP,
                                                         names.JOBSET_VERSION)]
    if kueue:
        out.append((names.KUEUE_GROUP, names.KUEUE_VERSION))
    return out


async def check_versions(kube: Kube, kueue: bool) -> list[str]:
    """Problems with the served API versions ([] when all are served)."""
    problems = []
    for group, version in required_versions(kueue):
        served = await kube.served_versions(group)
        if version not in served:
            have = f"it serves {', '.join(served)}" if served else "the group is not installed"
            problems.append(f"the cluster does not serve {group}/{version} ({have})")
    return problems


# --- 2. permissions -----------------------------------------------------------------------------


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


def permissions(settings: Settings) -> list[Permission]:
    """Every verb and resource the library uses, and which capability needs it."""
    ns = settings.namespace
    sg, ri, hd, ai = (Capability.START_GATE, Capability.READMISSION_GATE, Capability.HOLD,
                      Capability.ATTEMPT_INJECTION)
    tg, jg, kg = names.TRAINER_GROUP, names.JOBSET_GROUP, names.KUEUE_GROUP
    kueue = settings.kueue is not None
    out = [Permission(v, tg, "trainjobs", ns, (sg,)) for v in
           ("create", "get", "list", "watch", "delete")]
    # patch: also the dry-run patches that prove who may write A (attempt injection).
    out.append(Permission("patch", tg, "trainjobs", ns, (sg, hd, ai) if not kueue else (sg, ai)))
    out += [Permission(v, tg, "trainingruntimes", ns, (sg,)) for v in
            ("create", "get", "list", "patch", "delete")]
    out.append(Permission("get", tg, "clustertrainingruntimes", None, (sg,)))
    out += [Permission(v, jg, "jobsets", ns, (sg,)) for v in ("list", "delete")]
    out += [Permission(v, "batch", "jobs", ns, (sg,)) for v in ("list", "delete")]
    out += [Permission(v, "", "pods", ns, (sg,) if kueue else (sg, ri)) for v in
            ("list", "watch")]
    out.append(Permission("delete", "", "pods", ns, (sg,)))
    out.append(Permission("get", "", "pods", ns, (sg,), subresource="log"))
    out.append(Permission("create", "", "pods", ns, (ai,)))
    out.append(Permission("create", "events.k8s.io", "events", ns, (sg,)))
    if kueue:
        out += [Permission(v, kg, "workloads", ns, (sg,)) for v in ("get", "list", "watch",
                                                                    "delete")]
        out.append(Permission("patch", kg, "workloads", ns, (hd,)))
        out.append(Permission("get", kg, "localqueues", ns, (ri,)))
        out += [Permission("get", kg, r, None, (ri,)) for r in ("clusterqueues",
                                                                "admissionchecks")]
        out += [Permission(v, "coordination.k8s.io", "leases", names.CONTROLLER_NAMESPACE, (ri,))
                for v in ("get", "watch")]
    return out


async def check_permissions(kube: Kube, settings: Settings) -> dict[Capability, list[str]]:
    """The missing permissions, by the capability that needs them."""
    wanted = permissions(settings)

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


# --- 3. readmission gate --------------------------------------------------------------------------


def lease_fresh(lease: Mapping[str, Any], now: datetime) -> tuple[bool, str]:
    """Leader-election freshness judged by renewTime against ``now`` (pure)."""
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity") or ""
    if not holder:
        return False, "has no holder"
    duration = int(spec.get("leaseDurationSeconds") or 0)
    renewed = parse_time(spec.get("renewTime")) or parse_time(spec.get("acquireTime"))
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
    rules = ((cluster_queue.get("spec") or {}).get("admissionChecksStrategy") or {}).get(
        "admissionChecks") or []
    for rule in rules:
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


async def check_readmission(kube: Kube, settings: Settings, watch_for: float) -> CapabilityStatus:
    kueue = settings.kueue
    if kueue is None:
        return _yes("plain mode: the adapter raises A and unsuspends a job only after every "
                    "pod of its previous execution has gone", CapabilitySource.MODE)
    ns = settings.namespace
    lq = await kube.get_or_none(LOCAL_QUEUE, kueue.local_queue, ns)
    if lq is None:
        return _no(f"LocalQueue {ns}/{kueue.local_queue} not found")
    cq_name = str((lq.get("spec") or {}).get("clusterQueue") or "")
    cq = await kube.get_or_none(CLUSTER_QUEUE, cq_name) if cq_name else None
    if cq is None:
        return _no(f"LocalQueue {ns}/{kueue.local_queue} points at ClusterQueue "
                   f"{cq_name or '(none)'}, which does not exist")
    problem = check_queue(cq, kueue.admission_check)
    if problem:
        return _no(problem)
    ac = await kube.get_or_none(ADMISSION_CHECK, kueue.admission_check)
    if ac is None:
        return _no(f"ClusterQueue {cq_name} lists AdmissionCheck {kueue.admission_check}, "
                   "which does not exist")
    controller = str((ac.get("spec") or {}).get("controllerName") or "")
    if controller != names.CONTROLLER_NAME:
        return _no(f"AdmissionCheck {kueue.admission_check} is served by controller "
                   f"{controller or '(none)'}, not dispatch's admission controller "
                   f"({names.CONTROLLER_NAME})")
    lease_id = f"{names.CONTROLLER_NAMESPACE}/{names.LEASE_NAME}"
    lease = await kube.get_or_none(LEASE, names.LEASE_NAME, names.CONTROLLER_NAMESPACE)
    if lease is None:
        return _no(f"Lease {lease_id} of AdmissionCheck {kueue.admission_check}'s controller "
                   "does not exist: the admission controller is not running")
    fresh, how = lease_fresh(lease, datetime.now(UTC))
    if not fresh and (lease.get("spec") or {}).get("holderIdentity"):
        fresh, how = await _watch_renewal(kube, lease, watch_for, how)
    if not fresh:
        return _no(f"Lease {lease_id} {how}: the admission controller is not running")
    return _yes(f"ClusterQueue {cq_name} lists AdmissionCheck {kueue.admission_check}, whose "
                f"controller holds Lease {lease_id}")


async def _watch_renewal(kube: Kube, lease: Mapping[str, Any], seconds: float,
                         stale: str) -> tuple[bool, str]:
    """Watch the Lease: a renewal seen happen proves its holder alive (clock-independent)."""
    spec = lease.get("spec") or {}
    duration = float(spec.get("leaseDurationSeconds") or 0)
    first = (spec.get("holderIdentity"), spec.get("renewTime"))

    def renewed(leases: Mapping[str, dict[str, Any]]) -> bool | None:
        now = leases.get(names.LEASE_NAME)
        s = (now or {}).get("spec") or {}
        if s.get("holderIdentity") and (s.get("holderIdentity"), s.get("renewTime")) != first:
            return True
        return None

    try:
        async with asyncio.timeout(min(duration, seconds) if duration else seconds):
            await wait_for(kube, LEASE, names.CONTROLLER_NAMESPACE, renewed,
                           field_selector=f"metadata.name={names.LEASE_NAME}")
    except TimeoutError:
        return False, f"{stale}, and was not renewed while watched"
    return True, "renewed while watched"


# --- 4 and 5. the probe ---------------------------------------------------------------------------


@dataclass
class ProbeWatch:
    """What the probe's watch saw."""

    gated_seen: bool = False
    breach: list[str] = field(default_factory=list)
    workload_reason: str = ""


def probe_body(settings: Settings, runtime: Mapping[str, Any], job: JobID) -> dict[str, Any]:
    """The closed, unschedulable probe TrainJob (pure)."""
    name = PROBE_PREFIX + job.lower()
    labels = {names.JOB_ID_LABEL: str(job), names.SUBMISSION_LABEL: "1",
              names.ATTEMPT_LABEL: "1", names.MANAGED_BY_LABEL: names.MANAGED_BY}
    annotations = {}
    if settings.kueue is not None:
        labels[names.QUEUE_NAME_LABEL] = settings.kueue.local_queue
        if settings.kueue.priority_class:
            labels[names.PRIORITY_CLASS_LABEL] = settings.kueue.priority_class
        annotations[names.ADMISSION_GATED_BY] = names.GATE
    rjs = [rj.get("name") for rj in (((runtime.get("spec") or {}).get("template") or {})
                                     .get("spec") or {}).get("replicatedJobs") or []
           if rj.get("name")]
    patch = {"manager": PROBE_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": rj, "template": {"spec": {"template": {"spec": {
            "nodeSelector": {PROBE_NODE_LABEL: "unschedulable"}}}}}} for rj in rjs]}}}}
    return {
        "metadata": {"name": name, "namespace": settings.namespace, "labels": labels,
                     "annotations": annotations},
        "spec": {
            "runtimeRef": {"apiGroup": names.TRAINER_GROUP, "kind": settings.probe_runtime.kind,
                           "name": settings.probe_runtime.name},
            "trainer": {"numNodes": 1},
            "runtimePatches": [patch] if rjs else [],
            "suspend": True,
        },
    }


def dry_run_pod(settings: Settings, job: JobID, probe_name: str) -> dict[str, Any]:
    """A pod labelled as rank 0 of the probe's first execution (pure)."""
    return {
        "metadata": {
            "generateName": f"{probe_name}-dry-",
            "labels": {names.JOB_ID_LABEL: str(job), names.SUBMISSION_LABEL: "1",
                       names.ATTEMPT_LABEL: "1", names.JOBSET_NAME_LABEL: probe_name,
                       names.RESTART_ATTEMPT_LABEL: "0"},
        },
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {PROBE_NODE_LABEL: "unschedulable"},
            "containers": [{"name": names.TRAINER_CONTAINER, "image": PROBE_IMAGE}],
        },
    }


def check_injected(pod: Mapping[str, Any], job: JobID) -> str | None:
    """Why the dry-run pod does not carry the expected identity (None: it does)."""
    want = identity.ExecutionIdentity(str(job), 1, 1, 0, 0).env()
    for c in (pod.get("spec") or {}).get("containers") or []:
        env = {e.get("name"): e.get("value") for e in c.get("env") or []}
        for key in (names.ENV_ATTEMPT, names.ENV_EPOCH):
            if env.get(key) != want[key]:
                got = env.get(key)
                return (f"a dry-run pod of the probe got {key}={got!r}, not {want[key]!r}: "
                        "is dispatch-admission's MutatingWebhookConfiguration "
                        f"({names.WEBHOOK_NAME}) installed?" if got is None else
                        f"a dry-run pod of the probe got {key}={got!r}, not {want[key]!r}")
    return None


async def probe(kube: Kube, settings: Settings, caps: Caps, *, try_injection: bool) -> None:
    """Prove the start gate (and attempt injection while the probe exists) into ``caps``."""
    pr = settings.probe_runtime
    ns = settings.namespace
    if pr.kind == "ClusterTrainingRuntime":
        runtime = await kube.get_or_none(CLUSTER_TRAINING_RUNTIME, pr.name)
    else:
        runtime = await kube.get_or_none(TRAINING_RUNTIME, pr.name, ns)
    if runtime is None:
        caps[Capability.START_GATE] = _unknown(f"probeRuntime {pr.kind} {pr.name} not found, "
                                               "so the start gate could not be probed")
        caps[Capability.ATTEMPT_INJECTION] = _unknown(
            "not probed: it needs the start-gate probe TrainJob", CapabilitySource.NOT_CHECKED)
        return
    job = JobID.new()
    body = probe_body(settings, runtime, job)
    name = body["metadata"]["name"]
    created = await kube.create(TRAINJOB, body, ns, field_manager=names.ADAPTER_FIELD_MANAGER)
    seconds = settings.timeouts.preflight_probe.total_seconds()
    try:
        seen = ProbeWatch()
        watches = [_watch_pods(kube, ns, name, seen)]
        if settings.kueue is not None:
            watches.append(_watch_workload(kube, ns, str(meta(created)["uid"]), seen))
        else:
            watches.append(_watch_suspend(kube, ns, name, seen))
        tasks = [asyncio.ensure_future(w) for w in watches]
        try:
            if try_injection:
                caps[Capability.ATTEMPT_INJECTION] = await _attempt_injection(
                    kube, settings, job, name)
            await asyncio.sleep(seconds)
        finally:
            await cancel_all(tasks)
        caps[Capability.START_GATE] = _judge_probe(settings, name, seen, seconds)
    finally:
        with contextlib.suppress(errors.KubeError):
            await kube.delete(TRAINJOB, name, ns, uid=str(meta(created)["uid"]))


def _judge_probe(settings: Settings, name: str, seen: ProbeWatch,
                 seconds: float) -> CapabilityStatus:
    if seen.breach:
        return _no(f"probe TrainJob {name} was not held by its gate: {'; '.join(seen.breach)}")
    if settings.kueue is None:
        return _yes(f"probe TrainJob {name} stayed suspended for {seconds:g}s with no pod")
    if seen.gated_seen:
        return _yes(f"probe TrainJob {name} stayed gated for {seconds:g}s: Kueue reported its "
                    "Workload AdmissionGated, admitted nothing, and no pod was created")
    if seen.workload_reason:
        return _unknown(f"Kueue did not report probe TrainJob {name}'s Workload AdmissionGated "
                        f"within {seconds:g}s ({seen.workload_reason}); is the feature gate "
                        "AdmissionGatedBy on?")
    return _unknown(f"Kueue made no Workload for probe TrainJob {name} within {seconds:g}s; is "
                    "the TrainJob integration (trainer.kubeflow.org/trainjob) enabled?")


async def _watch_pods(kube: Kube, ns: str, name: str, seen: ProbeWatch) -> None:
    def any_pod(pods: Mapping[str, Any]) -> bool | None:
        if pods:
            seen.breach.append(f"pod {next(iter(pods))} was created")
            return True
        return None

    await wait_for(kube, POD, ns, any_pod, label_selector=f"{names.JOBSET_NAME_LABEL}={name}")


async def _watch_workload(kube: Kube, ns: str, uid: str, seen: ProbeWatch) -> None:
    def look(wls: Mapping[str, Any]) -> bool | None:
        for wl in wls.values():
            qr = condition(wl, "QuotaReserved") or {}
            if qr.get("status") == "True" or (condition(wl, "Admitted") or {}).get(
                    "status") == "True":
                seen.breach.append(f"Workload {meta(wl)['name']} got quota or was admitted")
                return True
            if qr.get("reason") == "AdmissionGated":
                seen.gated_seen = True
            elif qr:
                seen.workload_reason = f"QuotaReserved {qr.get('reason')}: {qr.get('message')}"
            elif not seen.workload_reason:
                seen.workload_reason = "the Workload has no QuotaReserved condition"
        return None

    await wait_for(kube, WORKLOAD, ns, look, label_selector=f"{names.KUEUE_JOB_UID_LABEL}={uid}")


async def _watch_suspend(kube: Kube, ns: str, name: str, seen: ProbeWatch) -> None:
    def look(tjs: Mapping[str, Any]) -> bool | None:
        tj = tjs.get(name)
        if tj is not None and not (tj.get("spec") or {}).get("suspend"):
            seen.breach.append("it was unsuspended")
            return True
        return None

    await wait_for(kube, TRAINJOB, ns, look, field_selector=f"metadata.name={name}")


_SERVICE_ACCOUNT = Resource("", "v1", "serviceaccounts", "ServiceAccount")
_SERVICE_ACCOUNT_WAIT = 15.0
"""How long the probe waits for a new namespace's ``default`` ServiceAccount."""


async def _default_service_account(kube: Kube, namespace: str) -> bool:
    """Whether the namespace has its ``default`` ServiceAccount, waiting briefly for it: the
    API server refuses every pod, dry-run ones too, until the controller-manager has made it,
    which in a namespace made a moment ago it may not have yet."""
    try:
        async with asyncio.timeout(_SERVICE_ACCOUNT_WAIT):
            await wait_for(kube, _SERVICE_ACCOUNT, namespace,
                           lambda objs: True if "default" in objs else None,
                           field_selector="metadata.name=default")
    except TimeoutError:
        return False
    except errors.KubeForbidden:
        return True  # not ours to read: the dry-run pod below will say what is wrong
    return True


async def _attempt_injection(kube: Kube, settings: Settings, job: JobID,
                             probe_name: str) -> CapabilityStatus:
    if not await _default_service_account(kube, settings.namespace):
        return _no(f"namespace {settings.namespace} has no ServiceAccount 'default' after "
                   f"{_SERVICE_ACCOUNT_WAIT:g}s, so no pod can be made there (is the "
                   "controller-manager's serviceaccount controller running?)")
    try:
        pod = await kube.create(POD, dry_run_pod(settings, job, probe_name), settings.namespace,
                                dry_run=True)
    except errors.KubeError as exc:
        return _no(f"a dry-run pod of probe TrainJob {probe_name} was refused: {exc}")
    problem = check_injected(pod, job)
    if problem:
        return _no(problem)
    injected = (f"the admission webhook set {names.ENV_ATTEMPT}={job}.1.1.0.0 and "
                f"{names.ENV_EPOCH}=1000000 on a dry-run pod of probe TrainJob {probe_name}")
    writes = await check_a_writes(kube, settings, probe_name)
    if not writes.ok:
        return writes
    # Two lines: the first stays the one the seed's tutorial prints.
    return _yes("\n".join((injected, writes.reason)))


# --- 5b. who may write A -------------------------------------------------------------------------

A_POLICY = "dispatch-admission-count"
"""The ValidatingAdmissionPolicy of deploy/admission/admission-count-policy.yaml."""
A_CONTROL_ANNOTATION = f"{names.DOMAIN}/preflight-probe"
"""Set by the control patch: an annotation anybody who may patch the probe may write."""
SELF_SUBJECT_REVIEW = Resource("authentication.k8s.io", "v1", "selfsubjectreviews",
                               "SelfSubjectReview", namespaced=False)
# How a ValidatingAdmissionPolicy denies: the reason its validation names (the shipped one
# says Forbidden), 422 Invalid when it names none (apiserver's validating dispatcher).
POLICY_DENIALS = frozenset({(403, "Forbidden"), (422, "Invalid")})


def a_binding(kueue: bool) -> str:
    """The policy's binding, and its ConfigMap of writers in dispatch-system, for the mode."""
    return f"{A_POLICY}-{'kueue' if kueue else 'plain'}"


def a_write_patch() -> dict[str, Any]:
    """The dry-run merge patch that raises the probe's A (never admitted, so 0) to 1 (pure)."""
    return {"metadata": {"annotations": {names.ADMISSION_COUNT: "1"}}}


def control_patch() -> dict[str, Any]:
    """The dry-run merge patch of another annotation: the policy must admit it (pure)."""
    return {"metadata": {"annotations": {A_CONTROL_ANNOTATION: "dry-run"}}}


def refused_by_policy(exc: errors.KubeError, probe_name: str) -> bool:
    """Whether a refusal has the shape of an admission policy's denial of the probe (pure).

    Decided from the Status (code, reason, details), never its message: a policy's denial
    names the resource (``trainjobs``) and the object, as RBAC's does, which the control
    patch, admitted, rules out; a webhook's or the CRD schema's 422 names the kind instead.
    """
    if (exc.status, exc.reason) not in POLICY_DENIALS:
        return False
    details = exc.body.get("details") or {}
    return (details.get("group") == names.TRAINER_GROUP and details.get("kind") == "trainjobs"
            and details.get("name") == probe_name)


def judge_a_writes(kueue: bool, probe: str, who: str, a_write: errors.KubeError | None,
                   control: errors.KubeError | None) -> CapabilityStatus:
    """What the two dry-run patches prove about who may write A (pure).

    ``a_write`` and ``control`` are the refusals of the patches (None: admitted).
    """
    a = names.ADMISSION_COUNT
    params = f"ConfigMap {names.CONTROLLER_NAMESPACE}/{a_binding(kueue)}"
    if control is not None:
        return _unknown(f"could not prove who may write A: a dry-run patch of another "
                        f"annotation of probe TrainJob {probe} was refused: {control}")
    if kueue:
        if a_write is None:
            return _no(f"{who} may set {a} on probe TrainJob {probe} (a dry-run patch was "
                       "admitted), so an execution's identity could be lowered: "
                       f"ValidatingAdmissionPolicy {A_POLICY} with binding {a_binding(True)} "
                       "is not in force. Apply deploy/admission (admission-count-policy.yaml), "
                       f"and list only the admission controller in {params}")
        if refused_by_policy(a_write, probe):
            return _yes(f"only the admission controller may raise A: a dry-run patch of {a} "
                        f"on probe TrainJob {probe} by {who} was refused ({a_write.status} "
                        f"{a_write.reason}) and one of another annotation admitted: "
                        f"ValidatingAdmissionPolicy {A_POLICY} is in force")
        return _unknown(f"could not prove who may write A: a dry-run patch of {a} on probe "
                        f"TrainJob {probe} was refused, but not as ValidatingAdmissionPolicy "
                        f"{A_POLICY} refuses (403 Forbidden or 422 Invalid, about the probe): "
                        f"{a_write}")
    if a_write is None:
        return _yes(f"plain mode: the library raises A itself, and {who} may: a dry-run patch "
                    f"of {a} on probe TrainJob {probe} was admitted. ValidatingAdmissionPolicy "
                    f"{A_POLICY} admits only the identities listed in {params}")
    how = (f" ({a_write.status} {a_write.reason}): add {who} to {params} (key writers) of "
           f"ValidatingAdmissionPolicy {A_POLICY}" if refused_by_policy(a_write, probe)
           else f": {a_write}")
    return _no(f"plain mode: the library raises A itself, but a dry-run patch of {a} on probe "
               f"TrainJob {probe} by {who} was refused{how}")


async def _who_am_i(kube: Kube) -> str:
    try:
        review = await kube.create(SELF_SUBJECT_REVIEW, {})
    except errors.KubeError:
        return "this identity"
    user = (review.get("status") or {}).get("userInfo") or {}
    return str(user.get("username") or "this identity")


async def _dry_run_patch(kube: Kube, namespace: str, name: str,
                         patch: Mapping[str, Any]) -> errors.KubeError | None:
    try:
        # A dry run persists nothing, so it needs no precondition.
        await kube.patch(TRAINJOB, name, dict(patch), namespace, dry_run=True)
    except errors.KubeError as exc:
        return exc
    return None


async def check_a_writes(kube: Kube, settings: Settings, probe_name: str) -> CapabilityStatus:
    """Who may write the probe's A: in Kueue mode only the controller, in plain mode we."""
    ns = settings.namespace
    who, a_write, control = await asyncio.gather(
        _who_am_i(kube), _dry_run_patch(kube, ns, probe_name, a_write_patch()),
        _dry_run_patch(kube, ns, probe_name, control_patch()))
    return judge_a_writes(settings.kueue is not None, probe_name, who, a_write, control)


# --- all together --------------------------------------------------------------------------------


def _hold_reason(settings: Settings) -> str:
    ns = settings.namespace
    if settings.kueue is not None:
        return (f"Workloads in {ns} may be deactivated (spec.active) and annotated; Kueue "
                "then evicts them and suspends the TrainJob")
    return f"TrainJobs in {ns} may be suspended and annotated"


async def run(kube: Kube, settings: Settings) -> Caps:
    """Every capability's status; see the module docstring."""
    try:
        problems = await check_versions(kube, settings.kueue is not None)
    except errors.KubeError as exc:
        return dict.fromkeys(ALL, _unknown(f"could not read the served API versions: {exc}",
                                           CapabilitySource.NOT_CHECKED))
    if problems:
        return dict.fromkeys(ALL, _no("; ".join(problems)))
    try:
        missing = await check_permissions(kube, settings)
    except errors.KubeError as exc:
        return dict.fromkeys(ALL, _unknown(f"could not review permissions: {exc}",
                                           CapabilitySource.NOT_CHECKED))
    caps: Caps = {
        Capability.HOLD: _yes(_hold_reason(settings)),
        Capability.ATTEMPT_INJECTION: _unknown("not probed", CapabilitySource.NOT_CHECKED),
        Capability.START_GATE: _unknown("not probed", CapabilitySource.NOT_CHECKED),
    }
    seconds = settings.timeouts.preflight_probe.total_seconds()

    async def readmission() -> None:
        if Capability.READMISSION_GATE in missing:
            return
        try:
            caps[Capability.READMISSION_GATE] = await check_readmission(kube, settings, seconds)
        except errors.KubeError as exc:
            caps[Capability.READMISSION_GATE] = _unknown(f"could not check: {exc}")

    async def start_gate() -> None:
        if Capability.START_GATE in missing:
            return
        try:
            await probe(kube, settings, caps,
                        try_injection=Capability.ATTEMPT_INJECTION not in missing)
        except errors.KubeError as exc:
            caps[Capability.START_GATE] = _unknown(f"the start-gate probe failed: {exc}")

    await asyncio.gather(readmission(), start_gate())
    for cap, perms in missing.items():
        caps[cap] = _no("missing permissions: " + ", ".join(perms))
    return {cap: caps.get(cap, _unknown("not checked", CapabilitySource.NOT_CHECKED))
            for cap in ALL}


def observe_only_reasons(caps: Mapping[Capability, CapabilityStatus]) -> list[str]:
    """One line per capability that is not yes."""
    return [f"{cap.value}: {st.value.value} ({st.reason})" for cap, st in caps.items()
            if not st.ok]


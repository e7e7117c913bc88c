"""The identity of every dispatch pod, and the last fence: the mutating webhook that judges
each dispatch pod at its creation and gives each container its execution identity.

Served by every replica, leader or not (admission must not wait for an election). For a pod
labelled ``dispatch.phpboyscout.uk/job-id`` it reads, live (A may have risen a moment ago),
the TrainJob named by the pod's ``jobset-name`` label and the job's pods, and admits the pod
only as part of the execution the gate approved (:func:`dispatch_kubeflow.core.execution.
judge_pod`: its JobSet is the approved one, its Workload's admission the approved one, and
no alive pod of another execution is left);
otherwise it refuses the pod with a message naming the job and what it waits for, and the
Job controller tries the create again later. An admitted pod gets A from the TrainJob, J from
its ``restart-attempt`` label, and ``DISPATCH_JOB_ID``, ``DISPATCH_SUBMISSION``,
``DISPATCH_ATTEMPT`` and ``DISPATCH_EPOCH`` on every container and init container, replacing
existing values. Anything it cannot read denies the pod (fail closed). A dry-run request
makes nothing, so it is not fenced: it gets the identity a pod would get, which is how the
adapter's preflight proves the injection (and a real pod of its never-admitted probe, which
must be refused, how it proves the fence).

The MutatingWebhookConfiguration (design.md) is written here too when the controller manages
it (``--webhook-url`` for a host process, ``--webhook-service`` in a cluster).
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from admission.fence import (
    Placement,
    carries_the_fence,
    claims_the_fence,
    fence_differs,
    fence_is_ours,
    sidecar_patch,
)
from admission.observability import Metrics, parse_listen
from admission.webhook_config import PATH
from dispatch_kubeflow.core import errors, names
from dispatch_kubeflow.core.execution import judge_pod
from dispatch_kubeflow.core.identity import ExecutionIdentity, IdentityError, parse_count
from dispatch_kubeflow.core.kueue import multikueue_remote
from dispatch_kubeflow.core.objects import annotations_of, labels_of, meta
from dispatch_kubeflow.core.scheduling_gate import gate_op, judge_start, lifts_gate
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import POD, TRAINJOB, WORKLOAD

log = logging.getLogger(__name__)


Obj = dict[str, Any]


class Denied(Exception):
    """The pod must not be created; the message tells its creator why."""


@dataclass(frozen=True, slots=True)
class WorkerSide:
    """The webhook of a MultiKueue worker cluster (docs/multikueue-fence.md): what it adds
    for the jobs a manager's MultiKueue put here (:func:`core.kueue.multikueue_remote`)."""

    cluster: str
    """This worker's MultiKueueCluster name in the manager."""
    holds_permit: Callable[[], bool]
    """Whether this replica holds the worker's permit now (admission.permit_renewal)."""
    placement: Placement
    """The fence each of their pods carries (admission.fence)."""


# --- pure ------------------------------------------------------------------------------------
def is_dispatch_pod(pod: Obj) -> bool:
    return bool(labels_of(pod).get(names.JOB_ID_LABEL))


def trainjob_name(pod: Obj) -> str:
    name = labels_of(pod).get(names.JOBSET_NAME_LABEL)
    if not name:
        raise Denied(f"dispatch pod without label {names.JOBSET_NAME_LABEL}: "
                     "cannot tell which TrainJob it belongs to")
    return str(name)


def identity_for(pod: Obj, trainjob: Obj) -> ExecutionIdentity:
    """The pod's identity from its labels and the TrainJob's A; Denied when unreadable."""
    labels = labels_of(pod)
    tj_meta = meta(trainjob)
    job_id = str(labels.get(names.JOB_ID_LABEL) or "")
    tj_job = labels_of(trainjob).get(names.JOB_ID_LABEL)
    if tj_job != job_id:
        raise Denied(f"pod's {names.JOB_ID_LABEL}={job_id!r} differs from TrainJob "
                     f"{tj_meta.get('name')}'s {tj_job!r}")
    try:
        for label in (names.SUBMISSION_LABEL, names.ATTEMPT_LABEL):
            if not labels.get(label):
                raise IdentityError(f"{label}: missing")
        return ExecutionIdentity(
            job_id=job_id,
            submission=parse_count(labels.get(names.SUBMISSION_LABEL), names.SUBMISSION_LABEL),
            attempt=parse_count(labels.get(names.ATTEMPT_LABEL), names.ATTEMPT_LABEL),
            admissions=parse_count(annotations_of(trainjob).get(names.ADMISSION_COUNT),
                                   names.ADMISSION_COUNT),
            restarts=parse_count(labels.get(names.RESTART_ATTEMPT_LABEL),
                                 names.RESTART_ATTEMPT_LABEL),
        )
    except IdentityError as exc:
        raise Denied(f"cannot build the execution identity: {exc}") from exc


def env_patch(pod: Obj, ident: ExecutionIdentity) -> list[Obj]:
    """JSONPatch ops setting the identity on every container and init container."""
    ours = ident.env()
    ops: list[Obj] = []
    spec = pod.get("spec") or {}
    for field in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(field) or []):
            env = [e for e in c.get("env") or [] if e.get("name") not in ours]
            env += [{"name": k, "value": v} for k, v in ours.items()]
            # "add" replaces an existing member (RFC 6902), so it works with or without env.
            ops.append({"op": "add", "path": f"/spec/{field}/{i}/env", "value": env})
    return ops


def review_response(uid: str, *, patch: list[Obj] | None = None,
                    denied: str | None = None) -> Obj:
    resp: Obj = {"uid": uid, "allowed": denied is None}
    if denied is not None:
        resp["status"] = {"code": 403, "reason": "Forbidden", "message": denied}
    elif patch:
        resp["patchType"] = "JSONPatch"
        resp["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp}


async def review(request: Obj, get_trainjob: Callable[[str, str], Awaitable[Obj | None]],
                 list_pods: Callable[[str, str], Awaitable[list[Obj]]],
                 list_workloads: Callable[[str, str], Awaitable[list[Obj]]],
                 worker: WorkerSide | None = None) -> Obj:
    """Answer one AdmissionReview request (the ``request`` member): a dispatch pod's creation,
    or an update that lifts dispatch's scheduling gate from one (the configuration's match
    condition sends no other update). ``list_pods(namespace, trainjob)`` lists the job's pods
    stored now; ``list_workloads(namespace, trainjob_uid)`` its Workloads, read only for a
    Kueue-mode job the gate approved.

    A pod of a MultiKueue remote (a TrainJob a manager put in this worker) needs ``worker``:
    its admission is the manager's, so the worker's own Workload proves nothing of it; it is
    created only while this replica holds the worker's permit, and carries the fence that
    stops it when its share of the permit runs out (its first share only once the manager
    confirms, live, that its identity is current: admission.permit_answers). Without
    ``worker`` such a pod is refused: nothing here could fence it."""
    uid = str(request.get("uid") or "")
    pod = request.get("object") or {}
    if not is_dispatch_pod(pod):
        return review_response(uid)
    lift = request.get("operation") == "UPDATE"
    if lift and not lifts_gate(request.get("oldObject"), pod):
        return review_response(uid)  # any other update: not ours to judge
    namespace = str(request.get("namespace") or (pod.get("metadata") or {}).get("namespace")
                    or "")
    dry_run = bool(request.get("dryRun"))
    try:
        if not lift and (pod.get("spec") or {}).get("nodeName"):
            raise Denied("a dispatch pod must be scheduled: spec.nodeName set at its creation "
                         f"would start it without dispatch's gate ({names.EXECUTION_GATE})")
        name = trainjob_name(pod)
        try:
            tj = await get_trainjob(namespace, name)
        except errors.KubeError as exc:
            raise Denied(f"cannot read TrainJob {namespace}/{name}: {exc}") from exc
        if tj is None:
            raise Denied(f"TrainJob {namespace}/{name} does not exist")
        ident = identity_for(pod, tj)
        remote = multikueue_remote(tj)
        if remote and not dry_run:
            _may_run_here(pod, namespace, name, worker, lift=lift)
        try:
            pods = await list_pods(namespace, name)
        except errors.KubeError as exc:
            raise Denied(f"cannot list the pods of TrainJob {namespace}/{name}: {exc}") from exc
        workloads: list[Obj] = []
        if not dry_run and not remote and labels_of(tj).get(names.QUEUE_NAME_LABEL) \
                and annotations_of(tj).get(names.ADMISSION_TOKEN):
            try:
                workloads = await list_workloads(namespace, str(meta(tj).get("uid") or ""))
            except errors.KubeError as exc:
                raise Denied(f"cannot list the Workloads of TrainJob {namespace}/{name}: "
                             f"{exc}") from exc
        if lift:
            verdict = judge_start(pod, tj, ident.admissions, pods, workloads=workloads)
            if not verdict.allowed:
                raise Denied(f"the pod may not start yet: {verdict.reason}")
            return review_response(uid)
        verdict = judge_pod(pod, tj, ident.admissions, pods, workloads=workloads,
                            dry_run=dry_run)
        if not verdict.allowed:
            raise Denied(verdict.reason)
        gate = gate_op(pod)
        # The fence last: it puts its container first of the init containers, which the
        # identity's ops address by their index before it.
        # Called again (another webhook changed the pod since), the fence is there already.
        fence = sidecar_patch(pod, worker.placement) if (
            remote and worker is not None and not fence_is_ours(pod, worker.placement)) else []
        return review_response(uid, patch=env_patch(pod, ident) + ([gate] if gate else [])
                               + fence)
    except Denied as exc:
        return review_response(uid, denied=f"dispatch-admission: {exc}")


def _may_run_here(pod: Obj, namespace: str, name: str, worker: WorkerSide | None, *,
                  lift: bool) -> None:
    """Denied unless a pod of the MultiKueue remote ``name`` may be made (or, ``lift``,
    start) now."""
    if worker is None:
        raise Denied(f"TrainJob {namespace}/{name} was put here by a manager's MultiKueue "
                     f"({names.MULTIKUEUE_ORIGIN_LABEL}), and this dispatch-admission does "
                     "not run as a MultiKueue worker: nothing here could fence its pods "
                     "(docs/multikueue-fence.md)")
    differs = fence_differs(pod, worker.placement) if claims_the_fence(pod) else ""
    if not lift and differs:
        raise Denied(f"the pod brings a container or volume named {names.FENCE_CONTAINER}, "
                     f"which only the worker's webhook may put in a pod (not its own: "
                     f"{differs})")
    if lift and not carries_the_fence(pod):
        raise Denied(f"the pod has no {names.FENCE_CONTAINER} (made before this worker's "
                     "webhook fenced MultiKueue jobs): it may not start")
    if not worker.holds_permit():
        raise Denied(f"worker {worker.cluster} holds no permit from the manager now (not "
                     "renewed in time, or revoked): no pod of a MultiKueue job may start "
                     "here until it does")


# --- server --------------------------------------------------------------------------------
class WebhookServer:
    def __init__(self, kube: KubeAPI, metrics: Metrics, worker: WorkerSide | None = None
                 ) -> None:
        self.kube = kube
        self.metrics = metrics
        self.worker = worker
        self._runner: web.AppRunner | None = None
        self.serving = False

    async def _get_trainjob(self, namespace: str, name: str) -> Obj | None:
        return await self.kube.get_or_none(TRAINJOB, name, namespace)

    async def _list_pods(self, namespace: str, trainjob: str) -> list[Obj]:
        # Live, like the TrainJob: the fence is only as good as this list is current.
        pods, _ = await self.kube.list(POD, namespace,
                                       label_selector=names.pods_of(trainjob))
        return pods

    async def _list_workloads(self, namespace: str, trainjob_uid: str) -> list[Obj]:
        # Live too: which admission the job runs under (core.admission_count).
        wls, _ = await self.kube.list(WORKLOAD, namespace,
                                      label_selector=f"{names.KUEUE_JOB_UID_LABEL}={trainjob_uid}")
        return wls

    async def _handle(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            req = body["request"]
        except (ValueError, KeyError, TypeError):
            self.metrics.webhook.labels("malformed").inc()
            return web.Response(status=400, text="expected an AdmissionReview v1\n")
        out = await review(req, self._get_trainjob, self._list_pods, self._list_workloads,
                           self.worker)
        resp = out["response"]
        outcome = "denied" if not resp["allowed"] else ("patched" if "patch" in resp
                                                        else "ignored")
        self.metrics.webhook.labels(outcome).inc()
        pod_meta = (req.get("object") or {}).get("metadata") or {}
        log_fn = log.warning if outcome == "denied" else log.debug
        log_fn("pod review %s", outcome, extra={
            "namespace": req.get("namespace"), "pod": pod_meta.get("name") or
            pod_meta.get("generateName"), "dry_run": bool(req.get("dryRun")),
            "reason": (resp.get("status") or {}).get("message", "")})
        return web.json_response(out)

    async def start(self, listen: str, tls: ssl.SSLContext) -> None:
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.add_routes([web.post(PATH, self._handle)])
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        host, port = parse_listen(listen)
        # reuse_port: replicas on one host (the local cluster) share the address the
        # configuration names, like endpoints behind a Service.
        await web.TCPSite(self._runner, host, port, ssl_context=tls, reuse_port=True).start()
        self.serving = True
        log.info("webhook serving on https://%s:%d%s", host, port, PATH)

    async def stop(self) -> None:
        self.serving = False
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

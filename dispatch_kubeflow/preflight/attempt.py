"""Proof 5, attempt injection: while the probe exists, a server-side dry-run creates a pod
labelled as a pod of the probe; the admission controller's webhook must have set
``DISPATCH_ATTEMPT=<probe job>.1.1.0.0`` and ``DISPATCH_EPOCH=1000000``, and gated it
with ``dispatch.phpboyscout.uk/execution`` (:mod:`dispatch_kubeflow.core.scheduling_gate`).
Then the webhook must refuse a real pod of the probe, which the gate never admitted (the
pod as the last fence, :mod:`dispatch_kubeflow.core.execution`): were it made, it could
never run (it asks for a node that does not exist), and the proof deletes it at once. Then
who may write A is proved (:mod:`dispatch_kubeflow.preflight.a_writes`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

from dispatch_kubeflow import errors
from dispatch_kubeflow.core import identity, names
from dispatch_kubeflow.core.scheduling_gate import gated
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import POD, SERVICE_ACCOUNT
from dispatch_kubeflow.model import CapabilityStatus, JobID
from dispatch_kubeflow.preflight.a_writes import check_a_writes
from dispatch_kubeflow.preflight.mode import Proofs
from dispatch_kubeflow.preflight.verdicts import no, yes
from dispatch_kubeflow.settings import Settings
from dispatch_kubeflow.waits import wait_for

PROBE_NODE_LABEL = f"{names.DOMAIN}/preflight-probe"
PROBE_IMAGE = "registry.k8s.io/pause:3.10"


def dry_run_pod(job: JobID, probe_name: str) -> dict[str, Any]:
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
    if not gated(pod):
        return ("dispatch-admission's webhook gave a dry-run pod of the probe its identity but "
                f"not its scheduling gate {names.EXECUTION_GATE}, which holds every dispatch "
                "pod until the controller has judged it stored: the controller is older than "
                "this library; upgrade it")
    return None


SERVICE_ACCOUNT_WAIT = 15.0
"""How long the probe waits for a new namespace's ``default`` ServiceAccount."""


async def _default_service_account(kube: KubeAPI, namespace: str) -> bool:
    """Whether the namespace has its ``default`` ServiceAccount, waiting briefly for it: the
    API server refuses every pod, dry-run ones too, until the controller-manager has made it,
    which in a namespace made a moment ago it may not have yet."""
    try:
        async with asyncio.timeout(SERVICE_ACCOUNT_WAIT):
            await wait_for(kube, SERVICE_ACCOUNT, namespace,
                           lambda objs: True if "default" in objs else None,
                           field_selector="metadata.name=default")
    except TimeoutError:
        return False
    except errors.KubeForbidden:
        return True  # not ours to read: the dry-run pod below will say what is wrong
    return True


async def refuses_unadmitted(kube: KubeAPI, settings: Settings, job: JobID,
                             probe_name: str) -> str | None:
    """Why the webhook is not the last fence (None: it refused a real pod of the probe)."""
    try:
        made = await kube.create(POD, dry_run_pod(job, probe_name), settings.namespace)
    except errors.KubeWebhookDenied as exc:
        if exc.webhook == names.WEBHOOK_NAME:
            return None
        return (f"a pod of probe TrainJob {probe_name} was refused, but not by "
                f"{names.WEBHOOK_NAME}: {exc}")
    except errors.KubeError as exc:
        return f"a pod of probe TrainJob {probe_name} could not be tried: {exc}"
    name = str((made.get("metadata") or {}).get("name") or "")
    with contextlib.suppress(errors.KubeNotFound):
        await kube.delete(POD, name, settings.namespace)
    return (f"dispatch-admission's webhook let pod {name} of probe TrainJob {probe_name} be "
            "made although the gate never admitted it (deleted again): the controller is "
            "older than the pod fence of this library; upgrade it")


async def attempt_injection(kube: KubeAPI, settings: Settings, proofs: Proofs, job: JobID,
                            probe_name: str) -> CapabilityStatus:
    """The admission webhook injects the identity into a pod of the probe, and nobody but
    who should may raise A (:mod:`.a_writes`)."""
    if not await _default_service_account(kube, settings.namespace):
        return no(f"namespace {settings.namespace} has no ServiceAccount 'default' after "
                   f"{SERVICE_ACCOUNT_WAIT:g}s, so no pod can be made there (is the "
                   "controller-manager's serviceaccount controller running?)")
    try:
        pod = await kube.create(POD, dry_run_pod(job, probe_name), settings.namespace,
                                dry_run=True)
    except errors.KubeError as exc:
        return no(f"a dry-run pod of probe TrainJob {probe_name} was refused: {exc}")
    problem = check_injected(pod, job)
    if problem:
        return no(problem)
    injected = (f"the admission webhook set {names.ENV_ATTEMPT}={job}.1.1.0.0 and "
                f"{names.ENV_EPOCH}=1000000 on a dry-run pod of probe TrainJob {probe_name}")
    fenced = await refuses_unadmitted(kube, settings, job, probe_name)
    if fenced is not None:
        return no(fenced)
    writes = await check_a_writes(kube, settings.namespace, probe_name, proofs)
    if not writes.ok:
        return writes
    # The first line stays the one the seed's tutorial prints.
    return yes("\n".join((injected, writes.reason,
                          "a pod of the probe, never admitted, was refused by the webhook, "
                          f"and one it admits waits behind {names.EXECUTION_GATE} until "
                          "dispatch-admission starts it")))

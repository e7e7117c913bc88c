"""Proof 4, the start gate: a probe TrainJob ``dj-probe-<random id>`` is created closed
(Kueue: gated and suspended; plain: suspended) and unschedulable (a runtime patch gives its
pods a node selector no node has), and watched for ``timeouts.preflightProbe``: nothing of
it may get out of the gate (:mod:`.probe_watch` says what each mode watches). Attempt
injection is proved while it exists (:mod:`.attempt`). It is deleted afterwards, whatever
happened.

A watch that fails proves nothing: its error ends the probe (a KubeError makes the start
gate unknown, naming it), so a dead watch can never pass for a quiet one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.objects import meta
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import CLUSTER_TRAINING_RUNTIME, TRAINING_RUNTIME, TRAINJOB
from dispatch_kubeflow.model import Capability, CapabilitySource, JobID
from dispatch_kubeflow.preflight.attempt import PROBE_NODE_LABEL, attempt_injection
from dispatch_kubeflow.preflight.mode import Proofs
from dispatch_kubeflow.preflight.probe_watch import ProbeWatch, watch_pods
from dispatch_kubeflow.preflight.verdicts import Caps, unknown
from dispatch_kubeflow.settings import Settings

PROBE_PREFIX = "dj-probe-"
PROBE_MANAGER = f"{names.DOMAIN}/preflight"


def probe_body(settings: Settings, proofs: Proofs, runtime: Mapping[str, Any],
               job: JobID) -> dict[str, Any]:
    """The closed, unschedulable probe TrainJob (pure)."""
    name = PROBE_PREFIX + job.lower()
    labels = {names.JOB_ID_LABEL: str(job), names.SUBMISSION_LABEL: "1",
              names.ATTEMPT_LABEL: "1", names.MANAGED_BY_LABEL: names.MANAGED_BY,
              **proofs.trainjob_labels}
    rjs = [rj.get("name") for rj in (((runtime.get("spec") or {}).get("template") or {})
                                     .get("spec") or {}).get("replicatedJobs") or []
           if rj.get("name")]
    patch = {"manager": PROBE_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": rj, "template": {"spec": {"template": {"spec": {
            "nodeSelector": {PROBE_NODE_LABEL: "unschedulable"}}}}}} for rj in rjs]}}}}
    return {
        "metadata": {"name": name, "namespace": settings.namespace, "labels": labels,
                     "annotations": dict(proofs.closed_annotations)},
        "spec": {
            "runtimeRef": {"apiGroup": names.TRAINER_GROUP, "kind": settings.probe_runtime.kind,
                           "name": settings.probe_runtime.name},
            "trainer": {"numNodes": 1},
            "runtimePatches": [patch] if rjs else [],
            "suspend": True,
        },
    }


async def probe(kube: KubeAPI, settings: Settings, proofs: Proofs, caps: Caps, *,
                try_injection: bool) -> None:
    """Prove the start gate (and attempt injection while the probe exists) into ``caps``."""
    pr = settings.probe_runtime
    ns = settings.namespace
    if pr.kind == "ClusterTrainingRuntime":
        runtime = await kube.get_or_none(CLUSTER_TRAINING_RUNTIME, pr.name)
    else:
        runtime = await kube.get_or_none(TRAINING_RUNTIME, pr.name, ns)
    if runtime is None:
        caps[Capability.START_GATE] = unknown(f"probeRuntime {pr.kind} {pr.name} not found, "
                                              "so the start gate could not be probed")
        caps[Capability.ATTEMPT_INJECTION] = unknown(
            "not probed: it needs the start-gate probe TrainJob", CapabilitySource.NOT_CHECKED)
        return
    job = JobID.new()
    body = probe_body(settings, proofs, runtime, job)
    name = body["metadata"]["name"]
    created = await kube.create(TRAINJOB, body, ns, field_manager=names.ADAPTER_FIELD_MANAGER)
    seconds = settings.timeouts.preflight_probe.total_seconds()
    try:
        seen = ProbeWatch(end_at_proof=settings.probe_watch == "proof")
        # Not a TaskGroup's: a watch that fails must not cancel the attempt-injection proof
        # running beside it (a group would, and that capability would go unchecked). The
        # tasks are owned here all the same: cancelled and awaited by end_watches below,
        # whatever happens, and the first error they ended with is raised.
        tasks = [asyncio.ensure_future(watch_pods(kube, ns, name, seen)),
                 asyncio.ensure_future(proofs.watch_probe(kube, ns, created, seen))]
        # A watch that fails ends the wait at once: it has nothing more to say. With
        # probeWatch "proof", so does a positive proof, or a watch that saw a breach.
        waiters: list[asyncio.Future[Any]] = list(tasks)
        if settings.probe_watch == "proof":
            waiters.append(asyncio.ensure_future(seen.proven.wait()))
        try:
            if try_injection:
                caps[Capability.ATTEMPT_INJECTION] = await attempt_injection(
                    kube, settings, proofs, job, name)
            await asyncio.wait(waiters, timeout=seconds,
                               return_when=asyncio.FIRST_EXCEPTION
                               if settings.probe_watch == "window" else asyncio.FIRST_COMPLETED)
        finally:
            failure = await end_watches(waiters)
        if failure is not None:
            raise failure
        caps[Capability.START_GATE] = proofs.judge_probe(name, seen, seconds)
    finally:
        with contextlib.suppress(errors.KubeError):
            await kube.delete(TRAINJOB, name, ns, uid=str(meta(created)["uid"]))


async def end_watches(tasks: Sequence[asyncio.Future[None]]) -> BaseException | None:
    """Cancel the probe's watches and wait for them; the first error any of them ended with
    (None: each was still watching, or ended by seeing what it watched for)."""
    for t in tasks:
        t.cancel()
    ended = await asyncio.gather(*tasks, return_exceptions=True)
    return next((e for e in ended if isinstance(e, BaseException)
                 and not isinstance(e, asyncio.CancelledError)), None)

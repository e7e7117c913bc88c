"""StopJob: nothing of the job is left behind."""

from __future__ import annotations

from dispatch_kubeflow.conformance.failed import CheckFailed
from dispatch_kubeflow.conformance.registry import check
from dispatch_kubeflow.conformance.suite import Suite
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.objects import meta
from dispatch_kubeflow.kube import resources as r
from dispatch_kubeflow.model import JobID


@check("stop", "StopJob leaves nothing of the job behind")
async def stop(suite: Suite) -> str:
    """StopJob reports nothing alive or unproven, Find finds nothing, and no object is left."""
    backend, job, ref = suite.need_job()
    report = await backend.stop_job(job, "the conformance suite is over")
    suite.stopped = True
    if report.alive or report.unproven:
        raise CheckFailed(f"StopJob left alive {[o.id for o in report.alive]}, unproven "
                          f"{[o.id for o in report.unproven]}")
    found = await backend.find(job)
    if found:
        raise CheckFailed(f"Find still finds {[str(o) for o in found]}")
    left = await objects_of(suite, job)
    if left:
        raise CheckFailed(f"still there: {left}")
    return (f"stopped {len(report.stopped)} objects of {ref.id}; no TrainJob, runtime "
            "copy, Workload, JobSet, Job or pod of the job is left")


async def objects_of(suite: Suite, job: JobID) -> list[str]:
    """Every object of the job in the suite's namespace, by name or by its job-id label."""
    out = []
    for res in (r.TRAINJOB, r.TRAINING_RUNTIME, r.WORKLOAD, r.JOBSET, r.JOB, r.POD):
        items, _ = await suite.kube.list(res, suite.ns)
        out += [f"{res.kind}/{meta(i).get('name')}" for i in items
                if job.lower() in str(meta(i).get("name"))
                or (meta(i).get("labels") or {}).get(names.JOB_ID_LABEL) == str(job)]
    return out

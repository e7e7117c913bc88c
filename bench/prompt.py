"""StopJob of a job whose objects go promptly: jobs one after another, each stopped alone
once it has ended, through the library and as the bare script."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from bare import bare_job
from phases import floor_side
from queues import DONE, SPEC, WAIT_LIMIT, drop_queue, make_queue, now, settings

from dispatch_kubeflow import Backend, JobID, StartRequest
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube


@dataclass
class Prompt:
    k: int
    requests: dict[str, list[int]] = field(default_factory=dict)
    seconds: dict[str, list[float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


async def prompt_stops(kubeconfig: str, admin: Kube, k: int, quota: int, tag: str) -> Prompt:
    """StopJob of a job whose objects go promptly: ``k`` jobs one after another, each
    stopped on its own once it has ended (so the garbage collector is not behind), through
    the library and as :func:`bare_job` (its :func:`bare_stop`)."""
    out = Prompt(k, {"dispatch": [], "floor": []}, {"dispatch": [], "floor": []})
    ns = f"bench-{tag}-p"
    await make_queue(admin, ns, names.ADMISSION_CHECK, quota)
    kube = await Kube.connect(kubeconfig=kubeconfig, request_timeout=30)
    try:
        backend = await Backend.connect(settings(kubeconfig, ns), kube=kube)
        for _ in range(k):
            job = JobID.new()
            ref = await backend.start(StartRequest(job, 1, 1, SPEC))
            await backend.open(ref)
            await backend.wait(ref, *DONE, deadline=datetime.now(UTC) + WAIT_LIMIT)
            before, began = kube.requests, now()
            report = await backend.stop_job(job, "bench")
            out.seconds["dispatch"].append(now() - began)
            out.requests["dispatch"].append(kube.requests - before)
            if report.alive or report.unproven:
                out.notes.append(f"stop: alive {report.alive} unproven {report.unproven}")
        await backend.close()
    finally:
        await kube.close()
        await drop_queue(admin, ns)
    ns = f"bench-{tag}-q"
    async with floor_side(kubeconfig, admin, ns, quota):
        kube = await Kube.connect(kubeconfig=kubeconfig, request_timeout=30)
        try:
            for i in range(k):
                counts, secs, _ = await bare_job(kube, ns, i)
                out.requests["floor"].append(counts["stop"])
                out.seconds["floor"].append(secs)
        finally:
            await kube.close()
    return out

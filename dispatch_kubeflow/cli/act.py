"""The commands that act: preflight, hold, release, open, stop (see :mod:`.app`)."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta

import click

import dispatch_kubeflow as dk
from dispatch_kubeflow.cli import config, render
from dispatch_kubeflow.cli.app import (
    EXIT_INCOMPLETE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    PROG,
    command,
    err,
    opened,
    out,
    submission_of,
    submission_ref,
)
from dispatch_kubeflow.cli.params import (
    JOB,
    ActorType,
    DurationType,
    RefType,
    WhenType,
    default_actor,
)
from dispatch_kubeflow.cli.progress import progress
from dispatch_kubeflow.settings import STOP_JOB_MAX


@command("preflight")
async def preflight(target: config.Target) -> int:
    """Prove what the cluster can do; exit 3 when the backend would be observe-only."""
    async with opened(target, preflight=True, what="preflight") as backend:
        caps = await backend.capabilities()
        out(render.capability_table(caps))
        if backend.observe_only:
            err("observe-only: " + "; ".join(backend.observe_only_reasons))
            return EXIT_INCOMPLETE
    return EXIT_OK


def _hold_meta(instance: int, by: dk.Actor, timeout: timedelta, *,
               until: datetime | None = None, reason: str = "") -> dk.HoldMeta:
    return dk.HoldMeta(instance, by, dk.CallMeta(datetime.now(UTC) + timeout), until=until,
                       reason=reason)


_BY = click.option("--by", type=ActorType(), default=default_actor, show_default="human:$USER",
                   help="Who asks (recorded as the hold's who).")
_TIMEOUT = click.option("--timeout", type=DurationType(), default="60s", show_default=True,
                        help="The call's deadline.")
_SUBMISSION = click.option("--submission", type=click.IntRange(min=1),
                           help="Which submission (default: the newest).")


@command("hold")
@click.argument("job", type=JOB)
@click.option("--instance", type=click.IntRange(min=1),
              help="The hold's instance, which a release names (default: one above the "
                   "job's current hold's, so 1 when it has none; printed).")
@click.option("--until", type=WhenType(), help="When the hold ends by itself: an RFC 3339 "
              "time or a duration from now (30m).")
@click.option("--reason", required=True, help="Why (recorded with the hold).")
@_BY
@_TIMEOUT
@_SUBMISSION
async def hold(target: config.Target, job: dk.JobID, instance: int | None,
               until: datetime | None, reason: str, by: dk.Actor, timeout: timedelta,
               submission: int | None) -> int:
    """Hold a job: end its execution and keep it from being admitted until released."""
    async with opened(target, job=job) as backend:
        listed = await submission_of(backend, job, submission)
        ref = listed.ref
        # The next instance: a held job's is taken (holding it with another is refused,
        # naming the one to release); a released one's may be used again.
        instance = instance or listed.observation.hold_instance + 1
        async with progress(f"holding {ref.name}"):
            await backend.hold(ref, _hold_meta(instance, by, timeout, until=until,
                                               reason=reason))
    out(f"held: TrainJob {ref.id}, instance {instance}"
        + (f", until {render.when(until)}" if until else ""))
    return EXIT_OK


@command("release")
@click.argument("job", type=JOB)
@click.option("--instance", type=click.IntRange(min=1), required=True,
              help="The instance of the hold to release.")
@_BY
@_TIMEOUT
@_SUBMISSION
async def release(target: config.Target, job: dk.JobID, instance: int, by: dk.Actor,
                  timeout: timedelta, submission: int | None) -> int:
    """Release a job's hold (needs the preflight: Release refuses when observe-only)."""
    async with opened(target, preflight=True, what="release", job=job) as backend:
        ref = await submission_ref(backend, job, submission)
        async with progress(f"releasing {ref.name}"):
            outcome = await backend.release(ref, _hold_meta(instance, by, timeout))
    if outcome is dk.ReleaseOutcome.NOT_HELD:
        out(f"not held: TrainJob {ref.id} has no hold; nothing changed")
    else:
        out(f"released: TrainJob {ref.id}, instance {instance}")
    return EXIT_OK


@command("open")
@click.argument("ref", type=RefType())
async def open_(target: config.Target, ref: dk.JobID | dk.ObjectRef) -> int:
    """Open a started job's gate: REF is <namespace>/<TrainJob> (as Start returned) or a job
    id (its newest submission)."""
    loaded = config.resolve(target)
    config.require_file(loaded, "probeRuntime", f"'{PROG} open' runs the preflight, whose "
                        "probe")
    namespace = loaded.settings.namespace
    if isinstance(ref, dk.ObjectRef) and ref.namespace != namespace:
        # Refused before the preflight, which would write its probe to the namespace.
        raise dk.SpecError(f"ref: {ref.id} is not in this backend's namespace "
                           f"{namespace}; pass -n {ref.namespace}", field="ref")
    async with opened(target, preflight=True, what="open", loaded=loaded) as backend:
        object_ref = ref if isinstance(ref, dk.ObjectRef) else \
            await submission_ref(backend, ref, None)
        async with progress(f"opening {object_ref.name}"):
            await backend.open(object_ref)
    out(f"opened: TrainJob {object_ref.id}")
    return EXIT_OK


@command("stop")
@click.argument("job", type=JOB)
@click.option("--reason", required=True, help="Why (recorded as an Event on the TrainJob).")
@click.option("--timeout", type=DurationType(at_most=STOP_JOB_MAX), metavar="DURATION",
              help="How long the stop may take in all (default: the settings' "
                   "timeouts.stopJob, 3m); past it, what is left is reported and it exits 3.")
async def stop(target: config.Target, job: dk.JobID, reason: str,
               timeout: timedelta | None) -> int:
    """Delete everything of a job and prove it is gone; exit 3 if anything is left."""
    limits = {"stop_job": timeout} if timeout else None
    async with opened(target, timeouts=limits) as backend:
        found = await backend.find(job)
        if not found:
            out(f"nothing of job {job} exists in namespace {backend.settings.namespace}")
            return EXIT_OK
        err(f"stopping job {job}: {len(found)} objects")
        try:
            async with progress(f"stopping job {job}"):
                report = await backend.stop_job(job, reason)
        except asyncio.CancelledError:
            await interrupted_stop(backend, job, found)
            return EXIT_INTERRUPTED
    for line in render.report_lines(report):
        out(line)
    if report.complete:
        out(f"stopped: job {job}, {len(report.stopped)} objects gone")
        return EXIT_OK
    err(f"incomplete: {len(report.alive)} alive, {len(report.unproven)} unproven; run the "
        "stop again, or look with 'kubectl dispatch describe'")
    return EXIT_INCOMPLETE


async def interrupted_stop(backend: dk.Backend, job: dk.JobID,
                           found: tuple[dk.ObjectRef, ...]) -> None:
    """Say what the interrupted stop had deleted: what was found first and is gone now."""
    left: set[tuple[str, str]] | None = None
    with contextlib.suppress(Exception):
        async with asyncio.timeout(10):
            left = {(r.kind, r.name) for r in await backend.find(job)}
    if left is None:
        err(f"interrupted: the stop of job {job} was cut short, and what is left could not "
            "be read; run the stop again")
        return
    gone = [r for r in found if (r.kind, r.name) not in left]
    there = [r for r in found if (r.kind, r.name) in left]
    err(f"interrupted: the stop of job {job} was cut short; {len(gone)} of {len(found)} "
        f"objects deleted so far, {len(there)} still there; run the stop again to finish")
    for r in gone:
        out(f"deleted  {r.kind}/{r.name}")
    for r in there:
        out(f"left     {r.kind}/{r.name}")

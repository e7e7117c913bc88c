"""The commands of ``kubectl dispatch``, each a thin layer over :class:`dispatch_kubeflow.Backend`.

Exit codes: 0 done; 1 an error (one line on stderr naming what is wrong and how to fix
it); 2 a bad command line (likewise one line); 3 done, but not everything is proven
(``preflight`` found the backend observe-only, ``stop`` left something alive or
unproven); 130 interrupted. Nothing is written to the cluster before the command line,
the job id and the settings file have been checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any

import click

import dispatch_kubeflow as dk
from dispatch_kubeflow.cli import config, render
from dispatch_kubeflow.cli.params import JOB, ActorType, DurationType, WhenType, default_actor
from dispatch_kubeflow.cli.progress import progress

PROG = "kubectl dispatch"  # how kubectl users call it (the script is kubectl-dispatch)
EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_INCOMPLETE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
Command = Callable[..., Coroutine[Any, Any, int]]

# --- the group and its shared options ----------------------------------------------------------

_TARGET_OPTIONS = (
    click.option("--settings", "settings_file", metavar="FILE",
                 help="The library's JSON settings section (default: "
                      f"${config.ENV}, else ~/.config/dispatch-kubeflow/settings.json)."),
    click.option("--kubeconfig", metavar="FILE",
                 help="Overrides cluster.kubeconfig of the settings."),
    click.option("--context", metavar="NAME", help="Overrides cluster.context of the settings."),
    click.option("-n", "--namespace", metavar="NS", help="Overrides namespace of the settings."),
)


def target_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(_TARGET_OPTIONS):
        fn = option(fn)
    return fn


@click.group(name="dispatch", no_args_is_help=True,
             context_settings={"help_option_names": ["-h", "--help"]})
@target_options
def cli(settings_file: str | None, kubeconfig: str | None, context: str | None,
        namespace: str | None) -> None:
    """Operate dispatch jobs: list, describe, hold, release, open, stop, logs, events.

    Reads the same JSON settings section as the library. Installed as kubectl-dispatch,
    so kubectl finds it: `kubectl dispatch get`.
    """


def command(name: str) -> Callable[[Command], click.Command]:
    """A subcommand from an async function ``fn(target, **options) -> exit code``.

    The shared options may come before the subcommand or after it (kubectl users write
    them after: ``kubectl dispatch get -n ns``); the latter win.
    """
    def deco(fn: Command) -> click.Command:
        def run(settings_file: str | None, kubeconfig: str | None, context: str | None,
                namespace: str | None, **options: Any) -> int:
            root = click.get_current_context().find_root().params
            target = config.Target(settings_file or root.get("settings_file"),
                                   kubeconfig or root.get("kubeconfig"),
                                   context or root.get("context"),
                                   namespace or root.get("namespace"))
            return asyncio.run(fn(target, **options))

        functools.update_wrapper(run, fn)  # its docstring and options become the command's
        return cli.command(name)(target_options(run))
    return deco


@contextlib.asynccontextmanager
async def opened(target: config.Target, *, preflight: bool = False,
                 settings: dk.Settings | None = None) -> AsyncIterator[dk.Backend]:
    """A backend for ``target``; without ``preflight`` it is observe-only (and quick)."""
    settings = settings or config.load(target)
    async with progress("running the preflight" if preflight else "connecting"):
        backend = await dk.Backend.connect(settings, preflight=preflight)
    try:
        yield backend
    finally:
        await backend.close()


def out(line: str = "") -> None:
    click.echo(line)


def err(line: str) -> None:
    click.echo(line, err=True)


async def submissions(backend: dk.Backend, job: dk.JobID) -> list[dk.JobInfo]:
    async with progress(f"listing job {job}"):
        listed = [j for j in await backend.jobs() if j.job == job]
    if not listed:
        raise dk.NotFound(f"job {job}: no TrainJob of it in namespace "
                          f"{backend.settings.namespace}; 'kubectl dispatch get' lists the jobs")
    return listed


async def submission_ref(backend: dk.Backend, job: dk.JobID, submission: int | None
                         ) -> dk.ObjectRef:
    """The TrainJob of ``submission`` of ``job`` (default: its newest)."""
    listed = await submissions(backend, job)
    if submission is None:
        return listed[-1].ref
    for j in listed:
        if j.submission == submission:
            return j.ref
    have = ", ".join(str(j.submission) for j in listed)
    raise dk.NotFound(f"--submission: job {job} has no submission {submission} (it has {have})")


# --- commands ----------------------------------------------------------------------------------


@command("preflight")
async def preflight(target: config.Target) -> int:
    """Prove what the cluster can do; exit 3 when the backend would be observe-only."""
    async with opened(target, preflight=True) as backend:
        caps = await backend.capabilities()
        out(render.capability_table(caps))
        if backend.observe_only:
            err("observe-only: " + "; ".join(backend.observe_only_reasons))
            return EXIT_INCOMPLETE
    return EXIT_OK


@command("get")
@click.option("-o", "--output", "fmt", type=click.Choice(["table", "json", "yaml"]),
              default="table", show_default=True, help="How to print the jobs.")
@click.option("-w", "--watch", is_flag=True, help="After the list, print each job that changes.")
async def get(target: config.Target, fmt: str, watch: bool) -> int:
    """List the dispatch jobs of the namespace (each submission, with its state)."""
    async with opened(target) as backend:
        async with progress("listing jobs"):
            listed = await backend.jobs()  # also proves the cluster answers before a watch
        if not watch:
            if fmt == "table":
                out(render.job_table(listed))
            else:
                out(render.dump({"items": [render.job_data(j) for j in listed]}, fmt))
            return EXIT_OK
        with contextlib.suppress(asyncio.CancelledError):  # Ctrl-C is how a watch ends
            await watch_table(backend, fmt)
    return EXIT_OK


async def watch_table(backend: dk.Backend, fmt: str) -> None:
    """Print every job once, then each job again whenever its row changes, and ``gone``
    when its TrainJob disappears (kubectl's ``get -w``)."""
    last: dict[tuple[str, int], tuple[dk.JobInfo, list[str]]] = {}

    def show(j: dk.JobInfo) -> None:
        if fmt == "table":
            out(render.row(render.job_cells(j)))
        elif fmt == "json":
            out(render.dump(render.job_data(j), "json").replace("\n", "").replace("  ", ""))
        else:
            out("---\n" + render.dump(render.job_data(j), "yaml"))

    if fmt == "table":
        out(render.header())
    async for listed in backend.watch_jobs():
        seen = set()
        for j in listed:
            key = (str(j.job), j.submission)
            seen.add(key)
            cells = render.job_cells(j)
            cells[9] = ""  # the age alone changing is no change
            if key not in last or last[key][1] != cells:
                show(j)
            last[key] = (j, cells)
        for key in [k for k in last if k not in seen]:
            j, _ = last.pop(key)
            show(dataclasses.replace(j, observation=dk.Observation(
                dk.ObjectState.GONE, dk.Cause("TrainJob deleted", "NotFound"))))


@command("describe")
@click.argument("job", type=JOB)
async def describe(target: config.Target, job: dk.JobID) -> int:
    """Show a job: its submissions, current execution, hold, cause, objects and events."""
    async with opened(target) as backend:
        listed = await submissions(backend, job)
        objects = await backend.find(job)
        events = [e async for e in backend.events(job)]
    out(f"Job:         {job}")
    out(f"Namespace:   {backend.settings.namespace}")
    for j in listed:
        o = j.observation
        out(f"Submission {j.submission}:")
        out(f"  TrainJob:  {j.ref.name}")
        out(f"  Attempt:   {j.attempt}")
        out(f"  State:     {o.state.value}")
        out(f"  Cause:     {render.cause(o) or '-'}")
        out(f"  Pods:      {o.pods_running} running of {o.pods}")
        out(f"  Execution: {render.identity(j)}")
        hold = (f"instance {o.hold_instance}, until {render.when(o.hold_until) or 'released'}"
                if o.hold_instance else "none")
        out(f"  Hold:      {hold}")
    out("Objects:")
    for ref in objects:
        out(f"  {ref.kind:<16} {ref.name}")
    recent = events[-10:]
    out(f"Events (last {len(recent)} of {len(events)}):")
    if recent:
        out("  " + render.header(render.EVENT_COLUMNS))
        for e in recent:
            out("  " + render.event_row(e))
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
@click.option("--instance", type=click.IntRange(min=1), required=True,
              help="The hold's instance (a release must name it).")
@click.option("--until", type=WhenType(), help="When the hold ends by itself: an RFC 3339 "
              "time or a duration from now (30m).")
@click.option("--reason", required=True, help="Why (recorded with the hold).")
@_BY
@_TIMEOUT
@_SUBMISSION
async def hold(target: config.Target, job: dk.JobID, instance: int, until: datetime | None,
               reason: str, by: dk.Actor, timeout: timedelta, submission: int | None) -> int:
    """Hold a job: end its execution and keep it from being admitted until released."""
    async with opened(target) as backend:
        ref = await submission_ref(backend, job, submission)
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
    async with opened(target, preflight=True) as backend:
        ref = await submission_ref(backend, job, submission)
        async with progress(f"releasing {ref.name}"):
            outcome = await backend.release(ref, _hold_meta(instance, by, timeout))
    if outcome is dk.ReleaseOutcome.NOT_HELD:
        out(f"not held: TrainJob {ref.id} has no hold; nothing changed")
    else:
        out(f"released: TrainJob {ref.id}, instance {instance}")
    return EXIT_OK


@command("open")
@click.argument("ref")
async def open_(target: config.Target, ref: str) -> int:
    """Open a started job's gate: REF is <namespace>/<TrainJob> (as Start returned) or a job
    id (its newest submission)."""
    job = None if "/" in ref else JOB.convert(ref, None, None)
    object_ref = None if job is not None else dk.ObjectRef.parse(ref)
    settings = config.load(target)
    if object_ref is not None and object_ref.namespace != settings.namespace:
        # Refused before the preflight, which would write its probe to the namespace.
        raise dk.SpecError(f"ref: {ref} is not in this backend's namespace "
                           f"{settings.namespace}; pass -n {object_ref.namespace}", field="ref")
    async with opened(target, preflight=True, settings=settings) as backend:
        if job is not None:
            object_ref = await submission_ref(backend, job, None)
        assert object_ref is not None
        async with progress(f"opening {object_ref.name}"):
            await backend.open(object_ref)
    out(f"opened: TrainJob {object_ref.id}")
    return EXIT_OK


@command("stop")
@click.argument("job", type=JOB)
@click.option("--reason", required=True, help="Why (recorded as an Event on the TrainJob).")
async def stop(target: config.Target, job: dk.JobID, reason: str) -> int:
    """Delete everything of a job and prove it is gone; exit 3 if anything is left."""
    async with opened(target) as backend:
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


@command("logs")
@click.argument("job", type=JOB)
@click.option("--rank", type=click.IntRange(min=0), default=0, show_default=True,
              help="Which node's log.")
@click.option("-f", "--follow", is_flag=True, help="Keep reading until the container ends.")
@click.option("--stderr", is_flag=True, help="Read stderr instead of stdout.")
@_SUBMISSION
async def logs(target: config.Target, job: dk.JobID, rank: int, follow: bool, stderr: bool,
               submission: int | None) -> int:
    """Print rank N's log of the job's current execution."""
    stream = dk.OutputStream.STDERR if stderr else dk.OutputStream.STDOUT
    async with opened(target) as backend:
        log = await backend.output(job, rank, stream, follow, submission=submission)
        async with log:
            if not log.split:
                err(f"note: the API server cannot split the streams; this is pod {log.pod}'s "
                    "combined log")
            try:
                async for chunk in log:
                    sys.stdout.buffer.write(chunk)
                    sys.stdout.buffer.flush()
            except asyncio.CancelledError:
                pass  # Ctrl-C ends a followed log
    return EXIT_OK


@command("events")
@click.argument("job", type=JOB)
@click.option("-w", "--watch", is_flag=True, help="After the list, print each new Event.")
async def events(target: config.Target, job: dk.JobID, watch: bool) -> int:
    """Print the Kubernetes Events of a job's objects, oldest first."""
    async with opened(target) as backend:
        if watch:
            await backend.jobs()  # fail at once, not retry forever, when unreachable
        out(render.header(render.EVENT_COLUMNS))
        try:
            async for e in backend.events(job, follow=watch):
                out(render.event_row(e))
        except asyncio.CancelledError:
            pass  # Ctrl-C is how a watch ends
    return EXIT_OK

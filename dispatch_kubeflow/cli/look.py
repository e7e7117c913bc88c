"""The commands that only look: get, describe, logs, events (see :mod:`.app`)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sys
from datetime import timedelta

import click

import dispatch_kubeflow as dk
from dispatch_kubeflow import output
from dispatch_kubeflow.cli import config, render
from dispatch_kubeflow.cli.app import (
    EXIT_OK,
    command,
    connected,
    moded,
    opened,
    out,
    submissions,
)
from dispatch_kubeflow.cli.params import JOB, DurationType
from dispatch_kubeflow.cli.progress import progress
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube.resources import TRAINJOB

FORMATS = ["table", "wide", "name", "json", "yaml"]


@command("get")
@click.argument("job", type=JOB, required=False)
@click.option("-o", "--output", "fmt", type=click.Choice(FORMATS), default="table",
              help="wide: more columns; name: trainjob.trainer.kubeflow.org/<name>; json, "
                   "yaml: as data (default: a table).")
@click.option("-A", "--all-namespaces", is_flag=True,
              help="The jobs of every namespace (a NAMESPACE column first).")
@click.option("--no-headers", is_flag=True, help="No header line in a table.")
@click.option("-w", "--watch", is_flag=True, help="After the list, print each job that changes.")
async def get(target: config.Target, job: dk.JobID | None, fmt: str, all_namespaces: bool,
              no_headers: bool, watch: bool) -> int:
    """List the dispatch jobs of the namespace (each submission, with its state), or one
    job's submissions (JOB)."""
    if watch and all_namespaces:
        raise click.UsageError("-w cannot be combined with -A: watch one namespace (-n NS)",
                               click.get_current_context())
    where = "any namespace"
    if all_namespaces:
        listed = await every_namespace(target)
    else:
        async with opened(target) as backend:
            where = f"namespace {backend.settings.namespace}"
            async with progress("listing jobs"):
                listed = await backend.jobs()  # also proves the cluster answers first
            if watch:
                with contextlib.suppress(asyncio.CancelledError):  # Ctrl-C ends a watch
                    await watch_table(backend, fmt, job, headers=not no_headers)
                return EXIT_OK
    if job is not None:
        listed = [j for j in listed if j.job == job]
        if not listed:
            raise dk.NotFound(f"job {job}: no TrainJob of it in {where}; "
                              "'kubectl dispatch get' lists the jobs")
    show_list(listed, fmt, all_namespaces=all_namespaces, headers=not no_headers)
    return EXIT_OK


def show_list(listed: list[dk.JobInfo], fmt: str, *, all_namespaces: bool,
              headers: bool) -> None:
    if fmt in ("table", "wide"):
        out(render.job_table(listed, wide=fmt == "wide", all_namespaces=all_namespaces,
                             headers=headers))
    elif fmt == "name":
        for j in listed:
            out(render.job_name(j))
    else:
        out(render.dump({"items": [render.job_data(j) for j in listed]}, fmt))


async def every_namespace(target: config.Target) -> list[dk.JobInfo]:
    """The jobs of every namespace that has a dispatch TrainJob: one cluster-wide list of
    TrainJobs (their metadata) finds the namespaces, then each is listed as ``get`` lists
    one (a backend is per namespace; all share one connection)."""
    loaded = config.resolve(target)
    async with connected(loaded) as kube:
        settings = await moded(kube, loaded, None)
        async with progress("listing jobs"):
            items, _ = await kube.list(TRAINJOB, None, label_selector=names.JOB_ID_LABEL,
                                       metadata=True)
            namespaces = sorted({str(i["metadata"]["namespace"]) for i in items})
            listed: list[dk.JobInfo] = []
            for ns in namespaces:
                here = settings.model_copy(update={"namespace": ns})
                async with dk.Backend.connect(here, kube=kube, preflight=False) as backend:
                    listed += await backend.jobs()
    return listed


async def watch_table(backend: dk.Backend, fmt: str, job: dk.JobID | None = None, *,
                      headers: bool = True) -> None:
    """Print every job once, then each job again whenever its row changes, and ``gone``
    when its TrainJob disappears (kubectl's ``get -w``); only ``job``'s when given."""
    last: dict[tuple[str, int], tuple[dk.JobInfo, list[str]]] = {}
    wide = fmt == "wide"
    columns = render.job_columns(wide=wide)
    age_at = [name for name, _ in columns].index("AGE")

    def show(j: dk.JobInfo) -> None:
        if fmt in ("table", "wide"):
            out(render.row(render.job_cells(j, wide=wide), columns))
        elif fmt == "name":
            out(render.job_name(j))
        elif fmt == "json":
            out(render.dump(render.job_data(j), "json").replace("\n", "").replace("  ", ""))
        else:
            out("---\n" + render.dump(render.job_data(j), "yaml"))

    if fmt in ("table", "wide") and headers:
        out(render.header(columns))
    async for listed in backend.watch_jobs():
        seen = set()
        for j in listed:
            if job is not None and j.job != job:
                continue
            key = (str(j.job), j.submission)
            seen.add(key)
            cells = render.job_cells(j, wide=wide)
            cells[age_at] = ""  # the age alone changing is no change
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


@command("logs")
@click.argument("job", type=JOB)
@click.option("--rank", type=click.IntRange(min=0), default=0, show_default=True,
              help="Which node's log.")
@click.option("-f", "--follow", is_flag=True, help="Keep reading until the container ends.")
@click.option("--stderr", is_flag=True, help="Read stderr instead of stdout.")
@click.option("--tail", type=click.IntRange(min=0), metavar="N",
              help="Only the last N lines (default: all).")
@click.option("--since", type=DurationType(), metavar="DURATION",
              help="Only what was logged in the last DURATION (5s, 2m, 3h).")
@click.option("--submission", type=click.IntRange(min=1),
              help="Which submission (default: the newest).")
async def logs(target: config.Target, job: dk.JobID, rank: int, follow: bool, stderr: bool,
               tail: int | None, since: timedelta | None, submission: int | None) -> int:
    """Print rank N's log of the job's current execution."""
    stream = dk.OutputStream.STDERR if stderr else dk.OutputStream.STDOUT
    async with opened(target) as backend:
        # The library's output with its log window (Backend.output has none yet), in the
        # worker that runs the job in MultiKueue mode.
        log = await output.output(backend.kube, backend.settings.namespace, job, rank=rank,
                                  stream=stream, follow=follow, submission=submission,
                                  tail_lines=tail, since=since, workers=backend.workers)
        async with log:
            if not log.split:
                click.echo(f"note: the API server cannot split the streams; this is pod "
                           f"{log.pod}'s combined log", err=True)
            try:
                async for chunk in log:
                    sys.stdout.buffer.write(chunk)
                    sys.stdout.buffer.flush()
            except asyncio.CancelledError:
                pass  # Ctrl-C ends a followed log
    return EXIT_OK


@command("events")
@click.argument("job", type=JOB)
@click.option("--no-headers", is_flag=True, help="No header line.")
@click.option("-w", "--watch", is_flag=True, help="After the list, print each new Event.")
async def events(target: config.Target, job: dk.JobID, no_headers: bool, watch: bool) -> int:
    """Print the Kubernetes Events of a job's objects, oldest first."""
    async with opened(target) as backend:
        if watch:
            await backend.jobs()  # fail at once, not retry forever, when unreachable
        if not no_headers:
            out(render.header(render.EVENT_COLUMNS))
        try:
            async for e in backend.events(job, follow=watch):
                out(render.event_row(e))
        except asyncio.CancelledError:
            pass  # Ctrl-C is how a watch ends
    return EXIT_OK

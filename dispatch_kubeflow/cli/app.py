"""The commands of ``kubectl dispatch``, each a thin layer over :class:`dispatch_kubeflow.Backend`.

Exit codes: 0 done; 1 an error (one line on stderr naming what is wrong and how to fix
it: a missing or bad settings file or key, a bad kubeconfig, an unreachable cluster, a
refusal); 2 a bad command line (likewise one line); 3 done, but not everything is proven
(``preflight`` found the backend observe-only, ``stop`` left something alive or
unproven); 130 interrupted. Nothing is written to the cluster before the command line,
the job id and the settings have been checked.

This module holds the group, its shared options and what the commands share; the
commands are in :mod:`.look` (get, describe, logs, events), :mod:`.act` (preflight, hold,
release, open, stop) and :mod:`.about` (version, completion).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import click

import dispatch_kubeflow as dk
from dispatch_kubeflow.cli import config
from dispatch_kubeflow.cli.progress import progress
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube, KubeAPI
from dispatch_kubeflow.kube.resources import TRAINJOB

PROG = "kubectl dispatch"  # how kubectl users call it (the script is kubectl-dispatch)
SCRIPT = "kubectl-dispatch"  # what a shell runs, so what its completion completes
EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_INCOMPLETE, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
Command = Callable[..., Coroutine[Any, Any, int]]

# --- the group and its shared options ----------------------------------------------------------

_TARGET_OPTIONS = (
    click.option("--settings", "settings_file", metavar="FILE",
                 help="The library's JSON settings section (default: "
                      f"${config.ENV}, else ~/.config/dispatch-kubeflow/settings.json)."),
    click.option("--kubeconfig", metavar="FILE",
                 help="Overrides cluster.kubeconfig of the settings (as kubectl's)."),
    click.option("--context", metavar="NAME",
                 help="Overrides cluster.context of the settings (as kubectl's)."),
    click.option("-n", "--namespace", metavar="NS",
                 help="Overrides namespace of the settings (default without a settings "
                      "file: the kubeconfig context's, else default)."),
)


def target_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(_TARGET_OPTIONS):
        fn = option(fn)
    return fn


@click.group(name="dispatch", no_args_is_help=True,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(dk.__version__, "--version", prog_name=SCRIPT,
                      message="%(prog)s %(version)s", help="Print the version and exit.")
@target_options
def cli(settings_file: str | None, kubeconfig: str | None, context: str | None,
        namespace: str | None) -> None:
    """Operate dispatch jobs: list, describe, hold, release, open, stop, logs, events.

    Works where kubectl does: the kubeconfig's context gives the cluster and namespace.
    A settings file (the library's JSON settings section) says what only it can:
    preflight, open and release need its probeRuntime. Installed as kubectl-dispatch, so
    kubectl finds it: `kubectl dispatch get`.
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


async def connect_kube(settings: dk.Settings) -> KubeAPI:
    """The connection of ``settings`` (a unit test puts a fake in its place)."""
    return await Kube.connect(
        kubeconfig=settings.cluster.kubeconfig, context=settings.cluster.context,
        in_cluster=settings.cluster.in_cluster,
        request_timeout=settings.timeouts.request.total_seconds(),
        transient_window=settings.timeouts.transient.total_seconds())


@contextlib.asynccontextmanager
async def connected(loaded: config.Loaded) -> AsyncIterator[KubeAPI]:
    async with progress("connecting"):
        kube = await connect_kube(loaded.settings)
    try:
        yield kube
    finally:
        await kube.close()


async def kueue_served(kube: KubeAPI) -> bool:
    return names.KUEUE_VERSION in await kube.served_versions(names.KUEUE_GROUP)


async def moded(kube: KubeAPI, loaded: config.Loaded, job: dk.JobID | None) -> dk.Settings:
    """The settings in the mode the cluster's objects show, when no file said it.

    For one job (``job``: hold, release) the mode its TrainJobs show: Kueue mode by their
    queue-name label, as the library recognises it (state.py). Otherwise Kueue mode when
    Kueue is served: its listing, find and stop also read Workloads, and judge a plain
    TrainJob (no label) as plain mode would, so they are right for both.
    """
    if loaded.from_file:
        return loaded.settings
    if job is None:
        served = await kueue_served(kube)
        return config.with_kueue(loaded.settings, config.UNSET if served else None)
    items, _ = await kube.list(TRAINJOB, loaded.settings.namespace,
                               label_selector=f"{names.JOB_ID_LABEL}={job}", metadata=True)
    queues = [q for i in items
              if (q := ((i.get("metadata") or {}).get("labels") or {}).get(
                  names.QUEUE_NAME_LABEL))]
    return config.with_kueue(loaded.settings, queues[0] if queues else None)


@contextlib.asynccontextmanager
async def opened(target: config.Target, *, preflight: bool = False, what: str = "",
                 job: dk.JobID | None = None, loaded: config.Loaded | None = None,
                 timeouts: dict[str, Any] | None = None) -> AsyncIterator[dk.Backend]:
    """A backend for ``target``; without ``preflight`` it is observe-only (and quick).

    ``preflight`` (command ``what``) needs a settings file: its probe needs probeRuntime.
    ``job``: the mode is the one that job's TrainJobs show (:func:`moded`). ``timeouts``
    override the settings' (``stop --timeout``).
    """
    loaded = loaded or config.resolve(target)
    if preflight:
        config.require_file(loaded, "probeRuntime", f"'{PROG} {what}' runs the preflight, "
                            "whose probe")
    async with connected(loaded) as kube:
        settings = await moded(kube, loaded, job)
        if timeouts:
            settings = settings.model_copy(update={
                "timeouts": settings.timeouts.model_copy(update=timeouts)})
        async with progress("running the preflight" if preflight else "connecting"):
            backend = await dk.Backend.connect(settings, kube=kube, preflight=preflight)
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


async def submission_of(backend: dk.Backend, job: dk.JobID, submission: int | None
                        ) -> dk.JobInfo:
    """The listing of ``submission`` of ``job`` (default: its newest)."""
    listed = await submissions(backend, job)
    if submission is None:
        return listed[-1]
    for j in listed:
        if j.submission == submission:
            return j
    have = ", ".join(str(j.submission) for j in listed)
    raise dk.NotFound(f"--submission: job {job} has no submission {submission} (it has {have})")


async def submission_ref(backend: dk.Backend, job: dk.JobID, submission: int | None
                         ) -> dk.ObjectRef:
    """The TrainJob of ``submission`` of ``job`` (default: its newest)."""
    return (await submission_of(backend, job, submission)).ref

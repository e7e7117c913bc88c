"""The Kubeflow backend: dispatch jobs as Kubeflow Trainer TrainJobs, admitted through Kueue.

Open one with `dispatch_kubeflow.open_backend` (``AdapterConfig("kubeflow", ...)``),
`factory` or `Backend.connect`; each runs the preflight (`dispatch_kubeflow.preflight`) in
the mode the settings choose (`dispatch_kubeflow.mode`) before it returns, so opening takes
at least ``timeouts.preflightProbe``. Use the backend as an async context manager, or call
`Backend.close`.

When a capability is no or unknown the backend is observe-only: `Backend.start`,
`Backend.open` and `Backend.release` raise ObserveOnlyError carrying the reasons; inspect,
jobs, events, find, output, hold and stop_job still work. A backend opened with
``preflight=False`` (a tool that only looks) skips the preflight and is observe-only from
the start.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any

from dispatch_kubeflow import (
    errors,
    events,
    find,
    hold,
    jobs,
    observe,
    output,
    preflight,
    start,
    stop,
)
from dispatch_kubeflow.events import JobEvent
from dispatch_kubeflow.informer import Informers
from dispatch_kubeflow.jobs import JobInfo
from dispatch_kubeflow.kube import KubeAPI, oldest_first, transport
from dispatch_kubeflow.mode import Mode
from dispatch_kubeflow.mode_kueue import KueueMode
from dispatch_kubeflow.mode_multikueue import MultiKueueMode, worker_settings
from dispatch_kubeflow.mode_plain import PlainMode
from dispatch_kubeflow.model import (
    AdapterConfig,
    Capability,
    CapabilitySource,
    CapabilityStatus,
    CapabilityValue,
    HoldMeta,
    JobID,
    ObjectRef,
    ObjectState,
    Observation,
    OutputStream,
    ReleaseOutcome,
    StartRequest,
    StopReport,
    as_job_id,
)
from dispatch_kubeflow.opening import Opening
from dispatch_kubeflow.output import LogStream
from dispatch_kubeflow.preflight import run as run_preflight
from dispatch_kubeflow.settings import Settings
from dispatch_kubeflow.waits import wait_window, within
from dispatch_kubeflow.workers import NONE, Workers, connect_cluster

log = logging.getLogger(__name__)

NAME = "kubeflow"
"""The name the Kubeflow backend is registered under: ``AdapterConfig(NAME, settings)``
opens it with [open_backend][dispatch_kubeflow.open_backend]."""


def select_mode(settings: Settings, workers: Workers = NONE) -> Mode:
    """The mode the settings choose: MultiKueue mode when their ``kueue`` section has a
    ``multiKueue`` one (its ``workers`` connected), Kueue mode when they have a ``kueue``
    section, plain mode otherwise. Chosen once, when the backend opens (see
    `dispatch_kubeflow.mode`)."""
    return (MultiKueueMode.of(settings, workers) or KueueMode.from_settings(settings)
            or PlainMode(settings))


class Backend:
    """An open Kubeflow backend. Not built directly: open one with
    [open_backend][dispatch_kubeflow.open_backend] or [connect][dispatch_kubeflow.Backend.connect].

    The public facade: each call checks its input, then delegates to an operation's module
    and to the mode chosen when the backend opened (Kueue mode when the settings have a
    ``kueue`` section, plain mode otherwise).

    Use it as an async context manager (``async with``), or call
    [close][dispatch_kubeflow.Backend.close] when done. When the preflight found a
    capability no or unknown the backend is observe-only
    ([observe_only][dispatch_kubeflow.Backend.observe_only]):
    [start][dispatch_kubeflow.Backend.start], [open][dispatch_kubeflow.Backend.open] and
    [release][dispatch_kubeflow.Backend.release] raise
    [ObserveOnlyError][dispatch_kubeflow.ObserveOnlyError] carrying the reasons; every other
    call still works.

    A job is named either by the [ObjectRef][dispatch_kubeflow.ObjectRef] that
    [start][dispatch_kubeflow.Backend.start] returned (or its ``id``,
    ``"<namespace>/<name>"``), for the calls on one submission, or by its
    [JobID][dispatch_kubeflow.JobID] (or its text), for the calls on every submission.
    """

    def __init__(self, kube: KubeAPI, settings: Settings, mode: Mode,
                 capabilities: Mapping[Capability, CapabilityStatus], *,
                 owns_kube: bool = True, workers: Workers = NONE) -> None:
        self._kube = kube
        self._owns_kube = owns_kube
        self._workers = workers  # MultiKueue mode's worker clusters (none otherwise)
        self.settings = settings
        """The settings section the backend was opened with, validated."""
        self._mode = mode
        self._caps = MappingProxyType(dict(capabilities))
        self._informers = Informers(kube)  # the watches every wait of this backend shares
        self._stops = stop.Crowd(self._informers)  # its stops, and the lists they share
        self._stop_limits = stop.LIMITS  # StopJob's waits and its crowd's size
        self._closed = False

    # --- opening and closing --------------------------------------------------------------
    @classmethod
    def connect(cls, settings: Settings | bytes | str | Mapping[str, Any], *,
                kube: KubeAPI | None = None, preflight: bool = True,
                workers: Mapping[str, KubeAPI] | None = None) -> Opening[Backend]:
        """Validate the settings, connect (unless ``kube`` is given) and run the preflight:
        ``async with Backend.connect(settings) as backend:``, or ``await`` it and close the
        backend yourself.

        ``preflight=False`` skips it: every capability is then unknown (not checked) and
        the backend observe-only, which is all a tool that lists, inspects, reads logs or
        events, holds or stops needs, without the preflight's probe and its seconds.

        Nothing happens until the result is awaited or entered; the errors below are raised
        then. A preflight that cannot reach the cluster or finds a capability missing does
        not raise: the backend opens observe-only, with the reasons in
        [observe_only_reasons][dispatch_kubeflow.Backend.observe_only_reasons].

        Args:
            settings: The settings section: JSON text or bytes, a decoded mapping, or
                [Settings][dispatch_kubeflow.Settings] already parsed (see the
                configuration reference).
            kube: A connection to use instead of making one (left open on close).
            workers: MultiKueue mode: a connection to each worker the settings name, to
                use instead of making them (left open on close).
            preflight: Whether to prove the capabilities before returning; opening then
                takes at least ``timeouts.preflightProbe``.

        Returns:
            The opening of the backend: ``await`` it for the [Backend][dispatch_kubeflow.Backend],
                or ``async with`` it to have the backend closed at the end of the block.

        Raises:
            SettingsError: The settings are invalid (``field`` names the key), or the
                kubeconfig file (``cluster.kubeconfig``) or the pod's service account
                (``cluster.inCluster``) cannot be loaded.
        """
        return Opening(lambda: cls._connect(settings, kube=kube, preflight=preflight,
                                            workers=workers))

    @classmethod
    async def _connect(cls, settings: Settings | bytes | str | Mapping[str, Any], *,
                       kube: KubeAPI | None, preflight: bool,
                       workers: Mapping[str, KubeAPI] | None = None) -> Backend:
        cfg = Settings.parse(settings)
        connected = await Workers.connect(cfg, worker_settings(cfg), workers)
        mode = select_mode(cfg, connected)
        owns = kube is None
        try:
            if kube is None:
                kube = await connect_cluster(cfg.cluster, cfg)
            try:
                caps = await run_preflight(kube, cfg, mode) if preflight else not_checked()
            except BaseException:
                if owns:
                    await kube.close()
                raise
        except BaseException:
            await connected.close()
            raise
        backend = cls(kube, cfg, mode, caps, owns_kube=owns, workers=connected)
        if backend.observe_only and preflight:  # without it, observe-only is what was asked
            log.warning("dispatch-kubeflow is observe-only: %s",
                        "; ".join(backend.observe_only_reasons))
        return backend

    async def close(self) -> None:
        """Stop the backend's watches and close its connection (if it made it). Idempotent.

        Raises:
            Exception: What a watch of the backend ended with, other than its cancellation
                (it is raised here rather than lost).
        """
        if not self._closed:
            self._closed = True
            try:
                await self._stops.close()  # its shared lists' senders, before their informers
            finally:
                try:
                    await self._informers.close()
                finally:
                    try:
                        if self._owns_kube:
                            await self._kube.close()
                    finally:
                        await self._workers.close()

    async def __aenter__(self) -> Backend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- capabilities ---------------------------------------------------------------------
    async def capabilities(self, which: Iterable[Capability] | None = None
                           ) -> Mapping[Capability, CapabilityStatus]:
        """What the preflight proved (all capabilities, or those asked for).

        Args:
            which: The capabilities to report; None: every one.

        Returns:
            Each capability's status (read-only).

        Raises:
            KeyError: ``which`` names something that is not a
                [Capability][dispatch_kubeflow.Capability].
        """
        if which is None:
            return self._caps
        return MappingProxyType({c: self._caps[c] for c in which})

    @property
    def observe_only(self) -> bool:
        """Whether a capability is no or unknown, so that start, open and release are refused
        with [ObserveOnlyError][dispatch_kubeflow.ObserveOnlyError]."""
        return any(not st.ok for st in self._caps.values())

    @property
    def observe_only_reasons(self) -> list[str]:
        """Why the backend is observe-only: one line per capability that is not yes (empty
        when it is not observe-only)."""
        return preflight.observe_only_reasons(self._caps)

    def _refuse_if_observe_only(self, what: str) -> None:
        if self.observe_only:
            reasons = self.observe_only_reasons
            raise errors.ObserveOnlyError(
                f"{what} refused: the backend is observe-only: " + "; ".join(reasons),
                reasons=reasons)

    # --- start, open, inspect -------------------------------------------------------------
    async def start(self, req: StartRequest) -> ObjectRef:
        """Start the job closed; returns its TrainJob's reference (idempotent).

        The job is ``gated`` until [open][dispatch_kubeflow.Backend.open]: no admission, no
        pod. Starting the same request again returns the same reference; concurrent Starts
        of one job and submission are linearizable (exactly one request's TrainJob exists).

        Args:
            req: The job, submission, attempt and spec. The Kubeflow backend needs an
                [Image][dispatch_kubeflow.Image] and a [RuntimeRef][dispatch_kubeflow.RuntimeRef]
                among the spec's extensions.

        Returns:
            The TrainJob's reference (``id`` is ``<namespace>/dj-<job id>-s<submission>``).

        Raises:
            SpecError: The request is invalid (``field`` names the part), or its runtime does
                not exist or restarts without bound. Raised even when observe-only.
            ObserveOnlyError: The backend is observe-only.
            ConflictError: The same job and submission were started with another request
                (the message says what differs), or its objects are being deleted.
            DeadlineExceeded: Kueue made no Workload within ``timeouts.start`` (Kueue mode).
            KubeError: The API server refused a write or could not be reached.
        """
        valid = start.validate(req)  # bad input is a SpecError even when observe-only
        self._refuse_if_observe_only("Start")
        return await start.start(self._kube, self.settings, self._mode, valid,
                                 shared=self._informers)

    async def open(self, ref: ObjectRef | str) -> None:
        """Remove dispatch's start gate (only dispatch's; harmless when already open).

        Kueue mode: the Workload is queued and admitted as Kueue finds room. Plain mode: the
        job's first admission (A = 1), then it runs.

        Args:
            ref: The job's reference as [start][dispatch_kubeflow.Backend.start] returned it,
                or its ``id``.

        Raises:
            SpecError: ``ref`` is malformed or not in the backend's namespace.
            ObserveOnlyError: The backend is observe-only.
            NotFound: The TrainJob does not exist.
            HoldError: Plain mode: the job is held (open it after the release).
            DeadlineExceeded: Plain mode: the admission took longer than ``timeouts.start``.
            KubeError: The API server refused the write or could not be reached.
        """
        ref = self._ref(ref)
        self._refuse_if_observe_only("Open")
        await self._mode.open(self._kube, ref)

    async def inspect(self, ref: ObjectRef | str) -> Observation:
        """The job's state (see docs/states.md). It only reads, in every mode: a plain-mode
        hold that expired is released by [wait][dispatch_kubeflow.Backend.wait] (or Release).
        In MultiKueue mode the cause's detail also says when the manager's MultiKueue has
        lost the worker the job was dispatched to (read from its MultiKueueCluster).

        Args:
            ref: The job's reference as [start][dispatch_kubeflow.Backend.start] returned it,
                or its ``id``.

        Returns:
            What the job's objects say now; a job whose TrainJob does not exist is ``gone``
                (not an error).

        Raises:
            SpecError: ``ref`` is malformed or not in the backend's namespace.
            KubeError: The API server refused a read or could not be reached.
        """
        return await observe.inspect(self._kube, self._mode, self._ref(ref))

    async def wait(self, ref: ObjectRef | str, *states: ObjectState,
                   deadline: datetime | None = None,
                   timeout: float | timedelta | None = None) -> Observation:
        """Wait until the job is in one of ``states``; return that observation.

        A watch, not a poll: the TrainJob, its pods and (Kueue) its Workload are watched,
        and the state table (`dispatch_kubeflow.state.observe`) is applied after
        every event, so the wait ends as soon as the server reports the change. Concurrent
        waits share one watch per kind (`dispatch_kubeflow.informer`), whatever their
        number; [close][dispatch_kubeflow.Backend.close] stops them. Past
        ``deadline`` it raises DeadlineExceeded. In plain mode, where no controller does
        it, the wait releases the job's hold when it expires (and no pod is left) and goes
        on waiting, as the admission controller does in Kueue mode: this is the library's
        one place that acts on an expired hold (see docs/holds.md).

        Bound it by ``deadline`` (a timezone-aware time) or ``timeout`` (seconds, or a
        timedelta, from now), not both; neither: it waits until the state comes.

        Args:
            ref: The job's reference as [start][dispatch_kubeflow.Backend.start] returned it,
                or its ``id``.
            *states: The states to wait for (at least one); their text (``"running"``) is
                accepted too.
            deadline: When to give up: a timezone-aware time.
            timeout: When to give up: seconds from now (0 or more), or a timedelta.

        Returns:
            The first observation of the job in one of ``states``.

        Raises:
            SpecError: ``ref`` is malformed or not in the backend's namespace; no state was
                named; both ``deadline`` and ``timeout`` were given, or ``timeout`` is
                negative or not a number; ``deadline`` has no time zone (``field`` names
                the parameter).
            ValueError: A state is not an [ObjectState][dispatch_kubeflow.ObjectState].
            DeadlineExceeded: The deadline passed first (also a ``TimeoutError``).
            NotFound: The TrainJob does not exist and ``gone`` is not among ``states``.
            KubeError: The API server refused a read or could not be reached.
        """
        ref = self._ref(ref)
        want, deadline = wait_window(states, deadline, timeout)
        label = ", ".join(sorted(want))
        async with within(deadline, f"waiting for {ref.id} to be {label}"):
            return await observe.wait(self._kube, self._mode, ref, want,
                                      shared=self._informers)

    # --- hold and release -----------------------------------------------------------------
    async def hold(self, ref: ObjectRef | str, meta: HoldMeta) -> None:
        """Hold the job: end its execution and keep it from being admitted until released.

        Holding again with the same instance changes nothing. Allowed when observe-only.
        Kueue mode deactivates the job's Workload; plain mode suspends the TrainJob (see
        docs/holds.md).

        Args:
            ref: The job's reference as [start][dispatch_kubeflow.Backend.start] returned it,
                or its ``id``.
            meta: The hold: its instance, who holds, an optional ``until`` (when it expires)
                and reason, and the call's deadline.

        Raises:
            SpecError: ``ref`` is malformed or not in the backend's namespace, or ``meta``
                is invalid (an instance below 1, no holder, a reason too long).
            NotFound: The TrainJob, or in Kueue mode its Workload, does not exist (yet).
            HoldError: The job is held already under another instance.
            DeadlineExceeded: ``meta.call.deadline`` passed first.
            KubeError: The API server refused a write or could not be reached; a
                [KubeConflict][dispatch_kubeflow.errors.KubeConflict] when the object kept
                changing under the hold's writes.
        """
        ref = self._ref(ref)
        hold.validate_hold(meta)
        async with within(meta.deadline, f"Hold {meta.instance} of {ref.id}"):
            await self._mode.hold(self._kube, ref, meta)

    async def release(self, ref: ObjectRef | str, meta: HoldMeta) -> ReleaseOutcome:
        """Release hold ``meta.instance``; another instance's hold is a HoldError and stays.

        Returns ``ReleaseOutcome.RELEASED`` when this call removed the hold, and
        ``ReleaseOutcome.NOT_HELD`` when the job was not held (nothing changed: a repeated
        Release, or a hold that already ended because it expired).

        Args:
            ref: The job's reference as [start][dispatch_kubeflow.Backend.start] returned it,
                or its ``id``.
            meta: The hold to release: the same ``instance`` as the hold's; its call's
                deadline bounds this call.

        Returns:
            Whether this call removed the hold.

        Raises:
            SpecError: ``ref`` is malformed or not in the backend's namespace, or ``meta``
                is invalid.
            ObserveOnlyError: The backend is observe-only.
            NotFound: The TrainJob does not exist.
            HoldError: The job is held under another instance (that hold stays).
            DeadlineExceeded: ``meta.call.deadline`` passed first.
            KubeError: The API server refused a write or could not be reached.
        """
        ref = self._ref(ref)
        hold.validate_hold(meta)
        self._refuse_if_observe_only("Release")
        async with within(meta.deadline, f"Release {meta.instance} of {ref.id}"):
            done = await self._mode.release(self._kube, ref, meta.instance)
        return ReleaseOutcome.RELEASED if done else ReleaseOutcome.NOT_HELD

    # --- listing and events ---------------------------------------------------------------
    async def jobs(self) -> list[JobInfo]:
        """Every dispatch job (each submission) of the namespace, with its Observation.

        One LIST per kind, whatever the number of jobs (see `dispatch_kubeflow.jobs`).
        Listing only reads: in plain mode a job whose hold expired may show ``held`` until
        a wait on it releases the hold.

        Returns:
            One entry per submission, sorted by job id (creation time), then submission.

        Raises:
            KubeError: The API server refused a list or could not be reached.
        """
        return await jobs.list_jobs(self._kube, self.settings.namespace, self._mode.listed,
                                    self._workers)

    def watch_jobs(self) -> AsyncIterator[list[JobInfo]]:
        """[jobs][dispatch_kubeflow.Backend.jobs], then again every time the listing changes
        (one watch per kind).

        Never ends by itself: stop iterating (or cancel) when done.

        Returns:
            An async iterator of listings (``async for listing in backend.watch_jobs()``);
                a listing equal to the last one is not yielded again.

        Raises:
            KubeError: While iterating: a watch failed in a way a new list cannot mend.
        """
        return jobs.watch_jobs(self._kube, self.settings.namespace, self._mode.listed,
                              self._workers)

    def events(self, job: JobID | str, *, follow: bool = False) -> AsyncIterator[JobEvent]:
        """The Kubernetes Events of the job's objects, oldest first (``async for``).

        With ``follow`` it goes on with every Event recorded later, until the caller stops
        iterating. Included: every Event regarding an object named after one of the job's
        TrainJobs (the TrainJob, its runtime copy, JobSet, Jobs, pods, Kueue's Workload),
        also of pods of earlier executions that are gone: Kubernetes', Kueue's, JobSet's,
        Trainer's, StopJob's and the admission controller's.

        Args:
            job: The job id (every submission's Events), or its text.
            follow: Whether to go on with later Events (until the caller stops iterating).

        Returns:
            An async iterator of the Events.

        Raises:
            SpecError: ``job`` is not a job id (raised at once).
            KubeError: While iterating: the API server refused the list or watch, or could
                not be reached.
        """
        return events.job_events(self._kube, self.settings.namespace, as_job_id(job),
                                 follow=follow)

    # --- stop, find, output ---------------------------------------------------------------
    async def stop_job(self, job: JobID | str, reason: str) -> StopReport:
        """Delete everything of the job and check that it is gone.

        Every submission's objects are deleted (TrainJobs, runtime copies, Workloads,
        JobSets, Jobs, pods, orphans included), ``reason`` is recorded as an Event on each
        TrainJob, and StopJob watches until each object and every pod beneath it is gone,
        for at most ``timeouts.stopJob``. Allowed when observe-only. Stopping a job that has
        nothing left is not an error (an empty report).

        Args:
            job: The job id, or its text.
            reason: Why, for people: recorded on each TrainJob as a ``StopJob`` Event.

        Returns:
            What is gone, what is still alive when ``timeouts.stopJob`` passed, and what
                could not be proven gone; ``complete`` says whether all is gone. MultiKueue
                mode: the manager's and every worker's, each reference naming its cluster
                (a worker that cannot be read: its kinds unproven, nameless).

        Raises:
            SpecError: ``job`` is not a job id.
            KubeError: A delete was refused in a way that will not mend by itself (RBAC,
                a rejected certificate). A list or delete that fails for a while (no answer,
                429, 5xx) is tried again, and what stays unknown is reported ``unproven``.
            DispatchError: The backend was closed while the stop was under way.
        """
        ns, job = self.settings.namespace, as_job_id(job)
        limit = self.settings.timeouts.stop_job
        loop = asyncio.get_running_loop()
        until = loop.time() + limit.total_seconds()
        # Its requests wait for a connection as of when it began: of many stops at once,
        # the first run through instead of each ending with the crowd (kube.slots).
        with oldest_first():
            own = await stop.stop_job(self._kube, ns, job, reason, kinds=self._mode.kinds,
                                      limit=limit, crowd=self._stops,
                                      feeds=self._mode.watched(ns), limits=self._stop_limits)
        if not self._workers:
            return own
        # MultiKueue: the manager first, so that nothing is dispatched again once a
        # worker is proven empty; then every worker at once, in what is left of the time.
        # A worker that cannot be read leaves its kinds unproven, naming it.
        left = timedelta(seconds=max(0.0, until - loop.time()))

        async def in_worker(name: str, wk: KubeAPI) -> StopReport:
            return await stop.stop_job(wk, ns, job, reason, kinds=find.KINDS, limit=left,
                                       limits=self._stop_limits)

        return stop.across(own, await self._workers.each(in_worker))

    async def find(self, job: JobID | str) -> tuple[ObjectRef, ...]:
        """Every object of the job that exists, orphans included.

        Args:
            job: The job id, or its text.

        Returns:
            The references of the job's objects of every kind the mode uses (TrainJobs,
                runtime copies, Kueue's Workloads, JobSets, Jobs, pods); empty when none is
                left. MultiKueue mode: every worker's too, each naming its cluster.

        Raises:
            SpecError: ``job`` is not a job id.
            KubeError: A kind could not be listed, in MultiKueue mode naming the worker (a
                [KubeNoAnswer][dispatch_kubeflow.errors.KubeNoAnswer] when the server did
                not answer).
        """
        ns, job = self.settings.namespace, as_job_id(job)
        own = await find.find_refs(self._kube, ns, job, self._mode.kinds)

        async def in_worker(name: str, wk: KubeAPI) -> tuple[ObjectRef, ...]:
            refs = await find.find_refs(wk, ns, job, find.KINDS)
            return tuple(replace(r, cluster=name) for r in refs)

        return own + tuple(r for refs in (await self._workers.each(in_worker)).values()
                           for r in refs)

    def output(self, job: JobID | str, rank: int = 0,
               stream: OutputStream = OutputStream.STDOUT, follow: bool = False, *,
               submission: int | None = None) -> Opening[LogStream]:
        """Rank ``rank``'s log of the job's current execution:
        ``async with backend.output(job) as log:``, or ``await`` it for the open stream.

        The current execution's pod of the rank is the one with the highest (submission,
        A, J), then the newest. ``OutputStream.ALL`` is the container's log; ``STDOUT`` and
        ``STDERR`` apart need the API server's feature gate ``PodLogsQuerySplitStreams``:
        without it ``STDOUT`` falls back to the combined log (the stream's ``split`` is
        False) and ``STDERR`` is an UnsupportedError. MultiKueue mode: the pods of every
        worker count, and the log is read from the worker the pod is in, while the job
        runs (MultiKueue deletes its copy there, pods and all, once the job finishes).
        Nothing is read until the result is awaited or entered; the errors below are
        raised then.

        Args:
            job: The job id, or its text.
            rank: The rank (the pod's job-completion index), 0 or more.
            stream: Which of the container's streams to read.
            follow: Whether to keep reading until the container ends.
            submission: Only this submission's pods (None: the newest submission's).

        Returns:
            The opening of the log: ``await`` it for the [LogStream][dispatch_kubeflow.LogStream],
                or ``async with`` it to have it closed at the end of the block.

        Raises:
            SpecError: ``rank`` is not a non-negative integer, or ``job`` not a job id.
            ValueError: ``stream`` is not an [OutputStream][dispatch_kubeflow.OutputStream].
            NotFound: The job has no pod of that rank, or its pod has not started yet
                (gated, or not scheduled): ask again once it runs.
            UnsupportedError: ``STDERR`` was asked for and the server cannot split the
                streams.
            KubeError: The API server refused a read or could not be reached.
        """
        return Opening(lambda: output.output(
            self._kube, self.settings.namespace, as_job_id(job), rank=rank, stream=stream,
            follow=follow, submission=submission, workers=self._workers))

    # --- helpers --------------------------------------------------------------------------
    @property
    def kube(self) -> KubeAPI:
        """The connection the backend uses (its ``requests`` counter is read by benchmarks).

        Raises:
            UnsupportedError: A [FakeBackend][dispatch_kubeflow.testing.FakeBackend] has no
                connection.
        """
        return self._kube

    @property
    def workers(self) -> Workers:
        """MultiKueue mode: the connection to each worker cluster, by its MultiKueueCluster
        name (empty in the other modes). For reads the backend's methods do not offer, such
        as a log window (``kubectl dispatch logs --tail``)."""
        return self._workers

    def _ref(self, ref: ObjectRef | str) -> ObjectRef:
        if isinstance(ref, str):
            ref = ObjectRef.parse(ref)
        if not isinstance(ref, ObjectRef):
            raise errors.SpecError(f"ref: expected an ObjectRef, got {type(ref).__name__}",
                                   field="ref")
        if ref.namespace != self.settings.namespace:
            raise errors.SpecError(f"ref: {ref.id} is not in this backend's namespace "
                                   f"{self.settings.namespace}", field="ref")
        return ref


def not_checked() -> dict[Capability, CapabilityStatus]:
    """Every capability unknown: what a backend opened without the preflight knows."""
    return {c: CapabilityStatus(CapabilityValue.UNKNOWN, CapabilitySource.NOT_CHECKED,
                                "not checked: the backend was opened without the preflight")
            for c in Capability}


def require_kubeconfig(cfg: Settings) -> None:
    """A SettingsError naming ``cluster.kubeconfig`` when the kubeconfig file is missing."""
    if not cfg.cluster.in_cluster:
        transport.require_kubeconfig(cfg.cluster.kubeconfig)


async def factory(config: AdapterConfig) -> Backend:
    """The registry's factory: open a Kubeflow backend from ``config.settings``.

    What [open_backend][dispatch_kubeflow.open_backend] calls for ``"kubeflow"``; to open one
    from a service, call that.

    Args:
        config: The backend's name ([NAME][dispatch_kubeflow.NAME]) and its settings section.

    Returns:
        The open backend (preflight run); close it when done.

    Raises:
        SettingsError: ``config.backend`` is not ``"kubeflow"``, the settings are invalid,
            or the kubeconfig or service account cannot be loaded.
    """
    if config.backend != NAME:
        raise errors.SettingsError(f"backend: this factory opens {NAME!r}, not "
                                   f"{config.backend!r}", field="backend")
    return await Backend.connect(config.settings)

"""The Kubeflow backend: dispatch jobs as Kubeflow Trainer TrainJobs, admitted through Kueue.

Open one with :func:`dispatch_kubeflow.open_backend` (``AdapterConfig("kubeflow", ...)``),
:func:`factory` or :meth:`Backend.connect`; each runs the preflight
(:mod:`dispatch_kubeflow.preflight`) in the mode the settings choose
(:mod:`dispatch_kubeflow.mode`) before it returns, so opening takes at least
``timeouts.preflightProbe``. Use the backend as an async context manager, or call
:meth:`Backend.close`.

When a capability is no or unknown the backend is observe-only: :meth:`Backend.start`,
:meth:`Backend.open` and :meth:`Backend.release` raise ObserveOnlyError carrying the
reasons; inspect, jobs, events, find, output, hold and stop_job still work. A backend
opened with ``preflight=False`` (a tool that only looks) skips the preflight and is
observe-only from the start.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable, Mapping
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
from dispatch_kubeflow.kube import Kube, KubeAPI, transport
from dispatch_kubeflow.mode import Mode
from dispatch_kubeflow.mode_kueue import KueueMode
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
from dispatch_kubeflow.waits import deadline_after, within

log = logging.getLogger(__name__)

NAME = "kubeflow"
"""The name this backend is opened by (:mod:`dispatch_kubeflow.registry`)."""


def select_mode(settings: Settings) -> Mode:
    """The mode the settings choose: Kueue mode when they have a ``kueue`` section, plain
    mode otherwise. Chosen once, when the backend opens (see :mod:`dispatch_kubeflow.mode`)."""
    return KueueMode.from_settings(settings) or PlainMode(settings)


class Backend:
    """An open Kubeflow backend. Not built directly: use :meth:`connect`.

    The public facade: each call checks its input, then delegates to an operation's module
    and to the mode chosen when the backend opened (:mod:`dispatch_kubeflow.mode`).
    """

    def __init__(self, kube: KubeAPI, settings: Settings, mode: Mode,
                 capabilities: Mapping[Capability, CapabilityStatus], *,
                 owns_kube: bool = True) -> None:
        self._kube = kube
        self._owns_kube = owns_kube
        self.settings = settings
        self._mode = mode
        self._caps = MappingProxyType(dict(capabilities))
        self._informers = Informers(kube)  # the watches every wait of this backend shares
        self._stops = stop.Crowd(self._informers)  # its stops, and the lists they share
        self._stop_limits = stop.LIMITS  # StopJob's waits and its crowd's size
        self._closed = False

    # --- opening and closing --------------------------------------------------------------
    @classmethod
    def connect(cls, settings: Settings | bytes | str | Mapping[str, Any], *,
                kube: KubeAPI | None = None, preflight: bool = True) -> Opening[Backend]:
        """Validate the settings, connect (unless ``kube`` is given) and run the preflight:
        ``async with Backend.connect(settings) as backend:``, or ``await`` it and close the
        backend yourself.

        ``preflight=False`` skips it: every capability is then unknown (not checked) and
        the backend observe-only, which is all a tool that lists, inspects, reads logs or
        events, holds or stops needs, without the preflight's probe and its seconds.
        """
        return Opening(lambda: cls._connect(settings, kube=kube, preflight=preflight))

    @classmethod
    async def _connect(cls, settings: Settings | bytes | str | Mapping[str, Any], *,
                       kube: KubeAPI | None, preflight: bool) -> Backend:
        cfg = Settings.parse(settings)
        mode = select_mode(cfg)
        owns = kube is None
        if kube is None:
            kube = await Kube.connect(
                kubeconfig=cfg.cluster.kubeconfig, context=cfg.cluster.context,
                in_cluster=cfg.cluster.in_cluster,
                request_timeout=cfg.timeouts.request.total_seconds(),
                transient_window=cfg.timeouts.transient.total_seconds())
        try:
            caps = await run_preflight(kube, cfg, mode) if preflight else not_checked()
        except BaseException:
            if owns:
                await kube.close()
            raise
        backend = cls(kube, cfg, mode, caps, owns_kube=owns)
        if backend.observe_only and preflight:  # without it, observe-only is what was asked
            log.warning("dispatch-kubeflow is observe-only: %s",
                        "; ".join(backend.observe_only_reasons))
        return backend

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                await self._stops.close()  # its shared lists' senders, before their informers
            finally:
                try:
                    await self._informers.close()
                finally:
                    if self._owns_kube:
                        await self._kube.close()

    async def __aenter__(self) -> Backend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- capabilities ---------------------------------------------------------------------
    async def capabilities(self, which: Iterable[Capability] | None = None
                           ) -> Mapping[Capability, CapabilityStatus]:
        """What the preflight proved (all capabilities, or those asked for)."""
        if which is None:
            return self._caps
        return MappingProxyType({c: self._caps[c] for c in which})

    @property
    def observe_only(self) -> bool:
        return any(not st.ok for st in self._caps.values())

    @property
    def observe_only_reasons(self) -> list[str]:
        return preflight.observe_only_reasons(self._caps)

    def _refuse_if_observe_only(self, what: str) -> None:
        if self.observe_only:
            reasons = self.observe_only_reasons
            raise errors.ObserveOnlyError(
                f"{what} refused: the backend is observe-only: " + "; ".join(reasons),
                reasons=reasons)

    # --- start, open, inspect -------------------------------------------------------------
    async def start(self, req: StartRequest) -> ObjectRef:
        """Start the job closed; returns its TrainJob's reference (idempotent)."""
        valid = start.validate(req)  # bad input is a SpecError even when observe-only
        self._refuse_if_observe_only("Start")
        return await start.start(self._kube, self.settings, self._mode, valid,
                                 shared=self._informers)

    async def open(self, ref: ObjectRef | str) -> None:
        """Remove dispatch's start gate (only dispatch's; harmless when already open)."""
        ref = self._ref(ref)
        self._refuse_if_observe_only("Open")
        await self._mode.open(self._kube, ref)

    async def inspect(self, ref: ObjectRef | str) -> Observation:
        """The job's state (see :mod:`dispatch_kubeflow.state`). It only reads, in every
        mode: a plain-mode hold that expired is released by :meth:`wait` (or Release)."""
        return await observe.inspect(self._kube, self._mode, self._ref(ref))

    async def wait(self, ref: ObjectRef | str, *states: ObjectState,
                   deadline: datetime | None = None,
                   timeout: float | timedelta | None = None) -> Observation:
        """Wait until the job is in one of ``states``; return that observation.

        A watch, not a poll: the TrainJob, its pods and (Kueue) its Workload are watched,
        and the state table (:func:`dispatch_kubeflow.state.observe`) is applied after
        every event, so the wait ends as soon as the server reports the change. Concurrent
        waits share one watch per kind (:mod:`dispatch_kubeflow.informer`), whatever their
        number; :meth:`close` stops them. Past
        ``deadline`` it raises DeadlineExceeded. In plain mode, where no controller does
        it, the wait releases the job's hold when it expires (and no pod is left) and goes
        on waiting, as the admission controller does in Kueue mode: this is the library's
        one place that acts on an expired hold (see docs/holds.md).

        Bound it by ``deadline`` (a timezone-aware time) or ``timeout`` (seconds, or a
        timedelta, from now), not both; neither: it waits until the state comes.
        """
        ref = self._ref(ref)
        if timeout is not None:
            if deadline is not None:
                raise errors.SpecError("timeout: give deadline or timeout, not both",
                                       field="timeout")
            seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
            if isinstance(seconds, bool) or not isinstance(seconds, int | float) \
                    or seconds < 0:
                raise errors.SpecError(f"timeout: seconds from now, 0 or more; got {timeout!r}",
                                       field="timeout")
            deadline = deadline_after(seconds)
        want = frozenset(ObjectState(s) for s in states)
        if not want:
            raise errors.SpecError("states: name at least one state to wait for",
                                   field="states")
        label = ", ".join(sorted(want))
        async with within(deadline, f"waiting for {ref.id} to be {label}"):
            return await observe.wait(self._kube, self._mode, ref, want,
                                      shared=self._informers)

    # --- hold and release -----------------------------------------------------------------
    async def hold(self, ref: ObjectRef | str, meta: HoldMeta) -> None:
        """Hold the job: end its execution and keep it from being admitted until released."""
        ref = self._ref(ref)
        hold.validate_hold(meta)
        async with within(meta.deadline, f"Hold {meta.instance} of {ref.id}"):
            await self._mode.hold(self._kube, ref, meta)

    async def release(self, ref: ObjectRef | str, meta: HoldMeta) -> ReleaseOutcome:
        """Release hold ``meta.instance``; another instance's hold is a HoldError and stays.

        Returns ``ReleaseOutcome.RELEASED`` when this call removed the hold, and
        ``ReleaseOutcome.NOT_HELD`` when the job was not held (nothing changed: a repeated
        Release, or a hold that already ended because it expired).
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

        One LIST per kind, whatever the number of jobs (see :mod:`dispatch_kubeflow.jobs`).
        """
        return await jobs.list_jobs(self._kube, self.settings.namespace, self._mode.listed)

    def watch_jobs(self) -> AsyncIterator[list[JobInfo]]:
        """:meth:`jobs`, then again every time the listing changes (one watch per kind).

        Never ends by itself: stop iterating (or cancel) when done.
        """
        return jobs.watch_jobs(self._kube, self.settings.namespace, self._mode.listed)

    def events(self, job: JobID | str, *, follow: bool = False) -> AsyncIterator[JobEvent]:
        """The Kubernetes Events of the job's objects, oldest first (``async for``).

        With ``follow`` it goes on with every Event recorded later, until the caller stops
        iterating. See :mod:`dispatch_kubeflow.events` for what is included.
        """
        return events.job_events(self._kube, self.settings.namespace, as_job_id(job),
                                 follow=follow)

    # --- stop, find, output ---------------------------------------------------------------
    async def stop_job(self, job: JobID | str, reason: str) -> StopReport:
        """Delete everything of the job and check that it is gone (see :mod:`.stop`)."""
        ns = self.settings.namespace
        return await stop.stop_job(self._kube, ns, as_job_id(job), reason,
                                   kinds=self._mode.kinds, limit=self.settings.timeouts.stop_job,
                                   crowd=self._stops, feeds=self._mode.watched(ns),
                                   limits=self._stop_limits)

    async def find(self, job: JobID | str) -> tuple[ObjectRef, ...]:
        """Every object of the job that exists, orphans included (see :mod:`.find`)."""
        return await find.find_refs(self._kube, self.settings.namespace, as_job_id(job),
                                    self._mode.kinds)

    def output(self, job: JobID | str, rank: int = 0,
               stream: OutputStream = OutputStream.STDOUT, follow: bool = False, *,
               submission: int | None = None) -> Opening[LogStream]:
        """Rank ``rank``'s log of the job's current execution (see :mod:`.output`):
        ``async with backend.output(job) as log:``, or ``await`` it for the open stream."""
        return Opening(lambda: output.output(
            self._kube, self.settings.namespace, as_job_id(job), rank=rank, stream=stream,
            follow=follow, submission=submission))

    # --- helpers --------------------------------------------------------------------------
    @property
    def kube(self) -> KubeAPI:
        """The connection the backend uses (its ``requests`` counter is read by benchmarks)."""
        return self._kube

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
    """The registry's factory: open a Kubeflow backend from ``config.settings``."""
    if config.backend != NAME:
        raise errors.SettingsError(f"backend: this factory opens {NAME!r}, not "
                                   f"{config.backend!r}", field="backend")
    return await Backend.connect(config.settings)

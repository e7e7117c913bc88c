"""FakeBackend: the Backend's public API over the fake's in-memory cluster.

Every call checks its input with the library's own code (the Backend's reference check and
observe-only refusal, :func:`dispatch_kubeflow.start.validate`,
:func:`dispatch_kubeflow.hold.validate_hold`, :func:`dispatch_kubeflow.waits.within`), so bad
input raises the same typed error, naming the same field; what is judged of the objects is
judged by the library's pure functions (:mod:`.objects`). tests/behaviour/suite.py runs the
same scenarios against this fake and against the real Backend on the local cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any

from dispatch_kubeflow import errors, output, start
from dispatch_kubeflow.backend import Backend, not_checked, select_mode
from dispatch_kubeflow.core import hold as core_hold
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.objects import annotations_of
from dispatch_kubeflow.events import JobEvent, name_pattern
from dispatch_kubeflow.find import KINDS
from dispatch_kubeflow.hold import hold_annotations, validate_hold
from dispatch_kubeflow.jobs import JobInfo, listing
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.model import (
    KIND_CLUSTER_TRAINING_RUNTIME,
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
    RuntimeRef,
    StartRequest,
    StopReport,
    as_job_id,
)
from dispatch_kubeflow.opening import Opening
from dispatch_kubeflow.output import LogStream
from dispatch_kubeflow.settings import Settings
from dispatch_kubeflow.start import what_differs
from dispatch_kubeflow.state import observe
from dispatch_kubeflow.stop import REPORTING_CONTROLLER
from dispatch_kubeflow.testing.cluster import FakeCluster, Shared
from dispatch_kubeflow.testing.logs import FakeLog
from dispatch_kubeflow.testing.objects import FakeJob, notes
from dispatch_kubeflow.waits import wait_window, within
from dispatch_kubeflow.workers import NONE, Workers

SETTINGS: Mapping[str, Any] = {
    "namespace": "default",
    "probeRuntime": {"kind": "ClusterTrainingRuntime", "name": "dispatch-kind"},
    "kueue": {"localQueue": "lq"},
}
"""The settings a FakeBackend made without any use: Kueue mode, namespace ``default``."""


def proven(settings: Settings) -> dict[Capability, CapabilityStatus]:
    """Every capability yes: what the preflight says of a cluster that has them all."""
    return {c: CapabilityStatus(CapabilityValue.YES, CapabilitySource.PROBED,
                                f"FakeBackend ({select_mode(settings).name} mode)")
            for c in Capability}


class FakeBackend(FakeCluster, Backend):
    """A Backend with no cluster: the jobs live in memory, and the test drives what Kueue,
    the admission controller, JobSet and the pods do (`dispatch_kubeflow.testing.cluster`).

    ``settings`` are parsed as the real Backend parses them (a SettingsError for bad ones;
    none given: [SETTINGS][dispatch_kubeflow.testing.SETTINGS]); a ``kueue`` section chooses
    Kueue mode, as it does for the real one. ``observe_only`` gives what
    ``Backend.connect(..., preflight=False)`` gives (every capability unknown: start, open
    and release refused), ``capabilities`` any other preflight result. ``auto_admit=False``
    leaves an open job ``queued`` until [admit][dispatch_kubeflow.testing.FakeBackend.admit];
    ``grace`` is how long a deleted pod takes to go; ``max_restarts`` the JobSet's;
    ``runtimes``, when given, the only runtimes that exist (Start of another is the real
    SpecError).

    Use it as ``async with FakeBackend() as backend:``, or ``await FakeBackend.connect(...)``
    as the real one. It is a Backend (``isinstance`` and type checkers agree), so a
    service's code that takes a Backend takes it; it has no ``kube`` (UnsupportedError).
    Its calls take the same arguments and raise the same errors as
    [Backend][dispatch_kubeflow.Backend]'s (start, open, hold, release and find as
    documented there); the controls below play the cluster's part.

    Args:
        settings: The settings section, as [Backend.connect][dispatch_kubeflow.Backend.connect]
            takes it; None: [SETTINGS][dispatch_kubeflow.testing.SETTINGS].
        observe_only: Whether every capability is unknown (start, open, release refused).
        capabilities: The preflight's result to report (None: every capability yes).
        auto_admit: Whether Kueue admits an open job at once (False: at
            [admit][dispatch_kubeflow.testing.FakeBackend.admit]).
        grace: Seconds a deleted pod takes to go (0: at once).
        max_restarts: The JobSet's restarts before a lost pod fails the job.
        runtimes: The only runtimes that exist (None: any).

    Raises:
        SettingsError: The settings are invalid.
    """

    def __init__(self, settings: Settings | bytes | str | Mapping[str, Any] | None = None, *,
                 observe_only: bool = False,
                 capabilities: Mapping[Capability, CapabilityStatus] | None = None,
                 auto_admit: bool = True, grace: float = 0.0, max_restarts: int = 3,
                 runtimes: Iterable[RuntimeRef] | None = None,
                 _shared: Shared | None = None) -> None:
        self.settings = Settings.parse(SETTINGS if settings is None else settings)
        self._mode = select_mode(self.settings)
        self._kueue = self._mode.name == "kueue"
        caps = capabilities if capabilities is not None else \
            not_checked() if observe_only else proven(self.settings)
        self._caps = MappingProxyType(dict(caps))
        self._auto_admit = auto_admit
        self._grace = grace
        self._max_restarts = max_restarts
        self._runtimes = None if runtimes is None else {(r.kind, r.runtime) for r in runtimes}
        self._closed = False
        self._start_cluster(_shared)

    # --- opening and closing --------------------------------------------------------------
    @classmethod
    def connect(cls, settings: Settings | bytes | str | Mapping[str, Any], *,  # type: ignore[override]
                kube: KubeAPI | None = None, preflight: bool = True,
                workers: Mapping[str, KubeAPI] | None = None) -> Opening[FakeBackend]:
        """As [Backend.connect][dispatch_kubeflow.Backend.connect]: ``preflight=False`` makes
        it observe-only; ``kube`` is not used (there is no cluster).

        Args:
            settings: The settings section.
            kube: Not used.
            workers: Not used.
            preflight: False: observe-only, as the real one without its preflight.

        Returns:
            The opening of the fake: ``await`` it, or ``async with`` it.

        Raises:
            SettingsError: When awaited or entered: the settings are invalid.
        """
        async def opened() -> FakeBackend:
            return cls(settings, observe_only=not preflight)
        return Opening(opened)

    async def close(self) -> None:
        """Stop the fake controllers (raising what one of them failed with: a bug).

        Raises:
            Exception: What a fake controller failed with (a bug of the fake).
        """
        if not self._closed:
            self._closed = True
            if self._owner:
                await self._stop_tasks()

    async def __aenter__(self) -> FakeBackend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def another(self, *, observe_only: bool = False) -> FakeBackend:
        """A second backend of the same fake cluster and settings (as another process of the
        service would open): it sees and changes the same jobs. Only the first one's close
        stops the fake controllers.

        Args:
            observe_only: Whether the second one is observe-only.

        Returns:
            The second backend.
        """
        return FakeBackend(self.settings, observe_only=observe_only,
                           capabilities=None if observe_only else self._caps,
                           auto_admit=self._auto_admit, grace=self._grace,
                           max_restarts=self._max_restarts,
                           runtimes=None if self._runtimes is None else
                           [RuntimeRef(k, n) for k, n in self._runtimes], _shared=self._shared)

    @property
    def kube(self) -> KubeAPI:
        """A FakeBackend has no connection: UnsupportedError.

        Raises:
            UnsupportedError: Always.
        """
        raise errors.UnsupportedError("FakeBackend has no connection to a cluster")

    @property
    def workers(self) -> Workers:
        """A FakeBackend has no worker clusters: an empty mapping."""
        return NONE

    # --- start, open, inspect -------------------------------------------------------------
    async def start(self, req: StartRequest) -> ObjectRef:
        valid = start.validate(req)  # bad input is a SpecError even when observe-only
        self._refuse_if_observe_only("Start")
        ns, name = self.settings.namespace, valid.name
        job = self._jobs.get(name)
        if job is not None:
            if annotations_of(job.trainjob).get(names.SPEC_HASH) != valid.digest:
                raise errors.ConflictError(
                    f"TrainJob {ns}/{name} exists for another request "
                    f"({what_differs(job.trainjob, valid.doc)}); the same job and submission "
                    "can be started only with the same request")
            return job.ref
        runtime = valid.runtime
        if self._runtimes is not None and (runtime.kind, runtime.runtime) not in self._runtimes:
            where = "" if runtime.kind == KIND_CLUSTER_TRAINING_RUNTIME else f" in {ns}"
            raise errors.SpecError(
                f"spec.extensions.RuntimeRef: {runtime.kind} {runtime.runtime}{where} not found",
                field="spec.extensions.RuntimeRef")
        job = FakeJob.made(valid, start.trainjob_body(valid, self.settings, self._mode),
                           self._kueue)
        self._jobs[name] = job
        if job.workload is not None:
            self.record_event(self._workload_ref(job), "CreatedWorkload",
                              f"Created Workload: {ns}/{job.workload['metadata']['name']}",
                              reporter="kueue-admission")
        self._notify()
        return job.ref

    async def open(self, ref: ObjectRef | str) -> None:
        ref = self._ref(ref)
        self._refuse_if_observe_only("Open")
        job = self._job(ref)
        if self._kueue:
            ann = notes(job.trainjob)
            if names.GATE not in (ann.get(names.ADMISSION_GATED_BY) or ""):
                return
            rest = [g.strip() for g in ann[names.ADMISSION_GATED_BY].split(",")
                    if g.strip() != names.GATE]
            if rest:
                ann[names.ADMISSION_GATED_BY] = ",".join(rest)
            else:
                del ann[names.ADMISSION_GATED_BY]
                assert job.workload is not None
                if job.workload["spec"].get("active") is not False:
                    self._queue(job)
        else:
            held = self._held(job)
            if held:
                raise errors.HoldError(
                    f"TrainJob {ref.id} is held (instance {held}): in plain mode the start "
                    "gate and the hold are both spec.suspend, so open it after Release")
            if job.admissions == 0:
                await self._admit_plain(job)
        self._notify()

    async def inspect(self, ref: ObjectRef | str) -> Observation:
        """The job's state, by the library's own table (`dispatch_kubeflow.state.observe`).

        Args:
            ref: The job's reference, or its ``id``.

        Returns:
            The job's observation (``gone`` when it does not exist).

        Raises:
            SpecError: ``ref`` is malformed or not in the backend's namespace.
        """
        ref = self._ref(ref)
        job = self._jobs.get(ref.name)
        return job.observe() if job is not None else observe(None, None, [])

    async def wait(self, ref: ObjectRef | str, *states: ObjectState,
                   deadline: datetime | None = None,
                   timeout: float | timedelta | None = None) -> Observation:
        """As [Backend.wait][dispatch_kubeflow.Backend.wait]; in plain mode an expired hold is
        released here too.

        Args:
            ref: The job's reference, or its ``id``.
            *states: The states to wait for (at least one).
            deadline: When to give up: a timezone-aware time.
            timeout: When to give up: seconds from now, or a timedelta.

        Returns:
            The first observation of the job in one of ``states``.

        Raises:
            SpecError: As [Backend.wait][dispatch_kubeflow.Backend.wait]'s.
            DeadlineExceeded: The deadline passed first.
            NotFound: The job does not exist and ``gone`` is not among ``states``.
        """
        ref = self._ref(ref)
        want, deadline = wait_window(states, deadline, timeout)
        label = ", ".join(sorted(want))
        async with within(deadline, f"waiting for {ref.id} to be {label}"):
            return await self._wait(ref, want)

    async def _wait(self, ref: ObjectRef, want: frozenset[ObjectState]) -> Observation:
        uid = ref.uid
        if not uid:
            job = self._jobs.get(ref.name)
            if job is None:
                obs = observe(None, None, [])
                if obs.state in want:
                    return obs
                raise errors.NotFound(f"TrainJob {ref.id} not found")
            uid = job.uid
        while True:
            changed = self._changed
            job = self._jobs.get(ref.name)
            if job is not None and job.uid != uid:
                job = None  # a newer TrainJob of the same name is not this job
            obs = job.observe() if job is not None else observe(None, None, [])
            if obs.state in want:
                return obs
            if job is not None and not self._kueue and obs.state is ObjectState.HELD \
                    and obs.hold_until is not None:
                left = (obs.hold_until - datetime.now(UTC)).total_seconds()
                if left <= 0:
                    await self._release_plain(job, None)
                    continue
                with contextlib.suppress(TimeoutError):  # the hold's expiry, not a deadline
                    await asyncio.wait_for(changed.wait(), left)
                continue
            await changed.wait()

    # --- hold and release -----------------------------------------------------------------
    async def hold(self, ref: ObjectRef | str, meta: HoldMeta) -> None:
        ref = self._ref(ref)
        validate_hold(meta)
        async with within(meta.deadline, f"Hold {meta.instance} of {ref.id}"):
            job = self._job(ref)
            held = self._held(job)
            if held and held != meta.instance:
                what = f"Workload {ref.namespace}/{(job.workload or {})['metadata']['name']}" \
                    if self._kueue else f"TrainJob {ref.id}"
                raise errors.HoldError((f"TrainJob {ref.id}: " if self._kueue else "")
                                       + f"{what} is already held as instance {held}; "
                                       "release that first")
            if held == meta.instance:
                return
            ann = hold_annotations(meta)
            notes(job.trainjob).update(ann)
            finished = self._finished(job)
            if job.workload is not None:
                notes(job.workload).update(ann)
                job.workload["spec"]["active"] = False
                if not finished:
                    self._evict(job, "Deactivated")
                    if meta.until is not None:
                        self._expire(job, meta.instance, meta.until)
            else:
                job.trainjob["spec"]["suspend"] = True
            if not finished:
                self._terminate(job)
            self._notify()

    async def release(self, ref: ObjectRef | str, meta: HoldMeta) -> ReleaseOutcome:
        ref = self._ref(ref)
        validate_hold(meta)
        self._refuse_if_observe_only("Release")
        async with within(meta.deadline, f"Release {meta.instance} of {ref.id}"):
            job = self._job(ref)
            for kind, obj in (("TrainJob", job.trainjob), ("Workload", job.workload)):
                held = core_hold.instance(obj)
                if held and held != meta.instance:
                    name = (obj or {}).get("metadata", {}).get("name")
                    raise errors.HoldError(
                        (f"TrainJob {ref.id}: " if self._kueue else "")
                        + f"{kind} {ref.namespace}/{name} is held as instance {held}, "
                        f"not {meta.instance}; the hold stays")
            if not self._held(job):
                return ReleaseOutcome.NOT_HELD
            if self._kueue:
                self._release_kueue(job)
            else:
                await self._release_plain(job, meta.instance)
            self._notify()
        return ReleaseOutcome.RELEASED

    async def _release_plain(self, job: FakeJob, instance: int | None) -> None:
        """Plain mode: a job opened before is admitted again once its pods are gone (A + 1);
        one never opened keeps its start gate and only loses the hold."""
        if job.admissions > 0:
            await self._until(lambda: not job.alive())
            if instance is not None and self._held(job) != instance:
                return
            self._clear_hold(job)
            await self._admit_plain(job)
        else:
            self._clear_hold(job)
        self._notify()

    # --- listing and events ---------------------------------------------------------------
    async def jobs(self) -> list[JobInfo]:
        """Every job of the namespace, by the library's own listing
        (`dispatch_kubeflow.jobs.listing`).

        Returns:
            One entry per submission, sorted by job id, then submission.
        """
        jobs = list(self._jobs.values())
        return listing([j.trainjob for j in jobs],
                       [j.workload for j in jobs if j.workload is not None],
                       [p for j in jobs for p in j.pods.values()])

    def watch_jobs(self) -> AsyncIterator[list[JobInfo]]:
        return self._watch_jobs()

    async def _watch_jobs(self) -> AsyncIterator[list[JobInfo]]:
        last: list[JobInfo] | None = None
        while True:
            changed = self._changed
            now = await self.jobs()
            if now != last:
                last = now
                yield now
            await changed.wait()

    def events(self, job: JobID | str, *, follow: bool = False) -> AsyncIterator[JobEvent]:
        """The Events the fake recorded about the job's objects (its controllers' few, and
        [record_event][dispatch_kubeflow.testing.FakeBackend.record_event]'s), oldest first.

        Args:
            job: The job id, or its text.
            follow: Whether to go on with later Events.

        Returns:
            An async iterator of the Events.

        Raises:
            SpecError: ``job`` is not a job id.
        """
        return self._job_events(as_job_id(job), follow)

    async def _job_events(self, job: JobID, follow: bool) -> AsyncIterator[JobEvent]:
        pattern = name_pattern(job)
        seen = 0
        while True:
            changed = self._changed
            while seen < len(self._events):  # an Event recorded meanwhile counts
                event = self._events[seen]
                seen += 1
                if pattern.search(event.regarding.name):
                    yield event
            if not follow:
                return
            await changed.wait()

    # --- stop, find, output ---------------------------------------------------------------
    async def stop_job(self, job: JobID | str, reason: str) -> StopReport:
        """Delete every submission of the job at once; the report names every object.

        Args:
            job: The job id, or its text.
            reason: Recorded as a ``StopJob`` Event on each TrainJob.

        Returns:
            Every object of the job, stopped.

        Raises:
            SpecError: ``job`` is not a job id.
        """
        job_id = as_job_id(job)
        stopped: list[ObjectRef] = []
        for fake in [j for j in self._jobs.values() if j.valid.request.job == job_id]:
            self.record_event(fake.ref, "StopJob", reason[:1024], reporter=REPORTING_CONTROLLER)
            self._cancel_pending(fake)
            stopped += fake.refs()
            del self._jobs[fake.name]
        self._notify()
        return StopReport(tuple(sorted(stopped, key=lambda r: (r.kind, r.name))))

    async def find(self, job: JobID | str) -> tuple[ObjectRef, ...]:
        job_id = as_job_id(job)
        order = {res.kind: i for i, res in enumerate(KINDS)}
        refs = [r for j in self._jobs.values() if j.valid.request.job == job_id
                for r in j.refs() if self._kueue or r.kind != "Workload"]
        return tuple(sorted(refs, key=lambda r: (order.get(r.kind, len(order)), r.name)))

    def output(self, job: JobID | str, rank: int = 0,
               stream: OutputStream = OutputStream.STDOUT, follow: bool = False, *,
               submission: int | None = None) -> Opening[LogStream]:
        """Rank ``rank``'s log of the job's current execution: what
        [write_output][dispatch_kubeflow.testing.FakeBackend.write_output] wrote to its pod
        (``async with backend.output(job) as log:``, or ``await`` it).

        Args:
            job: The job id, or its text.
            rank: The rank, 0 or more.
            stream: Which stream to read.
            follow: Whether to keep reading until the pod no longer runs.
            submission: Only this submission's pods (None: any).

        Returns:
            The opening of the log.

        Raises:
            SpecError: ``rank`` is not a non-negative integer, or ``job`` not a job id.
            NotFound: When awaited or entered: the job has no pod of that rank.
        """
        async def opened() -> LogStream:
            return self._output(as_job_id(job), rank, stream, follow, submission)
        return Opening(opened)

    def _output(self, job: JobID, rank: int, stream: OutputStream, follow: bool,
                submission: int | None) -> LogStream:
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
            raise errors.SpecError(f"rank: must be a non-negative integer, got {rank!r}",
                                   field="rank")
        stream = OutputStream(stream)
        mine = [j for j in self._jobs.values() if j.valid.request.job == job
                and (submission is None or j.valid.request.submission == submission)]
        pods = [p for j in mine for p in j.pods.values()
                if p["metadata"]["labels"].get(names.COMPLETION_INDEX_LABEL) == str(rank)]
        pod = output.current_pod(pods, {j.valid.request.submission: j.admissions for j in mine})
        ns = self.settings.namespace
        if pod is None:
            raise errors.NotFound(f"job {job}: no pod of rank {rank}"
                                  + (f" in submission {submission}" if submission else "")
                                  + f" in {ns}")
        name = str(pod["metadata"]["name"])
        owner = next(j for j in mine if name in j.pods)
        return LogStream(FakeLog(self, owner, name, stream, follow), pod=name, stream=stream,
                         split=True)


__all__ = ["SETTINGS", "FakeBackend", "proven"]

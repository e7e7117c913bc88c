"""The fake's cluster: what Kueue, the admission controller, JobSet and the kubelet would do to
a job's objects, and the controls a test drives them with.

:class:`FakeCluster` is the half of :class:`~dispatch_kubeflow.testing.FakeBackend` that is
not the public API: the jobs of the namespace (:class:`~.objects.FakeJob`), the changes a wait
watches (one event, replaced at each change), the controllers' tasks, and the controls
(:meth:`~FakeCluster.admit`, :meth:`~FakeCluster.finish`, :meth:`~FakeCluster.fail`,
:meth:`~FakeCluster.lose_pod`, :meth:`~FakeCluster.slow`, :meth:`~FakeCluster.write_output`,
:meth:`~FakeCluster.identity`, :meth:`~FakeCluster.record_event`).

What the controllers do, as on the local cluster (docs/states.md, docs/holds.md):

* Kueue reserves quota for an open, active Workload (at once, or at :meth:`admit` when the
  fake was made with ``auto_admit=False``): the job is ``admitting``.
* The admission controller approves after :meth:`slow`'s seconds and once no pod of the
  previous execution is alive (the readmission gate): it raises A, Kueue admits, the TrainJob
  resumes and one pod per rank is made with the identity ``<job>.<sub>.<attempt>.<A>.<J>``.
* A hold deactivates the Workload; the pods terminate (``grace`` seconds each; 0: at once).
  Release reactivates it, and the next admission raises A again. The controller releases a
  hold whose ``until`` passed (plain mode: a wait on the job does).
* A lost pod restarts the JobSet (J + 1, A unchanged) up to ``max_restarts`` times (the
  local cluster's runtime allows 3), then the job fails.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

from dispatch_kubeflow import errors
from dispatch_kubeflow.core import hold as core_hold
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.identity import ExecutionIdentity, split_attempt_id
from dispatch_kubeflow.events import JobEvent
from dispatch_kubeflow.kube.resources import WORKLOAD
from dispatch_kubeflow.model import ObjectRef, ObjectState, Observation, OutputStream
from dispatch_kubeflow.settings import Settings
from dispatch_kubeflow.testing.objects import FakeJob, Obj, condition, notes

KUEUE = "kueue-admission"
"""The reporter of the Events the fake's Kueue records."""


class Shared:
    """The cluster the backends made by :meth:`FakeBackend.another` share with the first."""

    def __init__(self) -> None:
        self.jobs: dict[str, FakeJob] = {}
        self.events: list[JobEvent] = []
        self.changed = asyncio.Event()
        self.tasks: set[asyncio.Task[Any]] = set()
        self.failures: list[BaseException] = []
        self.pending: dict[str, asyncio.Task[Any]] = {}  # an approval per TrainJob name
        self.slow = 0.0


class FakeCluster:
    """The jobs, the controllers and the controls (see the module docstring)."""

    settings: Settings
    _kueue: bool
    _auto_admit: bool
    _grace: float
    _max_restarts: int

    def _start_cluster(self, shared: Shared | None = None) -> None:
        self._shared = shared or Shared()
        self._owner = shared is None  # the backend whose close stops the controllers
        self._jobs = self._shared.jobs
        self._events = self._shared.events
        self._tasks = self._shared.tasks
        self._failures = self._shared.failures
        self._pending = self._shared.pending

    @property
    def _changed(self) -> asyncio.Event:
        """Set at the next change (then replaced by a fresh one)."""
        return self._shared.changed

    @property
    def _slow(self) -> float:
        return self._shared.slow

    # --- changes and tasks ------------------------------------------------------------------
    def _notify(self) -> None:
        """Wake everything that waits for a change (each takes the next event before it
        judges, so no change is missed)."""
        self._shared.changed.set()
        self._shared.changed = asyncio.Event()

    async def _until(self, done: Callable[[], bool]) -> None:
        while not done():
            await self._changed.wait()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._failures.append(task.exception())  # type: ignore[arg-type]

    async def _stop_tasks(self) -> None:
        """Cancel the controllers' tasks; raise what one of them failed with (a bug)."""
        running = list(self._tasks)
        for t in running:
            t.cancel()
        if running:
            await asyncio.wait(running)
        if self._failures:
            raise self._failures[0]

    def _cancel_pending(self, job: FakeJob) -> None:
        task = self._pending.pop(job.name, None)
        if task is not None:
            task.cancel()

    def _job(self, ref: ObjectRef) -> FakeJob:
        job = self._jobs.get(ref.name)
        if job is None:
            raise errors.NotFound(f"TrainJob {ref.id} not found")
        return job

    def _control(self, ref: ObjectRef | str) -> FakeJob:
        if isinstance(ref, str):
            ref = ObjectRef.parse(ref)
        return self._job(ref)

    # --- Events ---------------------------------------------------------------------------
    def record_event(self, regarding: ObjectRef, reason: str, note: str = "", *,
                     type: str = "Normal", reporter: str = "") -> None:
        """Record an Event about ``regarding`` (an object of a job), as a controller would:
        [events][dispatch_kubeflow.testing.FakeBackend.events] yields it.

        Args:
            regarding: The object it is about (its name must be one of the job's).
            reason: The machine-readable word.
            note: The message for people.
            type: ``Normal`` or ``Warning``.
            reporter: Who recorded it.
        """
        self._events.append(JobEvent(datetime.now(UTC), type, reason, note, regarding,
                                     reporter))
        self._notify()

    def _workload_ref(self, job: FakeJob) -> ObjectRef:
        m = (job.workload or {}).get("metadata") or {}
        return ObjectRef(job.namespace, str(m.get("name", "")), WORKLOAD.kind,
                         WORKLOAD.api_version, str(m.get("uid", "")))

    # --- Kueue and the admission controller -------------------------------------------------
    def _queue(self, job: FakeJob) -> None:
        """Kueue: an open, active Workload is queued; with room (``auto_admit``) its quota is
        reserved at once."""
        wl = job.workload
        assert wl is not None
        condition(wl, "QuotaReserved", False, "Pending", "waiting for quota (FakeBackend: "
                  "admit(ref) reserves it)" if not self._auto_admit else "")
        if self._auto_admit:
            self._reserve(job)

    def _reserve(self, job: FakeJob) -> None:
        wl = job.workload
        assert wl is not None
        check = names.ADMISSION_CHECK  # the default name: only Inspect's messages show it
        condition(wl, "QuotaReserved", True, "QuotaReserved", "Quota reserved (FakeBackend)")
        condition(wl, "Evicted", False, "QuotaReserved")
        wl["status"]["admissionChecks"] = [{"name": check, "state": "Pending", "message": ""}]
        self.record_event(self._workload_ref(job), "QuotaReserved", "Quota reserved",
                          reporter=KUEUE)
        self._cancel_pending(job)
        self._pending[job.name] = self._spawn(self._approve(job, self._slow))

    async def _approve(self, job: FakeJob, delay: float) -> None:
        """The admission controller: after ``delay``, once no pod of the previous execution
        is alive, raise A and approve; Kueue admits and the TrainJob resumes."""
        if delay > 0:
            await asyncio.sleep(delay)
        wl = job.workload
        assert wl is not None
        while job.alive():
            wl["status"]["admissionChecks"][0]["message"] = \
                f"waiting for {len(job.alive())} pods of the previous execution to go"
            self._notify()
            await self._until(lambda: not job.alive())
        a = job.admissions + 1
        job.set_admissions(a)
        wl["status"]["admissionChecks"][0].update(state="Ready", message="")
        self.record_event(self._workload_ref(job), "AdmissionCountRaised",
                          f"admission count raised to {a}", reporter=names.CONTROLLER_NAME)
        condition(wl, "Admitted", True, "Admitted", "The workload is admitted")
        job.trainjob["spec"]["suspend"] = False
        job.make_pods()
        self._pending.pop(job.name, None)
        self.record_event(self._workload_ref(job), "Admitted", "Admitted by ClusterQueue",
                          reporter=KUEUE)

    def _evict(self, job: FakeJob, reason: str) -> None:
        """Kueue: the Workload loses its admission; the TrainJob is suspended."""
        self._cancel_pending(job)
        wl = job.workload
        assert wl is not None
        condition(wl, "Evicted", True, reason, f"The workload is {reason.lower()}")
        condition(wl, "QuotaReserved", False, reason)
        condition(wl, "Admitted", False, reason)
        wl["status"]["admissionChecks"] = []
        job.trainjob["spec"]["suspend"] = True

    # --- plain mode: the library admits ---------------------------------------------------
    async def _admit_plain(self, job: FakeJob) -> None:
        """Wait for the old pods to go, raise A, resume (in one patch, as the library does)."""
        await self._until(lambda: not job.alive())
        job.set_admissions(job.admissions + 1)
        job.trainjob["spec"]["suspend"] = False
        job.make_pods()

    # --- pods -------------------------------------------------------------------------------
    def _terminate(self, job: FakeJob, pods: list[Obj] | None = None,
                   then: Callable[[], None] | None = None) -> None:
        """Delete pods: gone after ``grace`` seconds (at once when 0), then ``then``."""
        gone = job.terminate(pods)

        def remove() -> None:
            for name in gone:
                job.pods.pop(name, None)
            if then is not None:
                then()
            self._notify()

        async def later() -> None:
            await asyncio.sleep(self._grace)
            remove()

        if self._grace > 0:
            self._spawn(later())
        else:
            remove()

    def _finished(self, job: FakeJob) -> bool:
        return job.observe().state in (ObjectState.SUCCEEDED, ObjectState.FAILED)

    # --- holds: the Workload's and the TrainJob's record ------------------------------------
    def _held(self, job: FakeJob) -> int:
        holder = core_hold.kueue_holder(job.trainjob, job.workload) if self._kueue \
            else job.trainjob
        return core_hold.instance(holder)

    def _clear_hold(self, job: FakeJob) -> None:
        for obj in (job.trainjob, job.workload):
            if obj is not None:
                for key in names.HOLD_ANNOTATIONS:
                    notes(obj).pop(key, None)

    def _release_kueue(self, job: FakeJob) -> None:
        """Reactivate the Workload; Kueue requeues it unless the job is gated or finished."""
        self._clear_hold(job)
        wl = job.workload
        assert wl is not None
        wl["spec"]["active"] = True
        condition(wl, "Evicted", False, "Reactivated")
        condition(wl, "Requeued", True, "Reactivated")
        if not notes(job.trainjob).get(names.ADMISSION_GATED_BY) \
                and not self._finished(job):
            self._queue(job)

    def _expire(self, job: FakeJob, instance: int, until: datetime) -> None:
        """Kueue mode: the admission controller releases the hold at its ``until``."""
        async def timer() -> None:
            await asyncio.sleep(max(0.0, (until - datetime.now(UTC)).total_seconds()))
            if self._jobs.get(job.name) is job and self._held(job) == instance:
                self._release_kueue(job)
                self._notify()

        self._spawn(timer())

    # --- controls -------------------------------------------------------------------------
    def slow(self, seconds: float) -> None:
        """Make the admission controller take ``seconds`` to approve each admission from now
        on (a job waits that long in ``admitting``); 0 makes it prompt again.

        Args:
            seconds: The delay, 0 or more.

        Raises:
            ValueError: ``seconds`` is negative.
        """
        if seconds < 0:
            raise ValueError(f"slow: seconds must be 0 or more, got {seconds!r}")
        self._shared.slow = float(seconds)

    async def admit(self, ref: ObjectRef | str) -> Observation:
        """Kueue finds quota for the job now, and the controller approves it (after
        [slow][dispatch_kubeflow.testing.FakeBackend.slow]'s seconds and once the previous
        execution's pods are gone); returns the running job's Observation. Needed when the
        fake was made with ``auto_admit=False``; otherwise it waits for the admission already
        under way.

        Args:
            ref: The job's reference, or its ``id``.

        Returns:
            The job's observation, ``running``.

        Raises:
            NotFound: The job does not exist.
            RuntimeError: Plain mode (no Kueue), or the job is neither queued nor admitting.
        """
        job = self._control(ref)
        if not self._kueue:
            raise RuntimeError("admit: plain mode has no Kueue; open (or release) admits")
        obs = job.observe()
        if obs.state is ObjectState.RUNNING:
            return obs
        if obs.state not in (ObjectState.QUEUED, ObjectState.ADMITTING):
            raise RuntimeError(f"admit: {job.ref.id} is {obs.state}, not queued: Kueue admits "
                               "only an open Workload that is active")
        if job.name not in self._pending:
            self._reserve(job)
            self._notify()
        await asyncio.shield(self._pending[job.name])
        return job.observe()

    def finish(self, ref: ObjectRef | str) -> Observation:
        """Every rank exits 0: the pods succeed and the TrainJob is ``Complete``.

        Args:
            ref: The job's reference, or its ``id``.

        Returns:
            The job's observation, ``succeeded``.

        Raises:
            NotFound: The job does not exist.
            RuntimeError: The job is not running with pods alive.
        """
        return self._end(ref, "Succeeded", "Complete", "Completed", "jobset completed")

    def fail(self, ref: ObjectRef | str, reason: str = "FailedJobs",
             message: str = "jobset failed (FakeBackend)") -> Observation:
        """The job fails: its pods fail and the TrainJob is ``Failed`` with ``reason`` and
        ``message`` (the Observation's cause).

        Args:
            ref: The job's reference, or its ``id``.
            reason: The Failed condition's reason.
            message: The Failed condition's message.

        Returns:
            The job's observation, ``failed``.

        Raises:
            NotFound: The job does not exist.
            RuntimeError: The job is not running with pods alive.
        """
        return self._end(ref, "Failed", "Failed", reason, message)

    def _end(self, ref: ObjectRef | str, phase: str, kind: str, reason: str,
             message: str) -> Observation:
        job = self._control(ref)
        obs = job.observe()
        if obs.state is not ObjectState.RUNNING or not job.alive():
            raise RuntimeError(f"{job.ref.id} is {obs.state} with {len(job.alive())} pods "
                               "alive: only a running execution ends")
        self._cancel_pending(job)
        job.end_pods(phase)
        condition(job.trainjob, kind, True, reason, message)
        if job.workload is not None:
            condition(job.workload, "Finished", True, reason, message)
        self._notify()
        return job.observe()

    def lose_pod(self, ref: ObjectRef | str, rank: int = 0) -> None:
        """Rank ``rank``'s pod fails (its node is lost): JobSet restarts every rank with
        J + 1 once the old pods are gone, or, past ``max_restarts``, the job fails.

        Args:
            ref: The job's reference, or its ``id``.
            rank: The rank whose pod is lost.

        Raises:
            NotFound: The job does not exist.
            RuntimeError: The job has no running pod of that rank.
        """
        job = self._control(ref)
        pod = job.rank_pod(rank)
        if pod is None or job.observe().state is not ObjectState.RUNNING:
            raise RuntimeError(f"lose_pod: {job.ref.id} has no running pod of rank {rank}")
        pod["status"]["phase"] = "Failed"
        if job.restarts >= self._max_restarts:
            job.end_pods("Failed")
            condition(job.trainjob, "Failed", True, "FailedJobs",
                      f"jobset failed: maxRestarts {self._max_restarts} reached")
            self._notify()
            return
        job.restarts += 1

        def recreate() -> None:
            if self._jobs.get(job.name) is job and not job.trainjob["spec"].get("suspend") \
                    and not self._finished(job):
                job.make_pods()

        self._terminate(job, [pod, *job.alive()], then=recreate)
        self._notify()

    def write_output(self, ref: ObjectRef | str, rank: int, data: str | bytes,
                     stream: OutputStream = OutputStream.STDOUT) -> None:
        """Rank ``rank``'s running pod writes ``data`` to ``stream`` (STDOUT or STDERR), as
        [output][dispatch_kubeflow.testing.FakeBackend.output] then reads it.

        Args:
            ref: The job's reference, or its ``id``.
            rank: The writing rank.
            data: What it writes (text is encoded as UTF-8).
            stream: STDOUT or STDERR.

        Raises:
            NotFound: The job does not exist.
            RuntimeError: The job has no running pod of that rank.
            ValueError: ``stream`` is ALL.
        """
        job = self._control(ref)
        pod = job.rank_pod(rank)
        if pod is None:
            raise RuntimeError(f"write_output: {job.ref.id} has no running pod of rank {rank}")
        if stream is OutputStream.ALL:
            raise ValueError("write_output: write to STDOUT or STDERR")
        job.logs[pod["metadata"]["name"]].append(
            (stream, data.encode() if isinstance(data, str) else data))
        self._notify()

    def identity(self, ref: ObjectRef | str, rank: int = 0) -> ExecutionIdentity | None:
        """The identity rank ``rank``'s running pod got (its ``DISPATCH_ATTEMPT`` read back
        by the core's rule), or None when no pod of that rank runs.

        Args:
            ref: The job's reference, or its ``id``.
            rank: The rank.

        Returns:
            The pod's execution identity (A, J, epoch, ...), or None.

        Raises:
            NotFound: The job does not exist.
        """
        job = self._control(ref)
        pod = job.rank_pod(rank)
        if pod is None:
            return None
        env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
        job_id, sub, attempt, a, j = split_attempt_id(env[names.ENV_ATTEMPT])
        return ExecutionIdentity(job_id, sub, attempt, a, j)

    def trainjob(self, ref: ObjectRef | str) -> Obj:
        """The TrainJob as the fake holds it (for a test that checks what was recorded).

        Args:
            ref: The job's reference, or its ``id``.

        Returns:
            The TrainJob object (the fake's own: do not change it).

        Raises:
            NotFound: The job does not exist.
        """
        return self._control(ref).trainjob


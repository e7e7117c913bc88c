"""The behaviour a service sees, written once, run against the fake and the real Backend.

Each scenario takes a :class:`World`: a backend and what only the world can do (make a
request whose job succeeds, fails or runs until stopped; let the cluster admit, finish or
fail a job; read the identity rank 0 got). tests/unit/test_fake_backend.py runs every
scenario against :class:`dispatch_kubeflow.testing.FakeBackend`, whose world drives the
fake's controls; tests/cluster/test_behaviour.py runs them against the real Backend on the
local cluster, whose world waits for the cluster (a busybox command that prints its identity
and exits 0 after a few seconds, exits 1, or sleeps until stopped). So the fake cannot drift
from the library without one of the two failing.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol

import pytest

from dispatch_kubeflow import (
    Actor,
    ActorKind,
    Backend,
    CallMeta,
    ConflictError,
    DeadlineExceeded,
    DispatchError,
    HoldError,
    HoldMeta,
    Image,
    JobID,
    JobSpec,
    NotFound,
    ObjectRef,
    ObjectState,
    Observation,
    ObserveOnlyError,
    ReleaseOutcome,
    RuntimeRef,
    SpecError,
    StartRequest,
)
from dispatch_kubeflow.core.identity import ExecutionIdentity

End = Literal["succeed", "fail", "run"]
"""How a request's job ends: exits 0, exits 1, or runs until it is stopped."""

_ENV = "env | grep '^DISPATCH_' | sort; "
COMMANDS: dict[End, str] = {
    "succeed": _ENV + "echo ready; sleep 10; exit 0",
    "fail": _ENV + "sleep 2; exit 1",
    "run": _ENV + "echo ready; trap 'exit 143' TERM; while :; do sleep 1; done",
}
"""The busybox command of each end (both worlds use them; the fake does not run them)."""
IMAGE = "localhost/dispatch-busybox:kind"
RUNTIME = RuntimeRef("ClusterTrainingRuntime", "dispatch-kind")
"""The local cluster's image and runtime (tests/cluster/helpers.py's IMAGE)."""
MISSING_RUNTIME = RuntimeRef("ClusterTrainingRuntime", "no-such-runtime")
"""A runtime no cluster of the tests has."""


def spec(end: End, nodes: int = 1) -> JobSpec:
    """The spec whose job ends as ``end`` says, on the local cluster's image and runtime."""
    return JobSpec(["/bin/sh", "-c", COMMANDS[end]], nodes,
                   [Image(IMAGE, "IfNotPresent"), RUNTIME])


class World(Protocol):
    """A backend and what only its world can do (see the module docstring)."""

    @property
    def backend(self) -> Backend: ...

    @property
    def patience(self) -> float:
        """Seconds a state may take to come."""
        ...

    @property
    def kueue(self) -> bool: ...

    @property
    def missing_runtime(self) -> RuntimeRef:
        """A runtime that does not exist."""
        ...

    def spec(self, end: End, nodes: int = 1) -> JobSpec:
        """A spec whose job ends as ``end`` says (it prints its DISPATCH_* variables)."""
        ...

    async def admitted(self, ref: ObjectRef) -> Observation:
        """The open job admitted and its pods running: the running Observation."""
        ...

    async def finished(self, ref: ObjectRef) -> None:
        """Let a running job of a ``succeed`` spec end (the fake: every rank exits 0)."""
        ...

    async def failed(self, ref: ObjectRef) -> None:
        """Let a running job of a ``fail`` spec fail."""
        ...

    async def identity(self, ref: ObjectRef, job: JobID) -> ExecutionIdentity:
        """The identity rank 0 of the current execution got."""
        ...

    def observer(self) -> AbstractAsyncContextManager[Backend]:
        """Another backend of the same namespace, opened observe-only (no preflight)."""
        ...


Scenario = Callable[[World], Awaitable[None]]
SCENARIOS: dict[str, Scenario] = {}


def scenario(fn: Scenario) -> Scenario:
    SCENARIOS[fn.__name__] = fn
    return fn


def request(world: World, end: End = "run", *, job: JobID | None = None,
            nodes: int = 1) -> StartRequest:
    return StartRequest(job or JobID.new(), 1, 1, world.spec(end, nodes))


def hold_meta(instance: int, seconds: float = 60) -> HoldMeta:
    now = datetime.now(UTC)
    return HoldMeta(instance, Actor(ActorKind.SERVICE, "behaviour"),
                    CallMeta(now + timedelta(seconds=seconds)),
                    until=now + timedelta(hours=1), reason="the behaviour suite's hold")


@contextlib.asynccontextmanager
async def started(world: World, req: StartRequest) -> AsyncIterator[ObjectRef]:
    """The request started; its job stopped at the end, whatever happened."""
    try:
        yield await world.backend.start(req)
    finally:
        report = await world.backend.stop_job(req.job, "the behaviour scenario is over")
        assert report.complete, report


# --- the scenarios ---------------------------------------------------------------------------


@scenario
async def start_open_run_succeed(world: World) -> None:
    b, req = world.backend, request(world, "succeed", nodes=2)
    async with started(world, req) as ref:
        assert ref.id == f"{b.settings.namespace}/dj-{req.job.lower()}-s1"
        obs = await b.inspect(ref)
        assert (obs.state, obs.admissions, obs.pods, obs.cause.detail) == \
            (ObjectState.GATED, 0, 0, "")
        assert await b.start(req) == ref  # idempotent
        await b.open(ref)
        await b.open(ref)  # harmless twice
        obs = await world.admitted(ref)
        assert (obs.state, obs.admissions, obs.hold_instance) == (ObjectState.RUNNING, 1, 0)
        ident = await world.identity(ref, req.job)
        assert ident == ExecutionIdentity(str(req.job), 1, 1, 1, 0)
        assert ident.attempt_id == f"{req.job}.1.1.1.0"
        assert ident.epoch == 1000001
        await world.finished(ref)
        obs = await b.wait(ref, ObjectState.SUCCEEDED, ObjectState.FAILED,
                           timeout=world.patience)
        assert obs.state is ObjectState.SUCCEEDED, obs
        assert obs.pods_running == 0


@scenario
async def a_failing_job_fails(world: World) -> None:
    b, req = world.backend, request(world, "fail")
    async with started(world, req) as ref:
        await b.open(ref)
        await world.failed(ref)
        obs = await b.wait(ref, ObjectState.SUCCEEDED, ObjectState.FAILED,
                           timeout=world.patience)
        assert obs.state is ObjectState.FAILED, obs
        assert (await b.inspect(ref)).state is ObjectState.FAILED


@scenario
async def hold_and_release_readmit_with_a_higher_identity(world: World) -> None:
    b, req = world.backend, request(world, "run")
    async with started(world, req) as ref:
        await b.open(ref)
        await world.admitted(ref)
        assert (await world.identity(ref, req.job)).admissions == 1
        await b.hold(ref, hold_meta(1))
        await b.hold(ref, hold_meta(1))  # the same instance again: harmless
        with pytest.raises(HoldError):
            await b.hold(ref, hold_meta(2))
        obs = await b.wait(ref, ObjectState.HELD, timeout=world.patience)
        assert (obs.hold_instance, obs.pods, obs.cause.reason) == (1, 0, "Held"), obs
        assert obs.hold_until is not None
        with pytest.raises(HoldError):
            await b.release(ref, hold_meta(2))
        assert (await b.inspect(ref)).state is ObjectState.HELD  # the hold stays
        assert await b.release(ref, hold_meta(1)) is ReleaseOutcome.RELEASED
        assert await b.release(ref, hold_meta(1)) is ReleaseOutcome.NOT_HELD
        obs = await world.admitted(ref)
        assert (obs.admissions, obs.hold_instance) == (2, 0), obs
        ident = await world.identity(ref, req.job)
        assert ident == ExecutionIdentity(str(req.job), 1, 1, 2, 0), ident
        assert ident.attempt_id.endswith(".1.1.2.0")
        assert ident.epoch == 1000002


@scenario
async def a_hold_before_open_keeps_the_job_closed(world: World) -> None:
    b, req = world.backend, request(world, "run")
    async with started(world, req) as ref:
        await b.hold(ref, hold_meta(3))
        obs = await b.wait(ref, ObjectState.HELD, timeout=world.patience)
        assert (obs.hold_instance, obs.admissions) == (3, 0)
        assert await b.release(ref, hold_meta(3)) is ReleaseOutcome.RELEASED
        obs = await b.wait(ref, ObjectState.GATED, timeout=world.patience)
        assert obs.admissions == 0


def _bad_inputs(world: World, ref: ObjectRef, job: JobID
                ) -> list[tuple[str, Callable[[], Awaitable[Any]], type[DispatchError], str]]:
    """(what, the call, the error, its field) for one started, unopened job."""
    b = world.backend
    good = world.spec("run")
    ns = b.settings.namespace
    other = ObjectRef("elsewhere", ref.name)
    unknown = ObjectRef(ns, f"dj-{JobID.new().lower()}-s1")
    naive = datetime.now() + timedelta(minutes=1)
    no_image = JobSpec(good.command, 1, [e for e in good.extensions if not isinstance(e, Image)])
    elsewhere = JobSpec(good.command, 1, [e for e in good.extensions
                                          if not isinstance(e, RuntimeRef)]
                        + [world.missing_runtime])
    return [
        ("start: no Image", lambda: b.start(StartRequest(JobID.new(), 1, 1, no_image)),
         SpecError, "spec.extensions.Image"),
        ("start: attempt 0", lambda: b.start(StartRequest(JobID.new(), 1, 0, good)),
         SpecError, "attempt"),
        ("start: attempt 101", lambda: b.start(StartRequest(JobID.new(), 1, 101, good)),
         SpecError, "attempt"),
        ("start: no nodes", lambda: b.start(StartRequest(
            JobID.new(), 1, 1, dataclasses.replace(good, nodes=0))), SpecError, "spec.nodes"),
        ("start: empty command", lambda: b.start(StartRequest(
            JobID.new(), 1, 1, JobSpec([], 1, good.extensions))), SpecError, "spec.command"),
        ("start: no such runtime", lambda: b.start(StartRequest(JobID.new(), 1, 1, elsewhere)),
         SpecError, "spec.extensions.RuntimeRef"),
        ("start: another request", lambda: b.start(StartRequest(job, 1, 1, world.spec("fail"))),
         ConflictError, ""),
        ("inspect: another namespace", lambda: b.inspect(other), SpecError, "ref"),
        ("inspect: not a ref", lambda: b.inspect("no-slash"), SpecError, "ref"),
        ("open: unknown job", lambda: b.open(unknown), NotFound, ""),
        ("wait: deadline and timeout", lambda: b.wait(
            ref, ObjectState.RUNNING, deadline=datetime.now(UTC), timeout=1),
         SpecError, "timeout"),
        ("wait: negative timeout", lambda: b.wait(ref, ObjectState.RUNNING, timeout=-1),
         SpecError, "timeout"),
        ("wait: no state", lambda: b.wait(ref, timeout=1), SpecError, "states"),
        ("wait: naive deadline", lambda: b.wait(ref, ObjectState.RUNNING, deadline=naive),
         SpecError, "deadline"),
        ("wait: unknown job", lambda: b.wait(unknown, ObjectState.RUNNING, timeout=5),
         NotFound, ""),
        ("hold: instance 0", lambda: b.hold(ref, dataclasses.replace(hold_meta(1), instance=0)),
         SpecError, "hold.instance"),
        ("hold: nobody", lambda: b.hold(ref, dataclasses.replace(
            hold_meta(1), by=Actor(ActorKind.HUMAN, ""))), SpecError, "hold.by.id"),
        ("hold: unknown job", lambda: b.hold(unknown, hold_meta(1)), NotFound, ""),
        ("release: unknown job", lambda: b.release(unknown, hold_meta(1)), NotFound, ""),
        ("output: negative rank", lambda: _read(b, job, rank=-1), SpecError, "rank"),
        ("output: no pod yet", lambda: _read(b, job), NotFound, ""),
        ("stop_job: not a job id", lambda: b.stop_job("not-a-job", "x"), SpecError, "job"),
        ("find: not a job id", lambda: b.find("not-a-job"), SpecError, "job"),
    ]


async def _read(b: Backend, job: JobID, rank: int = 0) -> bytes:
    async with b.output(job, rank) as log:
        return await log.read()


@scenario
async def bad_inputs_raise_the_same_typed_errors(world: World) -> None:
    b, req = world.backend, request(world, "run")
    async with started(world, req) as ref:
        for what, call, error, field in _bad_inputs(world, ref, req.job):
            with pytest.raises(error) as caught:
                await call()
            assert type(caught.value) is error, (what, caught.value)
            if field:
                assert getattr(caught.value, "field", None) == field, (what, caught.value)
        with pytest.raises(SpecError):
            b.events("not-a-job")
        assert await b.release(ref, hold_meta(1)) is ReleaseOutcome.NOT_HELD
        assert (await b.inspect(ref)).state is ObjectState.GATED  # nothing changed


@scenario
async def stop_job_leaves_nothing(world: World) -> None:
    b, req = world.backend, request(world, "run", nodes=2)
    ref = await b.start(req)
    try:
        await b.open(ref)
        await world.admitted(ref)
        found = await b.find(req.job)
        assert ref.id in {f.id for f in found if f.kind == "TrainJob"}
        assert {"TrainJob", "TrainingRuntime", "Pod"} <= {f.kind for f in found}
    finally:
        report = await b.stop_job(req.job, "the scenario stops it")
    assert report.complete, report
    assert ref.id in {r.id for r in report.stopped if r.kind == "TrainJob"}, report
    obs = await b.inspect(ref)
    assert (obs.state, obs.cause.reason, obs.pods) == (ObjectState.GONE, "NotFound", 0), obs
    assert (await b.wait(ref, ObjectState.GONE, timeout=world.patience)).state \
        is ObjectState.GONE
    assert await b.find(req.job) == ()
    assert (await b.stop_job(req.job, "again")).stopped == ()
    assert req.job not in {j.job for j in await b.jobs()}


@scenario
async def jobs_lists_the_job(world: World) -> None:
    b, req = world.backend, request(world, "run")
    async with started(world, req) as ref:
        (info,) = [j for j in await b.jobs() if j.job == req.job]
        assert (info.submission, info.attempt, info.ref.id, info.ref.uid) == \
            (1, 1, ref.id, ref.uid)
        assert info.observation == await b.inspect(ref)
        assert info.created is not None
        watch = b.watch_jobs()
        try:
            first = await anext(watch)
            assert req.job in {j.job for j in first}
        finally:
            await watch.aclose()  # type: ignore[attr-defined]


@scenario
async def wait_past_its_timeout_raises_deadline_exceeded(world: World) -> None:
    b, req = world.backend, request(world, "run")
    async with started(world, req) as ref:
        with pytest.raises(DeadlineExceeded) as caught:
            await b.wait(ref, ObjectState.RUNNING, timeout=0.5)
        assert f"waiting for {ref.id} to be running" in str(caught.value)
        with pytest.raises(DeadlineExceeded):
            await b.wait(ref, ObjectState.RUNNING, deadline=datetime.now(UTC) - timedelta(1))


@scenario
async def inspect_of_an_unknown_ref_is_gone(world: World) -> None:
    b = world.backend
    ref = ObjectRef(b.settings.namespace, f"dj-{JobID.new().lower()}-s1")
    obs = await b.inspect(ref)
    assert obs == Observation(ObjectState.GONE, obs.cause)
    assert obs.cause.reason == "NotFound"
    assert (await b.wait(ref, ObjectState.GONE, timeout=5)).state is ObjectState.GONE
    assert await b.inspect(ref.id) == obs


@scenario
async def an_observe_only_backend_refuses_start_open_and_release(world: World) -> None:
    req = request(world, "run")
    async with started(world, req) as ref, world.observer() as looker:
        assert looker.observe_only
        assert looker.observe_only_reasons
        with pytest.raises(ObserveOnlyError) as caught:
            await looker.start(request(world, "run"))
        assert list(caught.value.reasons) == looker.observe_only_reasons
        with pytest.raises(SpecError):  # bad input is a SpecError even when observe-only
            await looker.start(StartRequest(JobID.new(), 1, 0, world.spec("run")))
        with pytest.raises(ObserveOnlyError):
            await looker.open(ref)
        with pytest.raises(ObserveOnlyError):
            await looker.release(ref, hold_meta(1))
        assert (await looker.inspect(ref)).state is ObjectState.GATED
        assert req.job in {j.job for j in await looker.jobs()}

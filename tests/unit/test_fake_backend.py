"""FakeBackend (dispatch_kubeflow.testing): the behaviour suite (tests/behaviour/suite.py) run
against it in three worlds (Kueue mode admitting by itself, Kueue mode admitted by the test
with a slow controller and pods that take time to go, plain mode), its API compared with the
Backend's, and its controls."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import dispatch_kubeflow as dk
from dispatch_kubeflow.core.identity import ExecutionIdentity
from dispatch_kubeflow.testing import FakeBackend, register_fake
from tests.behaviour import suite
from tests.conftest import REPO, load_script

PLAIN = {"namespace": "svc", "probeRuntime": {"name": "dispatch-kind"}}
KUEUE = {**PLAIN, "kueue": {"localQueue": "lq"}}


@dataclass
class FakeWorld:
    """The suite's world over a FakeBackend: the cluster's part is the fake's controls."""

    backend: FakeBackend
    kueue: bool
    manual: bool = False
    patience: float = 5.0
    missing_runtime: dk.RuntimeRef = suite.MISSING_RUNTIME

    def spec(self, end: suite.End, nodes: int = 1) -> dk.JobSpec:
        return suite.spec(end, nodes)

    async def admitted(self, ref: dk.ObjectRef) -> dk.Observation:
        if self.manual:
            return await self.backend.admit(ref)
        return await self.backend.wait(ref, dk.ObjectState.RUNNING, timeout=self.patience)

    async def finished(self, ref: dk.ObjectRef) -> None:
        await self.admitted(ref)
        self.backend.finish(ref)

    async def failed(self, ref: dk.ObjectRef) -> None:
        await self.admitted(ref)
        self.backend.fail(ref)

    async def identity(self, ref: dk.ObjectRef, job: dk.JobID) -> ExecutionIdentity:
        ident = self.backend.identity(ref)
        assert ident is not None, f"no pod of rank 0 of {ref.id} runs"
        return ident

    @contextlib.asynccontextmanager
    async def observer(self) -> AsyncIterator[dk.Backend]:
        async with self.backend.another(observe_only=True) as looker:
            yield looker


WORLDS = ["kueue", "kueue-manual", "plain"]


@contextlib.asynccontextmanager
async def world_of(kind: str) -> AsyncIterator[FakeWorld]:
    manual = kind == "kueue-manual"
    async with FakeBackend(PLAIN if kind == "plain" else KUEUE, auto_admit=not manual,
                           grace=0.05 if manual else 0.0, runtimes=[suite.RUNTIME]) as fake:
        if manual:
            fake.slow(0.05)
        yield FakeWorld(fake, kueue=kind != "plain", manual=manual)


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", WORLDS)
@pytest.mark.parametrize("name", sorted(suite.SCENARIOS))
async def test_the_behaviour_suite(name: str, kind: str) -> None:
    async with world_of(kind) as world:
        await suite.SCENARIOS[name](world)


# --- the same API ------------------------------------------------------------------------------

PUBLIC = sorted(n for n in dir(dk.Backend) if not n.startswith("_"))
INHERITED = {"capabilities", "observe_only", "observe_only_reasons"}
"""Pure readers of the capabilities the fake holds as the Backend does: inherited as they are."""


def _signature(owner: type, name: str) -> inspect.Signature:
    attr = inspect.getattr_static(owner, name)
    if isinstance(attr, property):
        assert attr.fget is not None
        return inspect.signature(attr.fget)
    return inspect.signature(getattr(owner, name))


@pytest.mark.parametrize("name", [*PUBLIC, "__aenter__", "__aexit__"])
def test_every_public_method_has_the_backends_signature(name: str) -> None:
    real, fake = _signature(dk.Backend, name), _signature(FakeBackend, name)
    assert list(fake.parameters.values()) == list(real.parameters.values()), name
    assert str(fake.return_annotation).replace("FakeBackend", "Backend") == \
        str(real.return_annotation), name
    assert name in vars(FakeBackend) or name in INHERITED, f"{name} would reach the cluster"
    assert isinstance(inspect.getattr_static(FakeBackend, name), property) == \
        isinstance(inspect.getattr_static(dk.Backend, name), property)


def test_the_fake_is_a_backend_with_no_connection() -> None:
    fake = FakeBackend()
    assert isinstance(fake, dk.Backend)
    assert fake.settings.namespace == "default"
    assert not fake.observe_only
    with pytest.raises(dk.UnsupportedError):
        _ = fake.kube


def test_bad_settings_are_the_same_settings_error() -> None:
    with pytest.raises(dk.SettingsError) as caught:
        FakeBackend({"namespace": "Not_A_Label", "probeRuntime": {"name": "x"}})
    assert caught.value.field == "namespace"


@pytest.mark.asyncio
async def test_connect_is_awaited_or_entered_and_preflight_false_is_observe_only() -> None:
    async with FakeBackend.connect(KUEUE) as fake:
        assert not fake.observe_only
    fake = await FakeBackend.connect(KUEUE, preflight=False)
    assert fake.observe_only
    assert (await fake.capabilities())[dk.Capability.HOLD].source is \
        dk.CapabilitySource.NOT_CHECKED
    await fake.close()


@pytest.mark.asyncio
async def test_open_backend_opens_a_registered_fake() -> None:
    opened = register_fake("fake-for-a-test")
    async with dk.open_backend(dk.AdapterConfig("fake-for-a-test", KUEUE)) as backend:
        assert opened == [backend]
        assert backend.settings.namespace == "svc"


# --- the controls --------------------------------------------------------------------------


async def _running(fake: FakeBackend, nodes: int = 2) -> tuple[dk.JobID, dk.ObjectRef]:
    job = dk.JobID.new()
    ref = await fake.start(dk.StartRequest(job, 1, 1, suite.spec("run", nodes)))
    await fake.open(ref)
    await fake.wait(ref, dk.ObjectState.RUNNING, timeout=5)
    return job, ref


@pytest.mark.asyncio
async def test_a_slow_controller_keeps_the_job_admitting() -> None:
    async with FakeBackend(KUEUE) as fake:
        fake.slow(0.3)
        ref = await fake.start(dk.StartRequest(dk.JobID.new(), 1, 1, suite.spec("run")))
        await fake.open(ref)
        obs = await fake.inspect(ref)
        assert (obs.state, obs.cause.reason, obs.admissions) == \
            (dk.ObjectState.ADMITTING, "QuotaReserved", 0)
        with pytest.raises(dk.DeadlineExceeded):
            await fake.wait(ref, dk.ObjectState.RUNNING, timeout=0.1)
        obs = await fake.wait(ref, dk.ObjectState.RUNNING, timeout=2)
        assert obs.admissions == 1


@pytest.mark.asyncio
async def test_without_auto_admit_the_job_stays_queued_until_admitted() -> None:
    async with FakeBackend(KUEUE, auto_admit=False) as fake:
        ref = await fake.start(dk.StartRequest(dk.JobID.new(), 1, 1, suite.spec("run")))
        with pytest.raises(RuntimeError, match="gated"):
            await fake.admit(ref)
        await fake.open(ref)
        assert (await fake.inspect(ref)).state is dk.ObjectState.QUEUED
        obs = await fake.admit(ref)
        assert (obs.state, obs.admissions, obs.pods_running) == (dk.ObjectState.RUNNING, 1, 1)


@pytest.mark.asyncio
async def test_readmission_waits_for_the_old_pods() -> None:
    async with FakeBackend(KUEUE, grace=0.3) as fake:
        _, ref = await _running(fake)
        hold = suite.hold_meta(1)
        await fake.hold(ref, hold)
        obs = await fake.inspect(ref)
        assert (obs.state, obs.pods) == (dk.ObjectState.HOLDING, 2)
        await fake.release(ref, hold)
        await asyncio.sleep(0.05)
        obs = await fake.inspect(ref)
        assert obs.state is dk.ObjectState.ADMITTING
        assert "waiting for 2 pods of the previous execution to go" in obs.cause.detail
        obs = await fake.wait(ref, dk.ObjectState.RUNNING, timeout=2)
        assert (obs.admissions, obs.pods) == (2, 2)


@pytest.mark.asyncio
async def test_a_lost_pod_restarts_the_jobset_then_fails_it() -> None:
    async with FakeBackend(KUEUE, max_restarts=1) as fake:
        _, ref = await _running(fake)
        fake.lose_pod(ref, 1)
        obs = await fake.wait(ref, dk.ObjectState.RUNNING, timeout=2)
        assert (obs.admissions, obs.restarts) == (1, 1)
        ident = fake.identity(ref, 1)
        assert ident is not None
        assert (ident.attempt_id.rsplit(".", 2)[1:], ident.epoch) == (["1", "1"], 1000002)
        fake.lose_pod(ref, 0)
        obs = await fake.wait(ref, dk.ObjectState.FAILED, timeout=2)
        assert "maxRestarts 1" in obs.cause.detail


@pytest.mark.asyncio
async def test_fail_gives_the_reason_as_the_cause() -> None:
    async with FakeBackend(PLAIN) as fake:
        _, ref = await _running(fake)
        obs = fake.fail(ref, reason="DeadlineExceeded", message="too slow")
        assert (obs.state, obs.cause.reason, obs.cause.detail) == \
            (dk.ObjectState.FAILED, "DeadlineExceeded", "too slow")
        with pytest.raises(RuntimeError):
            fake.finish(ref)


@pytest.mark.asyncio
async def test_output_reads_what_the_pod_wrote_and_follows_it() -> None:
    async with FakeBackend(KUEUE) as fake:
        job, ref = await _running(fake)
        fake.write_output(ref, 0, "out-0\n")
        fake.write_output(ref, 0, "err-0\n", dk.OutputStream.STDERR)
        async with fake.output(job) as log:
            assert await log.read() == b"out-0\n"
            assert log.split
        async with fake.output(job, 0, dk.OutputStream.ALL) as log:
            assert await log.read() == b"out-0\nerr-0\n"
        async with fake.output(job, 0, follow=True) as log:
            chunks = aiter(log)
            assert await anext(chunks) == b"out-0\n"
            fake.write_output(ref, 0, b"out-1\n")
            assert await anext(chunks) == b"out-1\n"
            fake.finish(ref)
            with pytest.raises(StopAsyncIteration):
                await anext(chunks)
        with pytest.raises(dk.NotFound):
            await fake.output(job, 5)


@pytest.mark.asyncio
async def test_events_are_followed() -> None:
    async with FakeBackend(KUEUE) as fake:
        job, ref = await _running(fake)
        reasons = [e.reason async for e in fake.events(job)]
        assert reasons == ["CreatedWorkload", "QuotaReserved", "AdmissionCountRaised",
                           "Admitted"]
        events = fake.events(job, follow=True)
        seen = [(await anext(events)).reason for _ in reasons]
        fake.record_event(ref, "Custom", "a test's note")
        assert (await anext(events)).note == "a test's note"
        assert seen == reasons
        await events.aclose()  # type: ignore[attr-defined]


@pytest.mark.asyncio
async def test_the_controller_releases_an_expired_hold() -> None:
    async with FakeBackend(KUEUE) as fake:
        _, ref = await _running(fake)
        hold = dk.HoldMeta(4, dk.Actor(dk.ActorKind.SYSTEM, "t"),
                           until=datetime.now(UTC) + timedelta(seconds=0.3))
        await fake.hold(ref, hold)
        assert (await fake.inspect(ref)).state is dk.ObjectState.HELD
        obs = await fake.wait(ref, dk.ObjectState.RUNNING, timeout=3)
        assert (obs.admissions, obs.hold_instance) == (2, 0)


@pytest.mark.asyncio
async def test_plain_mode_releases_an_expired_hold_in_a_wait_only() -> None:
    async with FakeBackend(PLAIN) as fake:
        _, ref = await _running(fake)
        hold = dk.HoldMeta(4, dk.Actor(dk.ActorKind.SYSTEM, "t"),
                           until=datetime.now(UTC) + timedelta(seconds=1))
        await fake.hold(ref, hold)
        await asyncio.sleep(1.1)
        assert (await fake.inspect(ref)).state is dk.ObjectState.HELD  # inspect only reads
        obs = await fake.wait(ref, dk.ObjectState.RUNNING, timeout=3)
        assert obs.admissions == 2


@pytest.mark.asyncio
async def test_another_backend_sees_the_same_jobs() -> None:
    async with FakeBackend(KUEUE) as fake:
        job, ref = await _running(fake)
        other = fake.another()
        assert (await other.inspect(ref)).state is dk.ObjectState.RUNNING
        report = await other.stop_job(job, "from the other one")
        await other.close()
        assert report.complete
        assert (await fake.inspect(ref)).state is dk.ObjectState.GONE


def test_controls_refuse_what_the_cluster_would_not_do() -> None:
    async def scenario() -> Any:
        async with FakeBackend(PLAIN) as fake:
            ref = await fake.start(dk.StartRequest(dk.JobID.new(), 1, 1, suite.spec("run")))
            with pytest.raises(RuntimeError, match="plain mode"):
                await fake.admit(ref)
            with pytest.raises(RuntimeError):
                fake.lose_pod(ref, 0)
            with pytest.raises(RuntimeError):
                fake.write_output(ref, 0, "x")
            assert fake.identity(ref) is None
            with pytest.raises(ValueError, match="slow"):
                fake.slow(-1)

    asyncio.run(scenario())


# --- the docs' example (docs/testing.md includes examples/service_test.py) -------------------

EXAMPLE: Any = load_script(REPO / "examples/service_test.py", "service_test_example")


@pytest.mark.asyncio
@pytest.mark.parametrize("name", sorted(n for n in vars(EXAMPLE) if n.startswith("test_")))
async def test_the_docs_example_runs(name: str) -> None:
    await getattr(EXAMPLE, name)()


def test_the_docs_page_shows_the_example() -> None:
    page = (REPO / "docs/testing.md").read_text()
    assert '--8<-- "examples/service_test.py"' in page

"""A service's unit test written with FakeBackend (docs/testing.md shows this file; the unit
suite runs it: tests/unit/test_fake_backend.py)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

import dispatch_kubeflow as dk
from dispatch_kubeflow.testing import FakeBackend

RUN_ON = [dk.Image("localhost/dispatch-busybox:kind"),
          dk.RuntimeRef("ClusterTrainingRuntime", "dispatch-kind")]


# --- the service's code, as it runs against a cluster -------------------------------------
async def run_to_end(backend: dk.Backend, command: str,
                     nodes: int = 2) -> tuple[dk.ObjectState, str]:
    """Run a job to its end: its final state and rank 0's log."""
    job = dk.JobID.new()
    spec = dk.JobSpec(["/bin/sh", "-c", command], nodes=nodes, extensions=RUN_ON)
    ref = await backend.start(dk.StartRequest(job, submission=1, attempt=1, spec=spec))
    try:
        await backend.open(ref)
        await backend.wait(ref, dk.ObjectState.RUNNING)
        async with backend.output(job, rank=0, follow=True) as log:
            text = (await log.read()).decode()  # until rank 0 ends
        obs = await backend.wait(ref, dk.ObjectState.SUCCEEDED, dk.ObjectState.FAILED)
        return obs.state, text
    finally:
        await backend.stop_job(job, "done")


# --- its unit tests: no cluster -----------------------------------------------------------
async def running_job(backend: FakeBackend) -> dk.ObjectRef:
    """The first job the service started, once it runs."""
    async with contextlib.aclosing(backend.watch_jobs()) as listings:  # type: ignore[type-var]
        async for listing in listings:
            for info in listing:
                if info.observation.state is dk.ObjectState.RUNNING:
                    return info.ref
    raise AssertionError("the listing ended")


@pytest.mark.asyncio
async def test_a_job_that_succeeds() -> None:
    async with FakeBackend() as backend:  # Kueue mode: admitted at once
        service = asyncio.create_task(run_to_end(backend, "echo hello"))
        ref = await running_job(backend)
        ident = backend.identity(ref)  # what DISPATCH_ATTEMPT the pods got
        assert ident is not None
        assert ident.attempt_id.endswith(".1.1.1.0")
        backend.write_output(ref, 0, "hello\n")  # what rank 0 prints
        backend.finish(ref)  # every rank exits 0
        assert await service == (dk.ObjectState.SUCCEEDED, "hello\n")
        assert await backend.jobs() == []  # the service stopped its job


@pytest.mark.asyncio
async def test_a_job_that_fails() -> None:
    async with FakeBackend() as backend:
        service = asyncio.create_task(run_to_end(backend, "exit 1"))
        backend.fail(await running_job(backend), reason="FailedJobs")
        state, _ = await service
        assert state is dk.ObjectState.FAILED


@pytest.mark.asyncio
async def test_bad_input_is_the_libraries_typed_error() -> None:
    async with FakeBackend() as backend:
        with pytest.raises(dk.SpecError) as caught:
            await run_to_end(backend, "true", nodes=0)
        assert caught.value.field == "spec.nodes"
        assert await backend.jobs() == []  # nothing was started

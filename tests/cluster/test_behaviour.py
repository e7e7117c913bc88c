"""The behaviour suite (tests/behaviour/suite.py) against the real Backend on the local
cluster, in Kueue mode and in plain mode: the same scenarios tests/unit/test_fake_backend.py
runs against FakeBackend, so the fake cannot drift from the library.

The world here waits for the cluster: the suite's busybox commands print their DISPATCH_*
variables, then exit 0 after 10 s, exit 1 (the runtime's JobSet restarts it up to 3 times
before the TrainJob fails), or run until stopped. Needs the ``backend`` (Kueue mode, with
the admission controller) and ``plain`` fixtures of the adapter's cluster tests.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from dispatch_kubeflow import (
    Backend,
    DispatchError,
    JobID,
    JobSpec,
    ObjectRef,
    ObjectState,
    Observation,
    OutputStream,
    RuntimeRef,
)
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.identity import ExecutionIdentity, split_attempt_id
from tests.behaviour import suite
from tests.cluster.helpers import eventually
from tests.cluster.test_adapter_kueue import backend, queued
from tests.cluster.test_adapter_plain import plain

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio]
__all__ = ["backend", "plain", "queued"]  # fixtures, imported to be used here

PATIENCE = 240.0
"""Seconds a state may take: a failing job runs four times (maxRestarts 3) before it fails."""


@dataclass
class ClusterWorld:
    """The suite's world over a real Backend: the cluster does what the fake's controls do."""

    backend: Backend
    kueue: bool
    patience: float = PATIENCE
    missing_runtime: RuntimeRef = suite.MISSING_RUNTIME

    def spec(self, end: suite.End, nodes: int = 1) -> JobSpec:
        return suite.spec(end, nodes)

    async def admitted(self, ref: ObjectRef) -> Observation:
        await self.backend.wait(ref, ObjectState.RUNNING, timeout=self.patience)

        async def pods_run() -> Observation | None:
            obs = await self.backend.inspect(ref)
            ok = obs.state is ObjectState.RUNNING and 0 < obs.pods_running == obs.pods
            return obs if ok else None

        return await eventually(pods_run, self.patience, f"{ref.id}'s pods running")

    async def finished(self, ref: ObjectRef) -> None:
        return None  # the command exits 0 by itself

    async def failed(self, ref: ObjectRef) -> None:
        return None  # the command exits 1 by itself

    async def identity(self, ref: ObjectRef, job: JobID) -> ExecutionIdentity:
        async def read() -> dict[str, str] | None:
            try:
                async with self.backend.output(job, 0, OutputStream.STDOUT) as log:
                    text = (await log.read()).decode()
            except DispatchError:  # no pod of the new execution yet (a typed answer)
                return None
            env = dict(line.split("=", 1) for line in text.splitlines()
                       if line.startswith("DISPATCH_") and "=" in line)
            return env if names.ENV_EPOCH in env else None

        env = await eventually(read, self.patience, f"rank 0's identity of {ref.id}",
                               interval=1)
        ident = ExecutionIdentity(*split_attempt_id(env[names.ENV_ATTEMPT]))
        assert env[names.ENV_EPOCH] == str(ident.epoch), env
        return ident

    @contextlib.asynccontextmanager
    async def observer(self) -> AsyncIterator[Backend]:
        async with Backend.connect(self.backend.settings, preflight=False) as looker:
            yield looker


# One test per mode, each asking for its own Backend fixture by name: an async fixture cannot
# ask for another from inside the running loop (request.getfixturevalue).
@pytest.mark.parametrize("name", sorted(suite.SCENARIOS))
async def test_the_behaviour_suite_in_kueue_mode(name: str, backend: Backend) -> None:
    await suite.SCENARIOS[name](ClusterWorld(backend, kueue=True))


@pytest.mark.parametrize("name", sorted(suite.SCENARIOS))
async def test_the_behaviour_suite_in_plain_mode(name: str, plain: Backend) -> None:
    await suite.SCENARIOS[name](ClusterWorld(plain, kueue=False))

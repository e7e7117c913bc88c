"""The start gate: Start makes a job that stays closed, and Open lets it run."""

from __future__ import annotations

from dispatch_kubeflow.conformance.failed import CheckFailed
from dispatch_kubeflow.conformance.registry import check
from dispatch_kubeflow.conformance.suite import Suite
from dispatch_kubeflow.conformance.watching import in_state, quiet, read_identity, until
from dispatch_kubeflow.model import JobID, ObjectState, StartRequest


@check("start-gated", "Start returns gated with no pod")
async def start_gated(suite: Suite) -> str:
    """Start returns a ``gated`` job; no pod and no quota come while it stays closed."""
    backend = suite.need_backend()
    suite.job = JobID.new()
    suite.ref = ref = await backend.start(StartRequest(suite.job, 1, 1, suite.spec()))
    obs = await backend.inspect(ref)
    if obs.state is not ObjectState.GATED:
        raise CheckFailed(f"Start returned {ref.id} {obs.state}, not gated "
                          f"({obs.cause.detail})")
    await quiet(suite, suite.o.quiet, ObjectState.GATED)
    return f"{ref.id} gated; no pod and no quota for the {suite.o.quiet:g}s it was watched"


@check("open-running", "Open leads to running")
async def open_running(suite: Suite) -> str:
    """Open leads to ``running``, and rank 0's log shows the first identity (A = 1)."""
    backend, _, ref = suite.need_job()
    await backend.open(ref)
    _, took = await until(suite, "the job running", 180, in_state(ObjectState.RUNNING))
    suite.first = first = await read_identity(suite, 1)
    if first.admissions != 1:
        raise CheckFailed(f"the first execution has A={first.admissions}, not 1")
    return f"running {took:.0f}s after Open; {first}"

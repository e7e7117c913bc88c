"""Hold and release: a hold ends the execution, and the released one has a higher identity."""

from __future__ import annotations

from dispatch_kubeflow.conformance.failed import CheckFailed
from dispatch_kubeflow.conformance.registry import check
from dispatch_kubeflow.conformance.suite import Suite
from dispatch_kubeflow.conformance.watching import (
    JobView,
    in_state,
    quiet,
    read_identity,
    until,
)
from dispatch_kubeflow.model import ObjectState


@check("hold", "a hold ends the execution and keeps it from readmission until release")
async def hold(suite: Suite) -> str:
    """A hold ends the execution (``held``, no pod left); no admission while it is held."""
    backend, _, ref = suite.need_job()
    await backend.hold(ref, suite.hold_meta(1))

    def held(view: JobView) -> JobView | None:
        obs = view.obs
        ok = obs.state is ObjectState.HELD and obs.hold_instance == 1 and obs.pods == 0
        return view if ok else None

    _, took = await until(suite, "the job held with no pod left", 120, held)
    await quiet(suite, suite.o.quiet, ObjectState.HELD)
    return (f"held with no pod {took:.0f}s after Hold; not admitted again for the "
            f"{suite.o.quiet:g}s it was watched")


@check("higher-identity", "the released execution has a strictly higher identity")
async def higher_identity(suite: Suite) -> str:
    """After the release, rank 0's log shows A + 1 and a higher ``DISPATCH_EPOCH``."""
    backend, _, ref = suite.need_job()
    first = suite.first
    if first is None:
        raise CheckFailed("not run: the first identity is unknown (see open-running)")
    await backend.release(ref, suite.hold_meta(1))
    await until(suite, "the job running again", 180, in_state(ObjectState.RUNNING))
    suite.second = second = await read_identity(suite, first.admissions + 1)
    if second.admissions != first.admissions + 1:
        raise CheckFailed(f"A went from {first.admissions} to {second.admissions}, not up "
                          "by one")
    if second.epoch <= first.epoch:
        raise CheckFailed(f"DISPATCH_EPOCH went from {first.epoch} to {second.epoch}, not up")
    return (f"A {first.admissions} -> {second.admissions}, DISPATCH_EPOCH "
            f"{first.epoch} -> {second.epoch}")

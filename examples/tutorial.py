"""The seed's tutorial program (its main.go), in Python, on dispatch_kubeflow's public API.

Run it against a cluster with the admission controller running (``make demo`` does it all):

    KUBECONFIG=/tmp/dk.kubeconfig python examples/tutorial.py

It starts a two-node job closed, opens it, prints rank 0's log, holds and releases it into a
second execution with a higher identity, and stops it. Like the seed, it first makes the
``tutorial`` namespace, ClusterQueue ``tutorial`` and LocalQueue ``lq`` (idempotently).
"""

from __future__ import annotations

# --8<-- [start:imports]
import asyncio
import dataclasses
import os
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from dispatch_kubeflow import (
    Actor,
    ActorKind,
    AdapterConfig,
    Backend,
    CallMeta,
    Capability,
    DispatchError,
    HoldMeta,
    Image,
    JobID,
    JobSpec,
    ObjectState,
    OutputStream,
    RuntimeRef,
    StartRequest,
    open_backend,
)
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r

NAMESPACE = "tutorial"
COMMAND = ("env | grep '^DISPATCH_' | sort; echo tutorial-ready; trap 'exit 143' TERM; "
           "while :; do sleep 1; done")
# --8<-- [end:imports]


# --8<-- [start:helpers]
async def await_(what: str, limit: float, ok: Callable[[], Awaitable[bool]]) -> None:
    """Call ``ok`` every second until it holds; exit naming ``what`` after ``limit`` seconds."""
    loop = asyncio.get_running_loop()
    until = loop.time() + limit
    while not await ok():
        if loop.time() > until:
            raise SystemExit(f"never saw {what} within {limit:g}s")
        await asyncio.sleep(1)


async def rank_zero_log(backend: Backend, job: JobID, marker: str) -> str:
    """Read rank 0's log of the current execution until it holds ``marker``."""
    out = ""

    async def has_marker() -> bool:
        nonlocal out
        try:
            async with backend.output(job, 0, OutputStream.STDOUT) as log:
                out = (await log.read()).decode()
        except DispatchError:
            return False  # no pod of the current execution yet, or its log is not there
        return marker in out

    await await_("rank 0's log", 120, has_marker)
    return out
# --8<-- [end:helpers]


# --8<-- [start:queue]
async def give_the_job_a_queue(kubeconfig: str) -> None:
    """The seed's ``kubectl create namespace`` and ``kubectl apply``, done idempotently.

    Server-side apply creates each object when it is missing and leaves it as it is when
    it is there already.
    """
    objects: list[tuple[r.Resource, str, str | None, dict[str, Any]]] = [
        (r.NAMESPACE, NAMESPACE, None, {}),
        (r.CLUSTER_QUEUE, "tutorial", None, {"spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
            # The check is listed with no onFlavors: the adapter refuses one limited to
            # some flavors.
            "admissionChecksStrategy": {"admissionChecks": [{"name": "dispatch-admission"}]},
            "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
                "name": "default-flavor",
                "resources": [{"name": "cpu", "nominalQuota": "250m"},
                              {"name": "memory", "nominalQuota": "256Mi"}]}]}],
        }}),
        (r.LOCAL_QUEUE, "lq", NAMESPACE, {"spec": {"clusterQueue": "tutorial"}}),
    ]
    async with await Kube.connect(kubeconfig=kubeconfig) as kube:
        for res, name, ns, rest in objects:
            meta: dict[str, Any] = {"name": name, **({"namespace": ns} if ns else {})}
            body = {"apiVersion": res.api_version, "kind": res.kind, "metadata": meta, **rest}
            await kube.patch(res, name, body, ns, kind="apply", field_manager="dispatch-tutorial",
                             force=True)
# --8<-- [end:queue]


# --8<-- [start:open]
async def main() -> None:
    kubeconfig = os.environ.get("KUBECONFIG", "")
    if not kubeconfig:
        raise SystemExit("set KUBECONFIG to the cluster's kubeconfig")
    await give_the_job_a_queue(kubeconfig)

    # Open the adapter. The preflight runs before open_backend returns; it watches its
    # probe TrainJob for ten seconds, so expect this to take at least that long.
    settings = {
        "cluster": {"kubeconfig": kubeconfig},
        "namespace": NAMESPACE,
        "probeRuntime": {"kind": "ClusterTrainingRuntime", "name": "dispatch-kind"},
        "kueue": {"localQueue": "lq", "priorityClass": "low",
                  "admissionCheck": "dispatch-admission"},
        "timeouts": {"request": "10s", "stopJob": "3m"},
    }
    backend: Backend = await open_backend(AdapterConfig(backend="kubeflow", settings=settings))
    async with backend:
# --8<-- [end:open]
        # --8<-- [start:capabilities]
        # Print what the preflight decided.
        caps = await backend.capabilities()
        for c in (Capability.READMISSION_GATE, Capability.ATTEMPT_INJECTION, Capability.HOLD):
            s = caps[c]
            print(f"{c}: {s.value} ({s.source}) {s.reason}")
        # --8<-- [end:capabilities]

        # --8<-- [start:start]
        # Start the job, closed.
        job = JobID.new()
        spec = JobSpec(
            command=["/bin/sh", "-c", COMMAND],
            nodes=2,
            extensions=[Image("localhost/dispatch-busybox:kind"),
                        RuntimeRef(kind="ClusterTrainingRuntime", runtime="dispatch-kind")],
        )
        ref = await backend.start(StartRequest(job=job, submission=1, attempt=1, spec=spec))
        obs = await backend.inspect(ref)
        print(ref.id, obs.state, "-", obs.cause.detail)
        # --8<-- [end:start]

        # --8<-- [start:open-it]
        # Open it, wait for it to run, and read rank 0's log through the adapter.
        await backend.open(ref)

        async def running() -> bool:
            return (await backend.inspect(ref)).state is ObjectState.RUNNING

        await await_("the job running", 180, running)
        print(await rank_zero_log(backend, job, "tutorial-ready"), end="")
        # --8<-- [end:open-it]

        # --8<-- [start:hold]
        # Hold it.
        now = datetime.now(UTC)
        meta = HoldMeta(
            instance=1,
            by=Actor(ActorKind.HUMAN, "tutorial"),
            call=CallMeta(deadline=now + timedelta(minutes=1)),
            until=now + timedelta(hours=1),
            reason="the tutorial's hold",
        )
        await backend.hold(ref, meta)

        async def held() -> bool:
            o = await backend.inspect(ref)
            return o.state is ObjectState.HELD and o.hold_instance == 1

        await await_("the job held", 120, held)
        print("held")
        # --8<-- [end:hold]

        # --8<-- [start:release]
        # Release it: the deadline for a release is its own.
        meta = dataclasses.replace(
            meta, call=CallMeta(deadline=datetime.now(UTC) + timedelta(minutes=1)))
        await backend.release(ref, meta)
        await await_("the job running again", 180, running)
        print(await rank_zero_log(backend, job, "tutorial-ready"), end="")
        # --8<-- [end:release]

        # --8<-- [start:stop]
        # Stop it.
        report = await backend.stop_job(job, "the tutorial is over")
        print("stopped:", len(report.stopped), "alive:", len(report.alive),
              "unproven:", len(report.unproven))


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(130)
        # --8<-- [end:stop]

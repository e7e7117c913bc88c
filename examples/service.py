import asyncio
import os

import dispatch_kubeflow as dk

SETTINGS = {
    "cluster": {"kubeconfig": os.environ.get("KUBECONFIG", "/tmp/dk.kubeconfig")},
    "namespace": "tutorial",
    "probeRuntime": {"kind": "ClusterTrainingRuntime", "name": "dispatch-kind"},
    "kueue": {"localQueue": "lq", "priorityClass": "low"},
}
RUN_ON = [dk.Image("localhost/dispatch-busybox:kind"),
          dk.RuntimeRef("ClusterTrainingRuntime", "dispatch-kind")]


async def run_job(backend: dk.Backend, command: str) -> str:
    """Run a two-node job to its end and return rank 0's log. Never blocks the event loop."""
    job = dk.JobID.new()
    spec = dk.JobSpec(["/bin/sh", "-c", command], nodes=2, extensions=RUN_ON)
    ref = await backend.start(dk.StartRequest(job, submission=1, attempt=1, spec=spec))
    try:
        await backend.open(ref)  # start() left it closed behind dispatch's gate
        # A watch, not a poll: returns as soon as the server reports the end.
        obs = await backend.wait(ref, dk.ObjectState.SUCCEEDED, dk.ObjectState.FAILED)
        async with backend.output(job, rank=0) as log:
            return f"{obs.state}: {(await log.read()).decode()}"
    finally:
        await backend.stop_job(job, "done")


async def main() -> None:
    config = dk.AdapterConfig(backend="kubeflow", settings=SETTINGS)
    async with dk.open_backend(config) as backend:  # runs the preflight first
        jobs = (run_job(backend, f"echo job {n} is $DISPATCH_ATTEMPT") for n in range(2))
        for line in await asyncio.gather(*jobs):
            print(line, end="")


asyncio.run(main())

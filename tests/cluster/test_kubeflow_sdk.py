"""A good neighbour to the Kubeflow SDK: its TrainerClient reads a dispatch job as it
reads any TrainJob, side by side with a plain one in the same namespace.

The SDK (PyPI ``kubeflow``) pins the synchronous ``kubernetes`` client, so it lives in a
venv of its own, made here once under the cache directory (outside the repository) and
reused; the SDK's calls run in a script in that venv and print what they saw as JSON.
When pip cannot get the SDK the test is skipped, saying so.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from dispatch_kubeflow import Backend, Image, JobID, JobSpec, RuntimeRef, StartRequest
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r
from tests.cluster.helpers import IMAGE, delete_cluster_queue, make_queues, trainjob
from tests.cluster.test_adapter_kueue import settings

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio]

SDK_VERSION = os.environ.get("DISPATCH_TEST_KUBEFLOW_SDK", "0.5.0")
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dispatch-kubeflow"
COMMAND = "echo sdk-sees-$HOSTNAME; sleep 8; echo done"

SDK_SCRIPT = textwrap.dedent('''
    import json, sys
    from kubeflow.trainer import KubernetesBackendConfig, TrainerClient

    kubeconfig, namespace, *jobs = sys.argv[1:]
    client = TrainerClient(KubernetesBackendConfig(namespace=namespace, config_file=kubeconfig))
    out = {"listed": sorted(j.name for j in client.list_jobs()), "jobs": {}}
    for name in jobs:
        done = client.wait_for_job_status(name, {"Complete"}, timeout=240, polling_interval=2)
        job = client.get_job(name)
        out["jobs"][name] = {
            "waited": done.status, "status": job.status, "num_nodes": job.num_nodes,
            "runtime": job.runtime.name, "framework": job.runtime.trainer.framework,
            "device": job.runtime.trainer.device,
            "steps": sorted(s.name for s in job.steps),
            "logs": "".join(client.get_job_logs(name)),
        }
    print(json.dumps(out))
''')


def sdk_python() -> Path:
    """The venv's python with the SDK installed (made once); skips when pip cannot."""
    venv = CACHE / f"kubeflow-sdk-{SDK_VERSION}"
    python = venv / "bin" / "python"
    ready = venv / ".installed"
    if ready.exists():
        return python
    CACHE.mkdir(parents=True, exist_ok=True)
    made = subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)],
                          capture_output=True, text=True, timeout=300)
    if made.returncode:
        pytest.skip(f"cannot make a venv for the Kubeflow SDK: {made.stderr.strip()[-300:]}")
    pip = subprocess.run([str(python), "-m", "pip", "install", "-q",
                          f"kubeflow=={SDK_VERSION}"], capture_output=True, text=True,
                         timeout=900)
    if pip.returncode:
        pytest.skip(f"pip cannot install kubeflow=={SDK_VERSION} (the Kubeflow SDK): "
                    f"{pip.stderr.strip()[-300:]}")
    ready.touch()
    return python


@pytest_asyncio.fixture
async def ns(kube: Kube, namespace: str) -> AsyncIterator[str]:
    await make_queues(kube, namespace, checks=[names.ADMISSION_CHECK], cpu="2", memory="1Gi")
    try:
        yield namespace
    finally:
        await delete_cluster_queue(kube, namespace)


async def test_the_sdk_reads_a_dispatch_job_as_any_trainjob(
        kubeconfig: str, ns: str, admission: Any, kube: Kube, tmp_path: Path) -> None:
    python = await asyncio.to_thread(sdk_python)
    await admission.deployed(kube)
    plain = f"plain-{ns}"
    async with await Backend.connect(settings(kubeconfig, ns)) as backend:
        job = JobID.new()
        ref = await backend.start(StartRequest(job, 1, 1, JobSpec(
            ["/bin/sh", "-c", COMMAND], 2,
            [Image(IMAGE, "IfNotPresent"), RuntimeRef("ClusterTrainingRuntime",
                                                      "dispatch-kind")])))
        await backend.open(ref)
        # Not queued (no queue-name label): Kueue leaves it alone and it runs at once.
        await kube.create(r.TRAINJOB, trainjob(plain, COMMAND, queue=None), ns)
        copy = await kube.get(r.TRAINING_RUNTIME, ref.name, ns)
        assert copy["metadata"]["labels"]["trainer.kubeflow.org/framework"] == "dispatch"

        script = tmp_path / "sdk.py"
        script.write_text(SDK_SCRIPT)
        ran = await asyncio.create_subprocess_exec(
            str(python), str(script), kubeconfig, ns, ref.name, plain,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(ran.communicate(), 400)
        assert ran.returncode == 0, err.decode()[-3000:]
        seen = json.loads(out.decode().strip().splitlines()[-1])
        # The SDK warns when Trainer's public ConfigMap is missing: the cluster has it.
        assert "kubeflow-trainer-public" not in err.decode(), err.decode()[-2000:]

        assert {ref.name, plain} <= set(seen["listed"])
        for name, runtime in ((ref.name, ref.name), (plain, "dispatch-kind")):
            got = seen["jobs"][name]
            assert got["waited"] == got["status"] == "Complete", got
            assert got["num_nodes"] == 2
            assert got["runtime"] == runtime
            assert (got["framework"], got["device"]) == ("dispatch", "cpu")
            assert got["steps"] == ["node-0", "node-1"], got
            assert "sdk-sees-" in got["logs"], got
            assert "done" in got["logs"], got
        report = await backend.stop_job(job, "the SDK test is over")
        assert report.complete

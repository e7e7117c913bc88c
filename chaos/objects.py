"""A run's objects: its ledger's host directory, namespace, queues and
ClusterTrainingRuntime (``chaos.runner``'s step 2), and the requests of its jobs (step 3)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chaos import ledger as ledger_mod
from chaos.plan import JobPlan
from dispatch_kubeflow import Image, JobID, JobSpec, RuntimeRef, StartRequest
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.admission_count import newest_workload
from dispatch_kubeflow.core.kueue import trainjob_of
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r

IMAGE = "localhost/dispatch-busybox:kind"
QUEUE = "lq"
QUOTA_PODS = 6  # the ClusterQueue's quota, in pods of 100m / 32Mi


def ledger_dir(host_dir: Path) -> None:
    """The ledger's host directory and file, writable by the pods of the run."""
    host_dir.mkdir(parents=True, exist_ok=True)
    host_dir.chmod(0o777)
    (host_dir / "ledger.jsonl").touch()
    (host_dir / "ledger.jsonl").chmod(0o666)


async def setup(kube: Kube, namespace: str, runtime: str, host_dir: Path) -> None:
    ledger_dir(host_dir)
    await kube.create(r.NAMESPACE, {"metadata": {"name": namespace}})
    await kube.create(r.CLUSTER_QUEUE, {
        "metadata": {"name": namespace},
        "spec": {
            "namespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "admissionChecksStrategy": {"admissionChecks": [
                {"name": names.ADMISSION_CHECK}]},
            "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
                "name": "default-flavor",
                # six pods of 100m / 32Mi: three jobs of two nodes
                "resources": [{"name": "cpu", "nominalQuota": "600m"},
                              {"name": "memory", "nominalQuota": "192Mi"}]}]}],
        },
    })
    await kube.create(r.LOCAL_QUEUE, {"metadata": {"name": QUEUE},
                                      "spec": {"clusterQueue": namespace}},
                      namespace)
    await kube.create(r.CLUSTER_TRAINING_RUNTIME, runtime_body(runtime, host_dir))


def runtime_body(name: str, host_dir: Path) -> dict[str, Any]:
    """deploy/base.yaml's ``dispatch-kind``, with the ledger's hostPath volume and, from the
    downward API, the node's name, the pod's UID and the UID of the JobSet that made the
    pod (its label), so that the ledger names pods and executions, not identity strings;
    the command comes from each job's request."""
    return {
        "metadata": {"name": name, "labels": {"trainer.kubeflow.org/framework": "dispatch"}},
        "spec": {
            "mlPolicy": {"numNodes": 1},
            "template": {"spec": {
                "failurePolicy": {"maxRestarts": 3},
                "replicatedJobs": [{
                    "name": "node",
                    "template": {
                        "metadata": {"labels": {
                            "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                        "spec": {
                            "backoffLimit": 0,
                            "completionMode": "Indexed",
                            "template": {"spec": {
                                "restartPolicy": "Never",
                                "terminationGracePeriodSeconds": 30,
                                "volumes": [{"name": "ledger", "hostPath": {
                                    "path": str(host_dir), "type": "DirectoryOrCreate"}}],
                                "containers": [{
                                    "name": "node",
                                    "image": IMAGE,
                                    "imagePullPolicy": "IfNotPresent",
                                    "command": ["/bin/sh", "-c", "echo dispatch-chaos"],
                                    "env": [
                                        _field_env("NODE_NAME", "spec.nodeName"),
                                        _field_env("POD_UID", "metadata.uid"),
                                        _field_env("JOBSET_UID", "metadata.labels['"
                                                   f"{names.JOBSET_UID_LABEL}']")],
                                    "volumeMounts": [{"name": "ledger",
                                                      "mountPath": ledger_mod.LEDGER_DIR}],
                                    "resources": {
                                        "requests": {"cpu": "100m", "memory": "32Mi"},
                                        "limits": {"cpu": "100m", "memory": "32Mi"}},
                                }],
                            }},
                        },
                    },
                }],
            }},
        },
    }


def workload_of(items: Sequence[dict[str, Any]], trainjob: str) -> dict[str, Any] | None:
    """The Workload, of ``items``, that Kueue made for the TrainJob ``trainjob`` (its
    controller owner reference), chosen as the library chooses it: one being deleted only
    when there is no other (core.admission_count.newest_workload)."""
    return newest_workload(wl for wl in items if trainjob_of(wl) == trainjob)


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def job_command(plan: JobPlan, *, variant: str = "") -> list[str]:
    """The ledger program with its settings in front (``env K=V ... sh -c <script>``)."""
    env = ledger_mod.env(run_seconds=plan.run_seconds, fail_once=plan.fail_once,
                         term_linger=plan.term_linger,
                         early_rank=1 if plan.early_exit else None,
                         early_seconds=plan.early_exit or 1)
    if variant:
        env["LEDGER_VARIANT"] = variant  # a different request: same job, other command
    # Kubernetes expands $(VAR) in a container's command and turns $$ into $: every $ of
    # the script is doubled so that the shell gets the script as written ($$ is its pid).
    shell, flag, script, name = ledger_mod.command()
    return ["env", *(f"{k}={v}" for k, v in sorted(env.items())),
            shell, flag, script.replace("$", "$$"), name]


def job_request(job: JobID, plan: JobPlan, runtime: str, *, variant: str = "",
                submission: int = 1, attempt: int = 1) -> StartRequest:
    return StartRequest(job, submission, attempt, JobSpec(
        job_command(plan, variant=variant), plan.nodes,
        [Image(IMAGE, "IfNotPresent"), RuntimeRef("ClusterTrainingRuntime", runtime)]))


def backend_settings(kubeconfig: str, namespace: str) -> dict[str, Any]:
    return {
        "cluster": {"kubeconfig": kubeconfig},
        "namespace": namespace,
        "probeRuntime": {"kind": "ClusterTrainingRuntime", "name": "dispatch-kind"},
        "kueue": {"localQueue": QUEUE, "admissionCheck": names.ADMISSION_CHECK},
        # transient 90 s: the local cluster's API server takes up to ~45 s to restart on two
        # busy cores, longer than the library's default window of 30 s a request.
        # preflightProbe: the probe ends as soon as Kueue reports it gated (probeWatch
        # "proof"); the bound only matters on a loaded cluster, where 5 s was too short.
        "timeouts": {"request": "10s", "stopJob": "2m", "preflightProbe": "20s",
                     "transient": "90s"},
    }

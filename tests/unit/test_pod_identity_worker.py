"""The pod webhook in a MultiKueue worker (issue 30, docs/multikueue-fence.md): a pod of a
remote TrainJob (one a manager's MultiKueue put here) is made only while the worker holds
its permit, and carries the fence; a controller that is not a worker refuses it; the
worker's own Workload is not read for it (its admission is the manager's)."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest

from admission.fence import Placement
from admission.pod_identity import WorkerSide, review
from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names
from tests.unit.test_pod_identity import pod, trainjob

pytestmark = pytest.mark.asyncio
Obj = dict[str, Any]
PLACE = Placement(image="localhost/dispatch-admission:kind",
                  agent="https://dispatch-admission.dispatch-system.svc:9444", length=60.0,
                  ca="-----BEGIN CERTIFICATE-----\n")


def remote(a: str = "3") -> Obj:
    tj = trainjob(a)
    tj["metadata"]["labels"][names.MULTIKUEUE_ORIGIN_LABEL] = "multikueue"
    # Cloned from the manager's TrainJob: its queue and its approval's token.
    tj["metadata"]["labels"][names.QUEUE_NAME_LABEL] = "lq"
    tj["metadata"]["annotations"][names.ADMISSION_TOKEN] = "manager-admission"
    return tj


def worker(holds: bool = True) -> WorkerSide:
    return WorkerSide("worker1", lambda: holds, PLACE)


async def judge(p: Obj, tj: Obj, side: WorkerSide | None, *, dry_run: bool = False,
                old: Obj | None = None) -> Obj:
    async def get(ns: str, name: str) -> Obj | None:
        return tj

    async def list_pods(ns: str, name: str) -> list[Obj]:
        return []

    async def list_workloads(ns: str, uid: str) -> list[Obj]:
        # The worker's Workload of a remote says nothing of the manager's admission.
        raise errors.KubeError("must not be read", status=500)

    request: Obj = {"uid": "u", "namespace": "ns", "object": p, "dryRun": dry_run}
    if old is not None:
        request.update(operation="UPDATE", oldObject=old)
    out: Obj = (await review(request, get, list_pods, list_workloads, side))["response"]
    return out


def patched(p: Obj, resp: Obj) -> Obj:
    """``p`` with the response's JSONPatch applied (its "add" ops, as the API server would)."""
    out = copy.deepcopy(p)
    for op in json.loads(base64.b64decode(resp["patch"])):
        assert op["op"] == "add"
        *parents, last = op["path"].strip("/").split("/")
        node: Any = out
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node.insert(len(node) if last == "-" else int(last), op["value"])
        else:
            node[last] = op["value"]
    return out


def env(container: Obj) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env") or []}


async def test_a_remotes_pod_gets_its_identity_and_the_fence_while_the_permit_holds() -> None:
    p = pod()
    resp = await judge(p, remote(), worker())
    assert resp["allowed"], resp
    made = patched(p, resp)
    spec = made["spec"]
    assert spec["shareProcessNamespace"] is True
    assert [c["name"] for c in spec["initContainers"]] == [names.FENCE_CONTAINER, "init"]
    fence = spec["initContainers"][0]
    assert fence["restartPolicy"] == "Always"
    assert env(fence)["DISPATCH_FENCE_AGENT"] == PLACE.agent
    # The identity went on the pod's own containers, not on the fence.
    assert env(spec["initContainers"][1])["DISPATCH_ATTEMPT"] == "01JOB.1.1.3.0"
    assert env(spec["containers"][0])["DISPATCH_ATTEMPT"] == "01JOB.1.1.3.0"
    assert "DISPATCH_ATTEMPT" not in env(fence)
    assert any(v["name"] == names.FENCE_CONTAINER for v in spec["volumes"])


async def test_without_the_permit_no_pod_of_a_remote_is_made() -> None:
    resp = await judge(pod(), remote(), worker(holds=False))
    assert not resp["allowed"]
    assert "worker worker1 holds no permit" in resp["status"]["message"]


async def test_a_controller_that_is_not_a_worker_refuses_a_remotes_pod() -> None:
    resp = await judge(pod(), remote(), None)
    assert not resp["allowed"]
    assert names.MULTIKUEUE_ORIGIN_LABEL in resp["status"]["message"]
    # A dry run makes nothing: it shows the identity, as everywhere.
    assert (await judge(pod(), remote(), None, dry_run=True))["allowed"]


async def test_a_pod_that_brings_its_own_fence_is_refused() -> None:
    p = pod()
    p["spec"]["containers"].append({"name": names.FENCE_CONTAINER})
    resp = await judge(p, remote(), worker())
    assert not resp["allowed"]
    assert "only the worker's webhook" in resp["status"]["message"]


def as_stored(p: Obj) -> Obj:
    """``p`` as the API server hands it to a webhook it calls again: its defaults filled in
    (a container's termination message, pull policy, a probe's timeout)."""
    out = copy.deepcopy(p)
    for c in out["spec"].get("initContainers", []) + out["spec"]["containers"]:
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("imagePullPolicy", "IfNotPresent")
        if "startupProbe" in c:
            c["startupProbe"].update(timeoutSeconds=1, successThreshold=1)
        # The ServiceAccount admission plugin's token, in every container.
        c.setdefault("volumeMounts", []).append({
            "name": "kube-api-access-x7k2p", "readOnly": True,
            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"})
    return out


async def test_called_again_the_webhook_keeps_its_own_fence() -> None:
    """reinvocationPolicy IfNeeded: after another webhook changed the pod, the API server
    calls this one again with the pod as this one left it. Seen on the local MultiKueue
    clusters: the worker refused every pod of a remote (the Job's FailedCreate) because it
    took its own fence for one the pod brought."""
    p = pod()
    first = as_stored(patched(p, await judge(p, remote(), worker())))
    again = await judge(first, remote(), worker())
    assert again["allowed"], again
    made = patched(first, again) if again.get("patch") else first
    fences = [c for c in made["spec"]["initContainers"] if c["name"] == names.FENCE_CONTAINER]
    assert len(fences) == 1  # not put twice
    assert [v["name"] for v in made["spec"]["volumes"]].count(names.FENCE_CONTAINER) == 1
    assert env(made["spec"]["containers"][0])["DISPATCH_ATTEMPT"] == "01JOB.1.1.3.0"


async def test_a_fence_that_is_not_this_webhooks_is_refused_even_called_again() -> None:
    p = pod()
    first = as_stored(patched(p, await judge(p, remote(), worker())))
    mounts = first["spec"]["initContainers"][0]["volumeMounts"]
    for forge in ({"image": "attacker/fence:1"},
                  {"env": [{"name": "DISPATCH_FENCE_AGENT", "value": "https://elsewhere"}]},
                  {"volumeMounts": [*mounts, {"name": "code", "mountPath": "/venv"}]}):
        forged = copy.deepcopy(first)
        forged["spec"]["initContainers"][0].update(forge)
        resp = await judge(forged, remote(), worker())
        assert not resp["allowed"], forge
        assert "only the worker's webhook" in resp["status"]["message"]


async def test_a_local_job_in_a_worker_is_judged_as_before_without_a_fence() -> None:
    tj = trainjob("1")
    resp = await judge(pod(), tj, worker(holds=False))
    assert resp["allowed"]
    assert names.FENCE_CONTAINER not in json.dumps(patched(pod(), resp))


async def test_a_remotes_pod_starts_only_fenced_and_with_the_permit() -> None:
    p = pod()
    made = patched(p, await judge(p, remote(), worker()))
    made["metadata"].update(name="p-1", namespace="ns")
    assert any(g["name"] == names.EXECUTION_GATE for g in made["spec"]["schedulingGates"])
    lifted = copy.deepcopy(made)
    lifted["spec"]["schedulingGates"] = [g for g in made["spec"]["schedulingGates"]
                                         if g["name"] != names.EXECUTION_GATE]
    assert (await judge(lifted, remote(), worker(), old=made))["allowed"]
    no_permit = await judge(lifted, remote(), worker(holds=False), old=made)
    assert not no_permit["allowed"]
    # A pod made without the fence (before the worker fenced remotes) never starts.
    bare = copy.deepcopy(made)
    bare["spec"]["initContainers"] = bare["spec"]["initContainers"][1:]
    bare_lifted = copy.deepcopy(lifted)
    bare_lifted["spec"]["initContainers"] = bare_lifted["spec"]["initContainers"][1:]
    refused = await judge(bare_lifted, remote(), worker(), old=bare)
    assert not refused["allowed"]
    assert f"no {names.FENCE_CONTAINER}" in refused["status"]["message"]

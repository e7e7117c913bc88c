"""The local cluster runs what the seed's kind cluster runs: Kueue admits TrainJobs, Trainer
makes JobSets, the Job controller makes pods, the scheduler places them on real nodes, the
containers really run, and the garbage collector cleans up."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r
from tests.cluster.helpers import (
    Obj,
    condition,
    delete_cluster_queue,
    eventually,
    is_true,
    make_queues,
    pod_log,
    pods_of,
    trainjob,
    workload_of,
)

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="session")]

GATE = "dispatch.phpboyscout.uk/gate"
REPO = Path(__file__).resolve().parents[2]


async def test_two_node_trainjob_is_admitted_runs_and_completes(kube: Kube, namespace: str) -> None:
    await make_queues(kube, namespace)
    try:
        tj = await kube.create(r.TRAINJOB, trainjob(
            "two", 'echo "rank-$JOB_COMPLETION_INDEX says hello"'), namespace)

        wl = await eventually(lambda: workload_of(kube, namespace, tj["metadata"]["uid"]),
                              30, "Kueue's Workload for the TrainJob")
        assert [ps["name"] for ps in wl["spec"]["podSets"]] == ["node"]

        async def admitted() -> Obj | None:
            w = await workload_of(kube, namespace, tj["metadata"]["uid"])
            return w if is_true(w, "Admitted") else None

        await eventually(admitted, 60, "the Workload admitted")
        await eventually(lambda: kube.get_or_none(r.JOBSET, "two", namespace), 60,
                         "Trainer's JobSet")

        async def two_succeeded() -> list[Obj] | None:
            pods = await pods_of(kube, namespace, "two")
            done = [p for p in pods if p["status"].get("phase") == "Succeeded"]
            return pods if len(done) == 2 else None

        pods = await eventually(two_succeeded, 120, "two pods succeeded")
        nodes = {p["spec"]["nodeName"] for p in pods}
        assert nodes
        assert all(n.endswith(("-worker", "-worker2")) for n in nodes)
        logs = sorted([await pod_log(kube, namespace, p["metadata"]["name"]) for p in pods])
        assert logs == ["rank-0 says hello\n", "rank-1 says hello\n"]

        async def complete() -> Obj | None:
            t = await kube.get(r.TRAINJOB, "two", namespace)
            return t if is_true(t, "Complete") else None

        await eventually(complete, 60, "the TrainJob Complete")
    finally:
        await kube.delete(r.TRAINJOB, "two", namespace)
        await delete_cluster_queue(kube, namespace)


async def test_gated_trainjob_waits_until_the_gate_is_removed(kube: Kube, namespace: str) -> None:
    await make_queues(kube, namespace)
    try:
        tj = await kube.create(r.TRAINJOB, trainjob(
            "gated", "echo opened", annotations={"kueue.x-k8s.io/admission-gated-by": GATE}),
            namespace)

        async def gated() -> Obj | None:
            w = await workload_of(kube, namespace, tj["metadata"]["uid"])
            c = condition(w, "QuotaReserved")
            return c if c and c["status"] == "False" and c["reason"] == "AdmissionGated" else None

        c = await eventually(gated, 30, "QuotaReserved=False reason AdmissionGated")
        assert GATE in c["message"]
        # It stays that way: no admission, no pod, for a while.
        until = time.monotonic() + 5
        while time.monotonic() < until:
            w = await workload_of(kube, namespace, tj["metadata"]["uid"])
            assert not is_true(w, "QuotaReserved")
            assert await pods_of(kube, namespace, "gated") == []
        await kube.patch(r.TRAINJOB, "gated", [
            {"op": "test", "path": "/metadata/annotations/kueue.x-k8s.io~1admission-gated-by",
             "value": GATE},
            {"op": "remove", "path": "/metadata/annotations/kueue.x-k8s.io~1admission-gated-by"},
        ], namespace, kind="json")

        async def succeeded() -> list[Obj] | None:
            pods = await pods_of(kube, namespace, "gated")
            ok = [p for p in pods if p["status"].get("phase") == "Succeeded"]
            return ok if len(ok) == 2 else None

        pods = await eventually(succeeded, 120, "the opened job's two pods succeeded")
        assert await pod_log(kube, namespace, pods[0]["metadata"]["name"]) == "opened\n"
    finally:
        await kube.delete(r.TRAINJOB, "gated", namespace)
        await delete_cluster_queue(kube, namespace)


async def test_background_deletion_collects_the_jobset_jobs_and_pods(
        kube: Kube, namespace: str) -> None:
    await make_queues(kube, namespace)
    try:
        await kube.create(r.TRAINJOB, trainjob(
            "slow", "trap 'echo got TERM; sleep 6; exit 143' TERM; echo ready; "
                    "while :; do sleep 1; done"), namespace)

        async def running() -> list[Obj] | None:
            pods = await pods_of(kube, namespace, "slow")
            up = [p for p in pods if p["status"].get("phase") == "Running"]
            return up if len(up) == 2 else None

        await eventually(running, 120, "two running pods")

        async def printed_ready() -> bool:
            logs = [await pod_log(kube, namespace, p["metadata"]["name"])
                    for p in await pods_of(kube, namespace, "slow")]
            return len(logs) == 2 and all("ready" in text for text in logs)

        await eventually(printed_ready, 30, "the trap installed")
        deleted_at = time.monotonic()
        await kube.delete(r.TRAINJOB, "slow", namespace, propagation="Background")
        assert await kube.get_or_none(r.TRAINJOB, "slow", namespace) is None

        async def terminating() -> list[Obj] | None:
            pods = await pods_of(kube, namespace, "slow")
            t = [p for p in pods if p["metadata"].get("deletionTimestamp")]
            return t if len(t) == 2 else None

        await eventually(terminating, 30, "both pods terminating")

        async def all_gone() -> bool:
            js = await kube.get_or_none(r.JOBSET, "slow", namespace)
            jobs, _ = await kube.list(r.JOB, namespace,
                                      label_selector="jobset.sigs.k8s.io/jobset-name=slow")
            return js is None and not jobs and not await pods_of(kube, namespace, "slow")

        await eventually(all_gone, 60, "JobSet, Jobs and pods collected")
        # The pods honoured their SIGTERM trap: they took about six seconds to go.
        assert time.monotonic() - deleted_at >= 5.5
    finally:
        await delete_cluster_queue(kube, namespace)


async def test_admission_check_holds_a_reserved_workload_until_ready(
        kube: Kube, namespace: str) -> None:
    # A check of its own, whose controllerName no controller serves: the dispatch controller
    # (deployed or not, whatever ran before) never approves it, so Kueue alone is tested.
    check = f"local-test-{namespace}"[:63]
    await kube.create(r.ADMISSION_CHECK, {
        "metadata": {"name": check},
        "spec": {"controllerName": "dispatch.phpboyscout.uk/local-cluster-test"}})
    # This test acts as its controller: the check must be Active for the queue to admit.
    await kube.patch(r.ADMISSION_CHECK, check, {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck",
        "metadata": {"name": check},
        "status": {"conditions": [{"type": "Active", "status": "True", "reason": "Active",
                                   "message": "set by the local cluster test",
                                   "lastTransitionTime": _now()}]},
    }, subresource="status", kind="apply", field_manager="dispatch-local-test", force=True)
    await make_queues(kube, namespace, checks=[check])
    try:
        tj = await kube.create(r.TRAINJOB, trainjob("checked", "echo checked"), namespace)
        uid = tj["metadata"]["uid"]

        async def pending_with_quota() -> Obj | None:
            w = await workload_of(kube, namespace, uid)
            checks = (w or {}).get("status", {}).get("admissionChecks", [])
            states = {c["name"]: c["state"] for c in checks}
            return w if is_true(w, "QuotaReserved") and states.get(check) == "Pending" else None

        wl = await eventually(pending_with_quota, 60, "quota reserved, check Pending")
        # Held at the check: not admitted and no pod, for a while.
        until = time.monotonic() + 4
        while time.monotonic() < until:
            w = await workload_of(kube, namespace, uid)
            assert w is not None
            assert [c["state"] for c in w["status"].get("admissionChecks", [])] == ["Pending"]
            assert not is_true(w, "Admitted")
            assert await pods_of(kube, namespace, "checked") == []
        await kube.patch(r.WORKLOAD, wl["metadata"]["name"], {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": wl["metadata"]["name"], "namespace": namespace},
            "status": {"admissionChecks": [{"name": check, "state": "Ready", "message": "test",
                                            "lastTransitionTime": _now()}]},
        }, namespace, subresource="status", kind="apply", field_manager="dispatch-local-test",
            force=True)

        async def admitted() -> Obj | None:
            w = await workload_of(kube, namespace, uid)
            return w if is_true(w, "Admitted") else None

        await eventually(admitted, 30, "the Workload admitted once the check is Ready")

        async def ran() -> list[Obj] | None:
            pods = await pods_of(kube, namespace, "checked")
            ok = [p for p in pods if p["status"].get("phase") == "Succeeded"]
            return ok if len(ok) == 2 else None

        await eventually(ran, 120, "the job's pods succeeded")
    finally:
        await kube.delete(r.TRAINJOB, "checked", namespace)
        await delete_cluster_queue(kube, namespace)
        await kube.delete(r.ADMISSION_CHECK, check)


async def test_failed_container_makes_jobset_restart(kube: Kube, namespace: str) -> None:
    await make_queues(kube, namespace)
    try:
        await kube.create(r.TRAINJOB, trainjob("fails", "echo failing; exit 3", nodes=1),
                          namespace)

        async def restarted() -> list[Obj] | None:
            pods = await pods_of(kube, namespace, "fails")
            again = [p for p in pods
                     if p["metadata"]["labels"].get("jobset.sigs.k8s.io/restart-attempt") == "1"]
            return again or None

        again = await eventually(restarted, 120, "a pod of restart attempt 1")
        assert again[0]["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] == "fails"
        js = await kube.get(r.JOBSET, "fails", namespace)
        assert (js.get("status") or {}).get("restarts", 0) >= 1
    finally:
        await kube.delete(r.TRAINJOB, "fails", namespace)
        await delete_cluster_queue(kube, namespace)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.skipif(bool(os.environ.get("KUBECONFIG")), reason="pauses a node of the local cluster")
async def test_a_paused_worker_goes_not_ready_and_comes_back(kube: Kube) -> None:
    cluster = os.environ.get("DISPATCH_TEST_CLUSTER", "dk")
    node = f"{cluster}-worker2"
    script = str(REPO / "deploy/local/node.sh")

    def node_sh(action: str) -> str:
        done = subprocess.run([script, action, cluster, node], check=True,
                              capture_output=True, text=True)
        return done.stdout.strip()

    async def ready_status() -> str:
        c = condition(await kube.get(r.NODE, node), "Ready")
        return str((c or {}).get("status"))

    assert await ready_status() == "True"
    await asyncio.to_thread(node_sh, "pause")
    try:
        assert await asyncio.to_thread(node_sh, "status") == "paused"

        async def lost() -> bool:
            return await ready_status() == "Unknown"

        # node-monitor-grace-period is 20 s on the local cluster.
        await eventually(lost, 60, f"{node} NotReady (Unknown) while paused")
    finally:
        await asyncio.to_thread(node_sh, "resume")
    assert await asyncio.to_thread(node_sh, "status") == "running"

    async def back() -> bool:
        return await ready_status() == "True"

    await eventually(back, 60, f"{node} Ready again after resume")


@pytest.mark.skipif(bool(os.environ.get("KUBECONFIG")), reason="the local cluster's network")
async def test_nodes_are_kinds_and_pods_reach_each_other_and_nothing_outside(
        kube: Kube, namespace: str) -> None:
    cluster = os.environ.get("DISPATCH_TEST_CLUSTER", "dk")
    nodes = {n["metadata"]["name"]: n for n in (await kube.list(r.NODE))[0]}
    assert sorted(nodes) == [f"{cluster}-control-plane", f"{cluster}-worker",
                             f"{cluster}-worker2"]
    cp = nodes[f"{cluster}-control-plane"]
    assert "node-role.kubernetes.io/control-plane" in cp["metadata"]["labels"]
    assert {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"} in \
        cp["spec"]["taints"]
    image = "localhost/dispatch-busybox:kind"

    def pod(name: str, node: str, script: str) -> Obj:
        return {"metadata": {"name": name}, "spec": {
            "nodeName": node, "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": image, "imagePullPolicy": "Never",
                            "command": ["sh", "-c", script]}]}}

    await kube.create(r.POD, pod("server", f"{cluster}-worker",
                                 "mkdir -p /tmp/www && echo across > /tmp/www/index.html && "
                                 "httpd -f -p 8080 -h /tmp/www"), namespace)

    async def serving() -> str | None:
        p = await kube.get(r.POD, "server", namespace)
        return p["status"].get("podIP") if p["status"].get("phase") == "Running" else None
    ip = await eventually(serving, 60, "the server pod running")
    # From the other worker: the server pod, the API server through the `kubernetes`
    # Service (kube-proxy in the node's namespace), and nothing outside the machine.
    await kube.create(r.POD, pod("client", f"{cluster}-worker2", (
        f"wget -q -O- http://{ip}:8080/; "
        "nc -w 3 10.96.0.1 443 </dev/null && echo service-ok; "
        "nc -w 3 192.0.2.1 80 </dev/null 2>&1 || echo outside-unreachable")), namespace)

    async def finished() -> Obj | None:
        p = await kube.get(r.POD, "client", namespace)
        return p if p["status"].get("phase") in ("Succeeded", "Failed") else None
    await eventually(finished, 60, "the client pod finished")
    out = await pod_log(kube, namespace, "client")
    assert out.splitlines()[0] == "across", out
    assert "service-ok" in out
    assert "outside-unreachable" in out, out
    assert "Network is unreachable" in out, out

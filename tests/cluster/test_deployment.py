"""The admission controller as users deploy it: deploy/admission, rolled out by up.sh.

Two replicas of the controller's image on the control-plane node, the webhook behind its
Service, in-cluster login, probes, leader failover between pods, a rolling restart, and a
worker cut off from the control plane. Everything here goes through the API server the way a
user's kubectl does (pod and Service proxies, ``kubectl logs``); nothing is run on the host.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import time
import uuid
from typing import Any

import pytest

from admission.webhook_config import MUTATING_WEBHOOK_CONFIGURATION
from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r
from tests.cluster.admission_fixture import (
    DEPLOYMENT_NAME,
    REPO,
    AdmissionHandle,
    dump_logs,
    kubectl_binary,
)
from tests.cluster.helpers import IMAGE, eventually, pods_of
from tests.cluster.test_admission_cluster import (
    SLOW_TERM,
    _pod,
    admission_count,
    dispatch_job,
    dispatch_labels,
    ns,
    raised_events,
    set_active,
    wait_ready,
    wait_running_pods,
    workload,
)
from tests.cluster.webhook_client import api_server_cert, post, serving_ca

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio]
__all__ = ["ns"]  # a fixture (a namespace with a ClusterQueue listing the check), used here
Obj = dict[str, Any]
NS = names.CONTROLLER_NAMESPACE
SELECTOR = f"app.kubernetes.io/name={DEPLOYMENT_NAME}"
# The Deployment sets no --lease-duration: the controller's default.
LEASE_DURATION = 15.0
LOCAL = not os.environ.get("KUBECONFIG")
SERVICE = r.Resource("", "v1", "services", "Service")


def kubectl(kubeconfig: str, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run([kubectl_binary(), "--kubeconfig", kubeconfig, *args], input=stdin,
                          capture_output=True, text=True, check=False, timeout=180)
    if done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {done.stderr}")
    return done.stdout


async def controller_pods(kube: Kube) -> list[Obj]:
    pods, _ = await kube.list(r.POD, NS, label_selector=SELECTOR)
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def ready(pod: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


async def test_both_replicas_ready_on_the_control_plane_one_leads_both_serve(
        kubeconfig: str, kube: Kube, ns: str, admission: AdmissionHandle) -> None:
    leader = await admission.deployed(kube)
    pods = await controller_pods(kube)
    assert len(pods) == 2
    assert all(ready(p) for p in pods), [p["status"] for p in pods]
    for p in pods:
        node = await kube.get(r.NODE, p["spec"]["nodeName"])
        assert "node-role.kubernetes.io/control-plane" in node["metadata"]["labels"], \
            f"{p['metadata']['name']} runs on {p['spec']['nodeName']}, not the control plane"
        assert p["spec"]["securityContext"]["runAsNonRoot"] is True
    namespace = await kube.get(r.NAMESPACE, NS)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    standby = next(p["metadata"]["name"] for p in pods if p["metadata"]["name"] != leader)
    # Each pod's own readiness answer, through the API server's pod proxy.
    says = {name: kubectl(kubeconfig, "get", "--raw",
                          f"/api/v1/namespaces/{NS}/pods/http:{name}:8081/proxy/readyz").strip()
            for name in (leader, standby)}
    assert says == {leader: "leader", standby: "standby"}

    # The standby serves the webhook: an AdmissionReview sent to it alone gets the identity.
    job_id, tj = await dispatch_job(kube, ns, SLOW_TERM, nodes=1)
    await wait_ready(kube, ns, tj)
    pod = _pod(ns, {**dispatch_labels(job_id), names.JOBSET_NAME_LABEL: tj,
                    names.RESTART_ATTEMPT_LABEL: "0"})
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1",
                                                             "kind": "Pod"},
                          "resource": {"group": "", "version": "v1", "resource": "pods"},
                          "operation": "CREATE", "namespace": ns, "object": pod,
                          # Nothing is made: a dry-run gets the identity unfenced (the pod is
                          # of no JobSet, which a real create would be refused for).
                          "dryRun": True}}
    api_server = api_server_cert()
    if api_server is not None:
        # Mutual TLS (the local cluster): as the API server, straight to the standby's pod.
        ip = next(p["status"]["podIP"] for p in pods if p["metadata"]["name"] == standby)
        status, out = await asyncio.to_thread(post, ip, await serving_ca(kube), api_server,
                                              review)
        assert status == 200, out
    else:
        out = json.loads(kubectl(
            kubeconfig, "create", "--raw",
            f"/api/v1/namespaces/{NS}/pods/https:{standby}:9443/proxy/mutate-pods", "-f", "-",
            stdin=json.dumps(review)))
    assert out["response"]["allowed"] is True, out
    patch = json.loads(base64.b64decode(out["response"]["patch"]))
    assert f"{job_id}.1.1.1.0" in json.dumps(patch), patch


async def test_deleting_the_leader_pod_moves_the_lease_and_nothing_goes_unidentified(
        kube: Kube, ns: str, admission: AdmissionHandle) -> None:
    leader = await admission.deployed(kube)
    others = {p["metadata"]["name"] for p in await controller_pods(kube)} - {leader}
    # A job admitted before the failover, whose pods the webhook must keep identifying.
    job0, tj0 = await dispatch_job(kube, ns, SLOW_TERM, nodes=1)
    await wait_ready(kube, ns, tj0)
    labels = {**dispatch_labels(job0), names.JOBSET_NAME_LABEL: tj0,
              names.RESTART_ATTEMPT_LABEL: "0"}
    outcomes = {"identified": 0, "refused": 0}
    unidentified: list[Obj] = []
    stop = asyncio.Event()

    async def create_pods() -> None:
        while not stop.is_set():
            try:
                made = await kube.create(r.POD, _pod(ns, labels), ns, dry_run=True)
            except errors.KubeError:
                outcomes["refused"] += 1
            else:
                env = {e["name"]: e.get("value")
                       for e in made["spec"]["containers"][0].get("env") or []}
                if env.get("DISPATCH_ATTEMPT") == f"{job0}.1.1.1.0":
                    outcomes["identified"] += 1
                else:
                    unidentified.append(made)
            await asyncio.sleep(0.05)

    creator = asyncio.create_task(create_pods())
    try:
        await asyncio.sleep(1)
        deleted_at = time.monotonic()
        await kube.delete(r.POD, leader, NS)
        # A job admitted across the failover.
        _, tj1 = await dispatch_job(kube, ns, SLOW_TERM, nodes=1)
        holder = ""
        while holder not in others:
            assert time.monotonic() - deleted_at <= LEASE_DURATION + 2, \
                f"the Lease is still {holder!r} {LEASE_DURATION + 2}s after deleting {leader}"
            await asyncio.sleep(0.1)
            holder = await admission.holder(kube)
        took = time.monotonic() - deleted_at
        try:
            await wait_ready(kube, ns, tj1, limit=90)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nholder {holder}; workload "
                                 f"{await workload(kube, ns, tj1)}\n{dump_logs(admission)}"
                                 ) from None
        await asyncio.sleep(2)
    finally:
        stop.set()
        await creator
    assert not unidentified, f"pods created without their identity: {unidentified[:2]}"
    assert outcomes["identified"] > 0, outcomes
    assert await admission_count(kube, ns, tj1) == 1, dump_logs(admission)
    assert await raised_events(kube, ns, tj1, want=1) == 1
    print(f"lease moved {leader} -> {holder} in {took:.2f}s; pods during failover: {outcomes}")


async def test_a_rolling_restart_while_held_and_released_runs_no_execution_twice(
        kubeconfig: str, kube: Kube, ns: str, admission: AdmissionHandle) -> None:
    await admission.deployed(kube)
    _, tj = await dispatch_job(kube, ns, SLOW_TERM, nodes=2)
    wl = await wait_ready(kube, ns, tj)
    await wait_running_pods(kube, ns, tj, 2, "ready")
    # Every pod of the job as the API server reports it: which execution (A) and when it
    # appeared and went. Two executions overlap if a pod of one appears while one of the
    # other is still there.
    live: dict[str, int] = {}
    overlaps: list[str] = []
    stop = asyncio.Event()

    def a_of(pod: Obj) -> int:
        for e in pod["spec"]["containers"][0].get("env") or []:
            if e["name"] == "DISPATCH_ATTEMPT":
                return int(str(e["value"]).split(".")[3])
        return -1

    async def watch_pods() -> None:
        selector = names.pods_of(tj)
        async for ev in kube.observe(r.POD, ns, label_selector=selector):
            if stop.is_set():
                return
            pods = list(ev.items) if ev.type == "SYNC" else [ev.object]
            if ev.type == "SYNC":  # a re-list: what is there now replaces what was
                seen = {p["metadata"]["name"] for p in pods}
                for gone in set(live) - seen:
                    live.pop(gone)
            for pod in pods:
                name = pod["metadata"]["name"]
                if ev.type == "DELETED":
                    live.pop(name, None)
                elif name not in live:
                    a = a_of(pod)
                    if any(other != a for other in live.values()):
                        overlaps.append(f"{name} (A={a}) appeared beside {live}")
                    live[name] = a

    watcher = asyncio.create_task(watch_pods())
    try:
        await asyncio.sleep(1)
        await set_active(kube, ns, wl, False)
        kubectl(kubeconfig, "-n", NS, "rollout", "restart", f"deployment/{DEPLOYMENT_NAME}")
        await set_active(kube, ns, wl, True)
        kubectl(kubeconfig, "-n", NS, "rollout", "status", f"deployment/{DEPLOYMENT_NAME}",
                "--timeout=180s")

        async def again() -> bool:
            return await admission_count(kube, ns, tj) == 2
        await eventually(again, 120, "A raised to 2 after the release")
        await wait_ready(kube, ns, tj)
        await wait_running_pods(kube, ns, tj, 2, "ready")
    finally:
        stop.set()
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    assert not overlaps, overlaps
    assert set(live.values()) == {2}, live
    assert await raised_events(kube, ns, tj, want=2) == 2


async def test_metrics_health_through_the_service_and_json_logs(
        kubeconfig: str, kube: Kube, ns: str, admission: AdmissionHandle) -> None:
    await admission.deployed(kube)
    svc = f"/api/v1/namespaces/{NS}/services"
    metrics = kubectl(kubeconfig, "get", "--raw",
                      f"{svc}/http:{DEPLOYMENT_NAME}:metrics/proxy/metrics")
    assert "dispatch_admission_leader" in metrics
    assert kubectl(kubeconfig, "get", "--raw",
                   f"{svc}/http:{DEPLOYMENT_NAME}:health/proxy/healthz").strip() == "ok"
    assert kubectl(kubeconfig, "get", "--raw",
                   f"{svc}/http:{DEPLOYMENT_NAME}:health/proxy/readyz").strip() \
        in ("leader", "standby")
    # From a pod, through the Service's ClusterIP (kube-proxy on the pod's node).
    service = await kube.get(SERVICE, DEPLOYMENT_NAME, NS)
    ip = service["spec"]["clusterIP"]
    await kube.create(r.POD, {
        "metadata": {"name": "probe"},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "c", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
            "command": ["sh", "-c", f"wget -q -O- http://{ip}:8081/healthz"]}]}}, ns)

    async def probed() -> Obj | None:
        pod = await kube.get(r.POD, "probe", ns)
        return pod if pod["status"].get("phase") in ("Succeeded", "Failed") else None
    pod = await eventually(probed, 90, "the probe pod finished")
    assert pod["status"]["phase"] == "Succeeded", kubectl(kubeconfig, "-n", ns, "logs", "probe")
    assert kubectl(kubeconfig, "-n", ns, "logs", "probe").strip() == "ok"

    for p in await controller_pods(kube):
        lines = [ln for ln in kubectl(kubeconfig, "-n", NS, "logs", p["metadata"]["name"])
                 .splitlines() if ln.strip()]
        assert lines, f"{p['metadata']['name']} logged nothing"
        for ln in lines:
            rec = json.loads(ln)
            assert {"ts", "level", "msg"} <= rec.keys(), ln


@pytest.mark.skipif(not LOCAL, reason="cuts a node of the local cluster off")
async def test_a_cut_off_worker_holds_back_the_next_execution_until_it_heals(
        kube: Kube, ns: str, admission: AdmissionHandle) -> None:
    cluster = os.environ.get("DISPATCH_TEST_CLUSTER", "dk")
    script = str(REPO / "deploy/local/node.sh")
    await admission.deployed(kube)
    _, tj = await dispatch_job(kube, ns, SLOW_TERM, nodes=1)
    wl = await wait_ready(kube, ns, tj)
    [pod] = await wait_running_pods(kube, ns, tj, 1, "ready")
    node = pod["spec"]["nodeName"]

    def node_sh(action: str) -> None:
        subprocess.run([script, action, cluster, node], check=True, capture_output=True)

    async def node_ready() -> str:
        n = await kube.get(r.NODE, node)
        c: Obj = next((c for c in n["status"]["conditions"] if c["type"] == "Ready"), {})
        return str(c.get("status"))

    await asyncio.to_thread(node_sh, "cut")
    try:
        async def lost() -> bool:
            return await node_ready() != "True"
        await eventually(lost, 60, f"{node} NotReady while cut off")

        async def marked() -> bool:
            p = await kube.get_or_none(r.POD, pod["metadata"]["name"], ns)
            return p is not None and bool(p["metadata"].get("deletionTimestamp"))
        # Hold and release: Kueue ends the execution and queues the job again, but the old
        # pod cannot be confirmed gone while its node is cut off.
        await set_active(kube, ns, wl, False)
        await eventually(marked, 60, "the old pod marked for deletion")
        await set_active(kube, ns, wl, True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert await kube.get_or_none(r.POD, pod["metadata"]["name"], ns) is not None
            assert await admission_count(kube, ns, tj) == 1, "A raised while the old pod exists"
            assert len(await pods_of(kube, ns, tj)) == 1, "a new pod beside the old one"
            await asyncio.sleep(1)
    finally:
        await asyncio.to_thread(node_sh, "heal")

    async def healed() -> bool:
        return await node_ready() == "True"
    await eventually(healed, 60, f"{node} Ready again")

    async def raised() -> bool:
        return await admission_count(kube, ns, tj) == 2
    await eventually(raised, 120, "A raised to 2 once the old pod is gone")
    [again] = await wait_running_pods(kube, ns, tj, 1, "ready")
    assert again["metadata"]["name"] != pod["metadata"]["name"]
    assert await raised_events(kube, ns, tj, want=2) == 2
    assert await workload(kube, ns, tj) is not None


async def pods_get_their_identity(kube: Kube, ns: str, admission: AdmissionHandle) -> None:
    """A dispatch job admitted now: a pod of it (a dry run) gets its identity from the
    webhook, so the webhook is configured, called and trusted."""
    job_id, tj = await dispatch_job(kube, ns, SLOW_TERM)
    await wait_ready(kube, ns, tj)
    labels = {**dispatch_labels(job_id), names.JOBSET_NAME_LABEL: tj,
              names.RESTART_ATTEMPT_LABEL: "0"}
    out = await kube.create(r.POD, _pod(ns, labels), ns, dry_run=True)
    env = {e["name"]: e.get("value") for e in out["spec"]["containers"][0].get("env") or []}
    assert env[names.ENV_ATTEMPT] == f"{job_id}.1.1.1.0", dump_logs(admission)


async def test_a_deleted_tls_secret_is_made_again_with_the_ca_every_replica_serves(
        kube: Kube, ns: str, admission: AdmissionHandle) -> None:
    """Issue 28: with the shared Secret deleted, a replica that started made a new CA while
    the others served the old one, and the caBundle fitted only some. The leader makes it
    again from what every replica serves: the same CA, and pods keep getting identity."""
    await admission.deployed(kube)
    secret = r.Resource("", "v1", "secrets", "Secret")
    tls_secret = "dispatch-admission-tls"
    was = await kube.get(secret, tls_secret, names.CONTROLLER_NAMESPACE)
    await kube.delete(secret, tls_secret, names.CONTROLLER_NAMESPACE,
                      uid=was["metadata"]["uid"])

    async def again() -> Obj | None:
        cur = await kube.get_or_none(secret, tls_secret, names.CONTROLLER_NAMESPACE)
        return cur if cur is not None and cur["metadata"]["uid"] != was["metadata"]["uid"] \
            else None

    made = await eventually(again, 30, "the TLS Secret made again")
    assert made["data"] == was["data"]
    await pods_get_their_identity(kube, ns, admission)


async def test_a_deleted_webhook_configuration_is_made_again(
        kube: Kube, ns: str, admission: AdmissionHandle) -> None:
    """Issue 28: deleted, the configuration was reported and stayed gone, and dispatch pods
    were made with no identity and no gate. The leader makes it again (the policy
    dispatch-admission-controller-writes bounds what it may create), and pods get their
    identity."""
    await admission.deployed(kube)
    cfg = MUTATING_WEBHOOK_CONFIGURATION
    was = await kube.get(cfg, names.WEBHOOK_CONFIGURATION)
    await kube.delete(cfg, names.WEBHOOK_CONFIGURATION, uid=was["metadata"]["uid"])

    async def again() -> Obj | None:
        cur = await kube.get_or_none(cfg, names.WEBHOOK_CONFIGURATION)
        return cur if cur is not None and cur["metadata"]["uid"] != was["metadata"]["uid"] \
            else None

    made = await eventually(again, 30, "the configuration made again")
    assert made["webhooks"][0]["clientConfig"] == was["webhooks"][0]["clientConfig"]
    assert made["webhooks"][0]["matchConditions"] == was["webhooks"][0]["matchConditions"]
    await pods_get_their_identity(kube, ns, admission)


async def test_an_edited_webhook_configuration_is_put_back(
        kube: Kube, ns: str, admission: AdmissionHandle) -> None:
    """Issue 28: the configuration was written only when the controller started: its caBundle
    wiped, every dispatch pod was refused until a restart; its match condition dropped,
    every update of a dispatch pod waited on the webhook. The leader now puts it back, and
    pods get their identity."""
    await admission.deployed(kube)
    cfg = MUTATING_WEBHOOK_CONFIGURATION
    was = await kube.get(cfg, names.WEBHOOK_CONFIGURATION)
    hook = was["webhooks"][0]
    ca, conditions = hook["clientConfig"]["caBundle"], hook["matchConditions"]
    hook["clientConfig"]["caBundle"] = ""
    del hook["matchConditions"]
    await kube.replace(cfg, was)

    async def back() -> Obj | None:
        cur = await kube.get(cfg, names.WEBHOOK_CONFIGURATION)
        h = cur["webhooks"][0]
        return cur if h["clientConfig"].get("caBundle") and h.get("matchConditions") else None

    restored = (await eventually(back, 30, "the configuration written again"))["webhooks"][0]
    assert (restored["clientConfig"]["caBundle"], restored["matchConditions"]) == (ca, conditions)
    await pods_get_their_identity(kube, ns, admission)

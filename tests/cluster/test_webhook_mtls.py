"""The webhook serves the API server and nobody else (issue 28, item 5), on the local cluster.

deploy/local/up.sh configures the API server, through its AdmissionConfiguration, to present
a client certificate (from a CA of its own) to admission webhooks, and deploys the
controller with deploy/admission/mtls, which requires it. Here, against each deployed
replica at its pod address: a review with no certificate, and one with the cluster CA's
admin certificate (the CA that also signs every node's and controller's identity), are
refused in the handshake, as is one through the API server's pod proxy (whoever may use
pods/proxy), and the replica's review counter does not move, so no review was judged and
nothing of the cluster was read for it; the same review with the API server's
certificate is answered (the refusal is about who asks); dispatch pods still get their
identity through the API server. Then an ordinary pod of the cluster (no dispatch label, its
namespace's default ServiceAccount: a token is no TLS identity) sends the review to each
replica: refused, and no review judged. The local pod network enforces no NetworkPolicy, so
the pod reaches the replicas and mutual TLS alone refuses it.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import ssl
import subprocess
import urllib.request
from typing import Any

import pytest

from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r
from tests.cluster.admission_fixture import (
    DEPLOYMENT,
    DEPLOYMENT_NAME,
    AdmissionHandle,
    kubectl_binary,
)
from tests.cluster.helpers import IMAGE, eventually, pod_log
from tests.cluster.test_admission_cluster import ns  # noqa: F401  (fixture)
from tests.cluster.test_deployment import pods_get_their_identity
from tests.cluster.webhook_client import ADMIN, api_server_cert, post, serving_ca

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio]

REVIEW: dict[str, Any] = {
    "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
    "request": {"uid": "mtls-probe", "namespace": "default", "object": {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "labels": {
            names.JOBSET_NAME_LABEL: "no-such-trainjob"}},
        "spec": {"containers": [{"name": "node", "image": "x"}]}}}}
REFUSED = (ssl.SSLError, ConnectionError, http.client.RemoteDisconnected)


def reviews(ip: str) -> float:
    """The replica's reviews judged, every outcome (its /metrics)."""
    with urllib.request.urlopen(f"http://{ip}:8080/metrics", timeout=5) as f:
        text = f.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("dispatch_admission_webhook_reviews_total"))


async def test_the_webhook_serves_the_api_server_and_nobody_else(
        kubeconfig: str, kube: Kube, ns: str, admission: AdmissionHandle) -> None:  # noqa: F811
    api_server = api_server_cert()
    if api_server is None:
        pytest.skip("not the local cluster (its API server's webhook client certificate)")
    await admission.deployed(kube)
    dep = await kube.get(DEPLOYMENT, DEPLOYMENT_NAME, names.CONTROLLER_NAMESPACE)
    args: list[Any] = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert any(str(a).startswith("--client-ca=") for a in args), args
    ca = await serving_ca(kube)
    pods, _ = await kube.list(r.POD, names.CONTROLLER_NAMESPACE,
                              label_selector=f"app.kubernetes.io/name={DEPLOYMENT_NAME}")
    for ip, name in [(ip, p["metadata"]["name"]) for p in pods for ip in [pod_ip(p)] if ip]:
        before = await asyncio.to_thread(reviews, ip)
        for cert in (None, ADMIN):  # an ordinary pod's case; the cluster CA's admin
            with pytest.raises(REFUSED):
                await asyncio.to_thread(post, ip, ca, cert, REVIEW)
        # Through the API server's pod proxy (whoever may use pods/proxy): no certificate.
        proxied = await asyncio.to_thread(through_pod_proxy, kubeconfig, name)
        assert proxied.returncode != 0, proxied.stdout
        assert await asyncio.to_thread(reviews, ip) == before, \
            f"{ip} judged a review from a caller it should have refused"
        status, _ = await asyncio.to_thread(post, ip, ca, api_server, REVIEW)
        assert status == 200
        assert await asyncio.to_thread(reviews, ip) == before + 1
    # An ordinary pod of the cluster, asking each replica (busybox's wget speaks TLS).
    ips = [ip for ip in (pod_ip(p) for p in pods) if ip]
    counted = {ip: await asyncio.to_thread(reviews, ip) for ip in ips}
    asked = await ordinary_pod_asks(kube, ns, ips)
    assert asked == {f"REFUSED {ip}" for ip in ips}, asked
    now = {ip: await asyncio.to_thread(reviews, ip) for ip in ips}
    assert now == counted, "a replica judged a review an ordinary pod sent"
    await pods_get_their_identity(kube, ns, admission)


async def ordinary_pod_asks(kube: Kube, namespace: str, ips: list[str]) -> set[str]:
    """Run a pod (no dispatch label, the namespace's default ServiceAccount) that POSTs the
    review to each replica; the lines it printed, ``ANSWERED <ip>`` or ``REFUSED <ip>``."""
    review = json.dumps(REVIEW)
    script = "".join(
        f"if wget --no-check-certificate -q -O- -T 10 --header 'Content-Type: application/json' "
        f"--post-data '{review}' https://{ip}:9443/mutate-pods; then echo; echo ANSWERED {ip}; "
        f"else echo REFUSED {ip}; fi; " for ip in ips)
    name = "mtls-ordinary-pod"
    await kube.create(r.POD, {"metadata": {"name": name}, "spec": {
        "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "ask", "image": IMAGE, "command": ["/bin/sh", "-c", script],
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}, namespace)

    async def ended() -> bool:
        pod = await kube.get(r.POD, name, namespace)
        return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")

    await eventually(ended, 90, "the ordinary pod's requests")
    return {line for line in (await pod_log(kube, namespace, name)).splitlines()
            if line.startswith(("ANSWERED", "REFUSED"))}


def through_pod_proxy(kubeconfig: str, pod: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [kubectl_binary(), "--kubeconfig", kubeconfig, "create", "--raw",
         f"/api/v1/namespaces/{names.CONTROLLER_NAMESPACE}/pods/https:{pod}:9443/proxy"
         "/mutate-pods", "-f", "-"], input=json.dumps(REVIEW), capture_output=True, text=True,
        check=False, timeout=60)


def pod_ip(pod: dict[str, Any]) -> str:
    """A running replica's address ("" for one going or not running)."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running" or pod["metadata"].get("deletionTimestamp"):
        return ""
    return str(status.get("podIP") or "")

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
identity through the API server. An ordinary pod has neither certificate: its ServiceAccount
token is no TLS identity, so the no-certificate case is its case.
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
from tests.cluster.test_admission_cluster import ns  # noqa: F401  (fixture)
from tests.cluster.test_deployment import pods_get_their_identity
from tests.cluster.webhook_client import ADMIN, API_SERVER, post, serving_ca

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


@pytest.mark.skipif(API_SERVER is None,
                    reason="not the local cluster (its API server's webhook client certificate)")
async def test_the_webhook_serves_the_api_server_and_nobody_else(
        kubeconfig: str, kube: Kube, ns: str, admission: AdmissionHandle) -> None:  # noqa: F811
    assert API_SERVER is not None
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
        status, _ = await asyncio.to_thread(post, ip, ca, API_SERVER, REVIEW)
        assert status == 200
        assert await asyncio.to_thread(reviews, ip) == before + 1
    await pods_get_their_identity(kube, ns, admission)


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

"""The webhook serves the API server and nobody else (issue 28, item 5), on the local cluster.

deploy/local/up.sh configures the API server, through its AdmissionConfiguration, to present
a client certificate (from a CA of its own) to admission webhooks, and deploys the
controller with deploy/admission/mtls, which requires it. Here, against each deployed
replica at its pod address: a review with no certificate, and one with the cluster CA's
admin certificate (the CA that also signs every node's and controller's identity), are
refused in the handshake, and the replica's review counter does not move, so no review was
judged and nothing of the cluster was read for it; the same review with the API server's
certificate is answered (the refusal is about who asks); dispatch pods still get their
identity through the API server. An ordinary pod has neither certificate: its ServiceAccount
token is no TLS identity, so the no-certificate case is its case.
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import ssl
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from admission.webhook_config import PATH
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r
from tests.cluster.admission_fixture import DEPLOYMENT, DEPLOYMENT_NAME, AdmissionHandle
from tests.cluster.helpers import STATE_ROOT
from tests.cluster.test_admission_cluster import ns  # noqa: F401  (fixture)
from tests.cluster.test_deployment import pods_get_their_identity
from tests.conftest import LOCAL_CLUSTER

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio]

PKI = STATE_ROOT / LOCAL_CLUSTER / "pki"
REVIEW = json.dumps({
    "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
    "request": {"uid": "mtls-probe", "namespace": "default", "object": {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "labels": {
            names.JOBSET_NAME_LABEL: "no-such-trainjob"}},
        "spec": {"containers": [{"name": "node", "image": "x"}]}}}}).encode()


async def replica_ips(kube: Kube) -> list[str]:
    pods, _ = await kube.list(r.POD, names.CONTROLLER_NAMESPACE,
                              label_selector=f"app.kubernetes.io/name={DEPLOYMENT_NAME}")
    ips = [p["status"]["podIP"] for p in pods if (p.get("status") or {}).get("podIP")
           and p["status"].get("phase") == "Running" and not p["metadata"].get(
               "deletionTimestamp")]
    assert ips, "no running replica"
    return ips


def reviews(ip: str) -> float:
    """The replica's reviews judged, every outcome (its /metrics)."""
    with urllib.request.urlopen(f"http://{ip}:8080/metrics", timeout=5) as f:
        text = f.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("dispatch_admission_webhook_reviews_total"))


def post(ip: str, serving_ca: str, cert: tuple[Path, Path] | None) -> int:
    """POST the review to the replica as the holder of ``cert``; the HTTP status."""
    ctx = ssl.create_default_context(cadata=serving_ca)
    ctx.check_hostname = False  # by pod address; the certificate names the Service
    if cert is not None:
        ctx.load_cert_chain(*cert)
    conn = http.client.HTTPSConnection(ip, 9443, context=ctx, timeout=10)
    try:
        conn.request("POST", PATH, REVIEW, {"Content-Type": "application/json"})
        return conn.getresponse().status
    finally:
        conn.close()


@pytest.mark.skipif(not (PKI / "webhook-client-ca.crt").exists(),
                    reason="not the local cluster (its API server's webhook client certificate)")
async def test_the_webhook_serves_the_api_server_and_nobody_else(
        kube: Kube, ns: str, admission: AdmissionHandle) -> None:  # noqa: F811
    await admission.deployed(kube)
    dep = await kube.get(DEPLOYMENT, DEPLOYMENT_NAME, names.CONTROLLER_NAMESPACE)
    args: list[Any] = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert any(str(a).startswith("--client-ca=") for a in args), args
    secret = await kube.get(r.Resource("", "v1", "secrets", "Secret"),
                            "dispatch-admission-tls", names.CONTROLLER_NAMESPACE)
    serving_ca = base64.b64decode(secret["data"]["ca.crt"]).decode()
    admin = (PKI / "admin.crt", PKI / "admin.key")
    api_server = (PKI / "apiserver-webhook-client.crt", PKI / "apiserver-webhook-client.key")
    for ip in await replica_ips(kube):
        before = await asyncio.to_thread(reviews, ip)
        for cert in (None, admin):  # an ordinary pod's case; the cluster CA's admin
            with pytest.raises((ssl.SSLError, ConnectionError, http.client.RemoteDisconnected)):
                await asyncio.to_thread(post, ip, serving_ca, cert)
        assert await asyncio.to_thread(reviews, ip) == before, \
            f"{ip} judged a review from a caller it should have refused"
        assert await asyncio.to_thread(post, ip, serving_ca, api_server) == 200
        assert await asyncio.to_thread(reviews, ip) == before + 1
    await pods_get_their_identity(kube, ns, admission)

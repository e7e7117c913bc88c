"""Calling the pod webhook from the host as the API server does, or as anyone else.

The local cluster's API server presents a client certificate of its own CA to admission
webhooks, and the deployed controller requires it (deploy/admission/mtls,
docs/install-admission.md): a review sent straight to a replica's pod address must carry
that certificate to be answered. Outside the local cluster there is no such certificate
here: :func:`api_server_cert` is None.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
from pathlib import Path
from typing import Any

from admission.webhook_config import PATH
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r
from tests.cluster.helpers import STATE_ROOT
from tests.conftest import LOCAL_CLUSTER

PKI = STATE_ROOT / LOCAL_CLUSTER / "pki"
Cert = tuple[Path, Path]
ADMIN: Cert = (PKI / "admin.crt", PKI / "admin.key")
"""The cluster CA's admin certificate: the CA that signs every node's identity too."""
SECRET = r.Resource("", "v1", "secrets", "Secret")


def api_server_cert() -> Cert | None:
    """The API server's client certificate for webhooks (the local cluster's PKI), or None.
    Asked when a test runs, never at import: the session starts the cluster (and makes its
    PKI) after the tests are collected."""
    cert = (PKI / "apiserver-webhook-client.crt", PKI / "apiserver-webhook-client.key")
    return cert if cert[0].exists() else None


async def serving_ca(kube: Kube) -> str:
    """The CA the replicas' serving certificate is signed by (the shared TLS Secret)."""
    secret = await kube.get(SECRET, "dispatch-admission-tls", names.CONTROLLER_NAMESPACE)
    return base64.b64decode(secret["data"]["ca.crt"]).decode()


def post(ip: str, ca: str, cert: Cert | None, review: dict[str, Any]) -> tuple[int, Any]:
    """POST ``review`` to the replica at ``ip`` as the holder of ``cert``: the HTTP status
    and the decoded answer. Raises (ssl.SSLError, ConnectionError, ...) when refused."""
    ctx = ssl.create_default_context(cadata=ca)
    ctx.check_hostname = False  # by pod address; the certificate names the Service
    if cert is not None:
        ctx.load_cert_chain(*cert)
    conn = http.client.HTTPSConnection(ip, 9443, context=ctx, timeout=10)
    try:
        conn.request("POST", PATH, json.dumps(review).encode(),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, json.loads(body) if body else None
    finally:
        conn.close()

"""Mutual TLS at the pod webhook (issue 28, item 5): with ``--client-ca`` only a caller with
a certificate that CA signed (the API server's, from its AdmissionConfiguration) is served.
Anyone else is refused in the handshake: the handler never runs, so it reads nothing of the
cluster and the answer says nothing about any job. Real TLS over loopback; the cluster's
half (the API server presenting its certificate) is tests/cluster/test_webhook_mtls.py."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from admission import cli, tls
from admission.observability import Metrics
from admission.pod_identity import WebhookServer
from admission.webhook_config import PATH
from tests.unit.test_pod_identity import pod, trainjob

Pem = tuple[bytes, bytes]


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=1)).not_valid_after(now + timedelta(1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(key, hashes.SHA256()))
    return cert, key


def client_cert(ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey], cn: str) -> Pem:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca[0].subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=1)).not_valid_after(now + timedelta(1))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca[1], hashes.SHA256()))
    pem = serialization.Encoding.PEM
    return (cert.public_bytes(pem), key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                      serialization.NoEncryption()))


class CountingKube:
    """The webhook's reads of the cluster, counted: a refused caller must cost none."""

    def __init__(self) -> None:
        self.reads = 0

    async def get_or_none(self, res: Any, name: str, namespace: str | None = None) -> Any:
        self.reads += 1
        return trainjob("4") if name == "dj-01job-s1" else None

    async def list(self, res: Any, namespace: str | None = None,
                   **_: Any) -> tuple[list[Any], str]:
        self.reads += 1
        return [], "1"


API_SERVER_CA = make_ca("webhook-client-ca")
REVIEW = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
          "request": {"uid": "x", "namespace": "ns", "object": pod()}}


class Served:
    def __init__(self, url: str, material: tls.TlsMaterial, kube: CountingKube) -> None:
        self.url, self.material, self.kube = url, material, kube

    async def review(self, cert: Pem | None, tmp: Path) -> dict[str, Any]:
        ctx = ssl.create_default_context(cadata=self.material.ca.decode())
        if cert is not None:
            (tmp / "c.crt").write_bytes(cert[0])
            (tmp / "c.key").write_bytes(cert[1])
            ctx.load_cert_chain(tmp / "c.crt", tmp / "c.key")
        async with aiohttp.ClientSession() as http, \
                http.post(self.url, json=REVIEW, ssl=ctx) as resp:
            out: dict[str, Any] = await resp.json()
            return out


@pytest_asyncio.fixture
async def served() -> AsyncIterator[Served]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    material = tls.generate(["127.0.0.1"])
    kube = CountingKube()
    server = WebhookServer(kube, Metrics())  # type: ignore[arg-type]
    pem = API_SERVER_CA[0].public_bytes(serialization.Encoding.PEM)
    await server.start(f"127.0.0.1:{port}", material.ssl_context(client_ca=pem))
    try:
        yield Served(f"https://127.0.0.1:{port}{PATH}", material, kube)
    finally:
        await server.stop()


@pytest.mark.asyncio
async def test_the_api_servers_certificate_is_served(served: Served, tmp_path: Path) -> None:
    out = await served.review(client_cert(API_SERVER_CA, "kube-apiserver"), tmp_path)
    assert out["response"]["allowed"] is True
    assert served.kube.reads > 0


@pytest.mark.asyncio
@pytest.mark.parametrize("who", ["no certificate", "another CA's certificate"])
async def test_anyone_else_is_refused_before_any_read(served: Served, tmp_path: Path,
                                                      who: str) -> None:
    """An ordinary pod has no certificate the API server's client CA signed (its
    ServiceAccount token is no TLS identity)."""
    cert = None if who == "no certificate" else client_cert(make_ca("another-ca"), "pod")
    with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):
        await served.review(cert, tmp_path)
    await asyncio.sleep(0.05)  # a handler that had started would have read by now
    assert served.kube.reads == 0


def test_a_public_cas_client_is_not_trusted() -> None:
    """The serving context trusts the client CA given and nothing else: not the system's
    CAs (ssl.create_default_context(CLIENT_AUTH) would load them)."""
    pem = API_SERVER_CA[0].public_bytes(serialization.Encoding.PEM)
    ctx = tls.generate(["127.0.0.1"]).ssl_context(client_ca=pem)
    assert ctx.verify_mode is ssl.CERT_REQUIRED
    assert [c["subject"] for c in ctx.get_ca_certs()] == [((("commonName",
                                                             "webhook-client-ca"),),)]
    assert tls.generate(["127.0.0.1"]).ssl_context().verify_mode is ssl.CERT_NONE


def test_a_bad_client_ca_is_exit_2_naming_the_flag(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "ca.crt"
    bad.write_text("not a certificate\n")
    for path in (str(bad), str(tmp_path / "missing.crt")):
        with pytest.raises(SystemExit) as exc:
            cli.main(["--client-ca", path])
        assert exc.value.code == 2
        assert "--client-ca:" in capsys.readouterr().err

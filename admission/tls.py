"""The webhook's serving certificate.

Three sources, in order: files given with ``--tls-cert``/``--tls-key`` (and ``--tls-ca``
for the bundle the API server trusts; default the certificate itself); a Secret named by
``--tls-secret`` in the controller's namespace, created on first use with a self-signed CA and
a serving certificate so that every replica serves with the same key and one caBundle fits
them all; or, with neither, a CA and certificate made for this process alone.
"""

from __future__ import annotations

import base64
import ipaddress
import logging
import ssl
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from dispatch_kubeflow.core import errors
from dispatch_kubeflow.kube import KubeAPI, Resource
from dispatch_kubeflow.kube.credentials import load_certificate

log = logging.getLogger(__name__)

SECRET = Resource("", "v1", "secrets", "Secret")
VALIDITY = timedelta(days=3650)


@dataclass(frozen=True, slots=True)
class TlsMaterial:
    """PEM bytes: the serving chain, its key, and the CA bundle for the caBundle field."""

    cert: bytes
    key: bytes
    ca: bytes

    def ssl_context(self, client_ca: bytes = b"") -> ssl.SSLContext:
        """The serving context. With ``client_ca`` (PEM: the CA that signs the API server's
        client certificate for admission webhooks) every caller must present a certificate
        it signed: anyone else is refused in the handshake, before any request is read, so
        before any read of the cluster (mutual TLS)."""
        # Not create_default_context(CLIENT_AUTH): it loads the system's CAs as trusted
        # client issuers, and any certificate a public CA signed would then pass.
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if client_ca:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(cadata=client_ca.decode())
        self.load_into(ctx)
        return ctx

    def load_into(self, ctx: ssl.SSLContext) -> None:
        """Serve this certificate from ``ctx`` from the next handshake on (a server keeps its
        context: loading into it is how the certificate changes without a restart)."""
        load_certificate(ctx, self.cert, self.key)

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca).decode()


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def generate(hosts: list[str], *, now: datetime | None = None) -> TlsMaterial:
    """A fresh CA and a serving certificate for ``hosts`` (DNS names or IP addresses)."""
    now = now or datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("dispatch-admission-ca")).issuer_name(_name("dispatch-admission-ca"))
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5)).not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0] if hosts else "dispatch-admission"))
        .issuer_name(ca_cert.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5)).not_valid_after(now + VALIDITY)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return TlsMaterial(
        cert=cert.public_bytes(pem),
        key=key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()),
        ca=ca_cert.public_bytes(pem),
    )


def _read(flag: str, path: str) -> bytes:
    """A file a flag names; SettingsError naming the flag when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise errors.SettingsError(f"{flag}: cannot read {path}: {exc}", field=flag) from exc


def client_ca(path: str) -> bytes:
    """The API server's client CA bundle for mutual TLS (``--client-ca``); raises
    SettingsError naming the flag when it is unreadable or holds no certificate."""
    data = _read("--client-ca", path)
    try:
        x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise errors.SettingsError(f"--client-ca: {path} is not a PEM CA bundle: {exc}",
                                   field="--client-ca") from exc
    return data


def from_files(cert: str, key: str, ca: str | None = None) -> TlsMaterial:
    """Read PEM files; raises SettingsError naming the unreadable one."""
    return TlsMaterial(*(_read(flag, path) for flag, path in (
        ("--tls-cert", cert), ("--tls-key", key), ("--tls-ca", ca or cert))))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def from_secret(kube: KubeAPI, namespace: str, name: str, hosts: list[str]) -> TlsMaterial:
    """Read the shared Secret, creating it first if no replica has yet."""
    secret = await kube.get_or_none(SECRET, name, namespace)
    if secret is None:
        try:
            secret = await kube.create(SECRET, secret_body(namespace, name, generate(hosts)),
                                       namespace)
            log.info("created TLS secret %s/%s", namespace, name)
        except errors.KubeConflict:  # another replica made it first: use theirs
            secret = await kube.get(SECRET, name, namespace)
    material = of_secret(secret)
    if material is None:
        raise errors.SettingsError(
            f"--tls-secret: {namespace}/{name} lacks tls.crt, tls.key or ca.crt; delete it and "
            "a replica will recreate it", field="--tls-secret")
    return material


def secret_body(namespace: str, name: str, material: TlsMaterial) -> dict[str, object]:
    """The shared Secret holding ``material``."""
    return {"metadata": {"name": name, "namespace": namespace,
                         "labels": {"app.kubernetes.io/name": "dispatch-admission"}},
            "type": "kubernetes.io/tls",
            "data": {"tls.crt": _b64(material.cert), "tls.key": _b64(material.key),
                     "ca.crt": _b64(material.ca)}}


def of_secret(secret: dict[str, object]) -> TlsMaterial | None:
    """The material a shared Secret holds (None when it lacks a part)."""
    data = secret.get("data") or {}
    if not isinstance(data, dict):
        return None
    try:
        return TlsMaterial(*(base64.b64decode(str(data[k]))
                             for k in ("tls.crt", "tls.key", "ca.crt")))
    except (KeyError, ValueError):
        return None

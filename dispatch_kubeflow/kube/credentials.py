"""What a request presents to the API server, and where the TLS side of a connection comes
from: a bearer token (static, re-read from a file, or an exec plugin's until it expires),
basic auth, a client certificate.

Every token source is asked before each request (:meth:`Connection.authorization`); each
caches, so asking costs nothing until the token is due: a token file is read again after
:data:`FILE_TOKEN_REREAD` (the kubelet rewrites a projected service-account token well
before it expires, and client-go re-reads it as often), an exec plugin runs again once its
credential's ``expirationTimestamp`` is near.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from dispatch_kubeflow.core import errors

FILE_TOKEN_REREAD = 60.0
"""Seconds a token read from a file is used before the file is read again."""

EXEC_EXPIRY_MARGIN = 30.0
"""Seconds before an exec credential's expiry that the plugin runs again (a request sent
just before the expiry could arrive after it)."""

EXEC_TIMEOUT = 60.0
"""Seconds an exec plugin may take (one that asks a cloud for a token can be slow)."""


class Token(Protocol):
    """A source of bearer tokens."""

    async def token(self) -> str: ...

    @property
    def expires(self) -> datetime | None:
        """When the token last given stops being valid (None: not known to expire)."""
        ...


@dataclass(slots=True)
class StaticToken:
    """A kubeconfig's ``token``, or an OIDC auth provider's ``id-token``."""

    value: str
    expires: datetime | None = None

    async def token(self) -> str:
        return self.value


@dataclass(slots=True)
class FileToken:
    """A token read from a file, again every :data:`FILE_TOKEN_REREAD` seconds: the pod's
    service-account token (rotated by the kubelet) or a kubeconfig's ``tokenFile``."""

    path: str
    what: str
    """Names the source in an error: ``cluster.inCluster`` or the kubeconfig's user."""
    _value: str = ""
    _read_at: float = -1e18
    expires: datetime | None = None

    async def token(self) -> str:
        if time.monotonic() - self._read_at >= FILE_TOKEN_REREAD:
            try:
                # A tmpfs file of a few hundred bytes, once a minute: no thread needed.
                with open(self.path, encoding="utf-8") as f:  # noqa: ASYNC230
                    value = f.read().strip()
            except OSError as exc:
                if not self._value:
                    raise errors.SettingsError(f"{self.what}: cannot read the token file "
                                               f"{self.path}: {exc}", field=self.what) from exc
                # Mid-rotation: the last token stays valid for a while yet.
            else:
                self._value, self._read_at = value, time.monotonic()
        return self._value


@dataclass(slots=True)
class ExecToken:
    """A token from a client-go credential plugin (a kubeconfig user's ``exec``), run again
    when its credential nears ``expirationTimestamp``. Runs one at a time: a crowd of
    requests waiting for a token waits for one run."""

    command: str
    args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    api_version: str = "client.authentication.k8s.io/v1"
    user: str = ""
    _value: str = ""
    expires: datetime | None = None
    _lock: asyncio.Lock | None = None

    def due(self) -> bool:
        if not self._value:
            return True
        return self.expires is not None and (
            self.expires.timestamp() - time.time() <= EXEC_EXPIRY_MARGIN)

    async def token(self) -> str:
        if not self.due():
            return self._value
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self.due():  # another waiter may have run it meanwhile
                await self.run()
        return self._value

    async def run(self) -> None:
        """Run the plugin once: its ExecCredential's token and expiry. A failure is a
        SettingsError naming ``cluster.kubeconfig`` and the user."""
        env = {**os.environ, **self.env, "KUBERNETES_EXEC_INFO": json.dumps({
            "apiVersion": self.api_version, "kind": "ExecCredential",
            "spec": {"interactive": False}})}
        try:
            proc = await asyncio.create_subprocess_exec(
                self.command, *self.args, env=env, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        except OSError as exc:
            raise self._failed(f"cannot run {self.command}: {exc}") from exc
        try:
            out, err = await asyncio.wait_for(proc.communicate(), EXEC_TIMEOUT)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise self._failed(f"{self.command} gave no credential in {EXEC_TIMEOUT:.0f} s"
                               ) from None
        if proc.returncode != 0:
            tail = " ".join(err.decode(errors="replace").split())[-300:]
            raise self._failed(f"{self.command} exited {proc.returncode}: {tail}")
        try:
            cred = json.loads(out)
            status = cred["status"]
            token = status.get("token")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise self._failed(f"{self.command} printed no ExecCredential: {exc!r}") from None
        if not isinstance(token, str) or not token:
            # client-go also takes a client certificate from a plugin; this client does not.
            raise self._failed(f"{self.command}'s ExecCredential has no status.token "
                               "(a plugin's client certificate is not supported)")
        self._value = token
        self.expires = _timestamp(status.get("expirationTimestamp"))

    def _failed(self, why: str) -> errors.SettingsError:
        return errors.SettingsError(
            f"cluster.kubeconfig: user {self.user}'s exec plugin: {why}",
            field="cluster.kubeconfig")


def _timestamp(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None  # an unreadable expiry: ask again only on a 401's new login
    return when if when.tzinfo else when.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Connection:
    """Where one API server is and how to talk to it: what a kubeconfig's context or a
    pod's service account says, loaded (:mod:`.kubeconfig`)."""

    host: str
    """``https://host:port``, no trailing slash."""
    ca: bytes | None = None
    """The PEM of the CAs that sign the server's certificate (None: the system's)."""
    insecure: bool = False
    """``insecure-skip-tls-verify``: no check of the server's certificate."""
    server_name: str | None = None
    """``tls-server-name``: the name the server's certificate is checked against."""
    proxy: str | None = None
    """``proxy-url`` (None: the environment's HTTPS_PROXY and NO_PROXY decide)."""
    certificate: bytes | None = None
    """The client certificate's PEM, with :attr:`key`."""
    key: bytes | None = field(default=None, repr=False)
    token: Token | None = field(default=None, repr=False)
    basic: tuple[str, str] | None = field(default=None, repr=False)
    """``username`` and ``password``."""

    async def authorization(self) -> str | None:
        """The Authorization header's value (None: the client certificate, or nothing)."""
        if self.token is not None:
            return f"Bearer {await self.token.token()}"
        if self.basic is not None:
            raw = f"{self.basic[0]}:{self.basic[1]}".encode()
            return f"Basic {base64.b64encode(raw).decode()}"
        return None

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context of this connection's requests."""
        ctx = ssl.create_default_context(cadata=self.ca.decode() if self.ca else None)
        if self.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.certificate is not None and self.key is not None:
            load_certificate(ctx, self.certificate, self.key)
        return ctx


def load_certificate(ctx: ssl.SSLContext, certificate: bytes, key: bytes) -> None:
    """Load a certificate (chain) and its key given as PEM into ``ctx`` (a client's, or the
    controller's serving one): Python's ssl loads them from files only, so they pass through
    a private directory that is gone as soon as they are loaded."""
    with tempfile.TemporaryDirectory(prefix="dispatch-tls-") as d:
        cert_path, key_path = os.path.join(d, "tls.crt"), os.path.join(d, "tls.key")
        for path, data in ((cert_path, certificate), (key_path, key)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        ctx.load_cert_chain(cert_path, key_path)

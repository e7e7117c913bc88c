"""The transport: every request to the API server goes through :class:`Kube`.

It speaks JSON dictionaries (the objects as the server sends them), maps error statuses to
:mod:`dispatch_kubeflow.errors`, counts requests (for the benchmarks), and offers watches
that survive expiry (410), broken streams, stalls and API server restarts by listing again.

Its parts, one job each: :mod:`.kubeconfig` (where a connection's settings come from),
:mod:`.credentials` (what a request presents: tokens, TLS),
:mod:`.session` (the HTTP client, its proxy and pools, and what its failures mean),
:mod:`.verbs` (the request path and the verbs), :mod:`.watch` (the watch, and ``observe``
over the port), :mod:`.streams` (log streams), :mod:`.retry` (what is ridden out).

Nothing of aiohttp leaves the transport: a failure below HTTP is a
:class:`~dispatch_kubeflow.errors.KubeNoAnswer` (``status`` 0), its class decided from the
exception's type (never its message):

* :class:`~dispatch_kubeflow.errors.KubeUnreachable`: no answer (refused, reset, TLS or
  connect timeout, disconnected early);
* :class:`~dispatch_kubeflow.errors.KubeStreamBroken`: the answer broke off or went silent
  while its body was read;
* :class:`~dispatch_kubeflow.errors.KubeBadResponse`: the body was not the JSON the server
  should have sent.
"""

from __future__ import annotations

from collections import Counter

from dispatch_kubeflow.kube.credentials import Connection
from dispatch_kubeflow.kube.kubeconfig import load_connection, require_kubeconfig
from dispatch_kubeflow.kube.port import KubeAPI, Obj, PatchKind, WatchEvent
from dispatch_kubeflow.kube.session import REQUEST_CONNECTIONS, Session
from dispatch_kubeflow.kube.streams import ByteStream, LogStreams
from dispatch_kubeflow.kube.watch import (
    MAX_EVENT_BYTES,
    WATCH_BACKOFF,
    WATCH_GRACE,
    Observes,
    WatchBackoff,
    Watching,
    observe,
)

# Obj, PatchKind, WatchEvent and the watch's names live elsewhere; named here too for
# older imports.
__all__ = ["MAX_EVENT_BYTES", "TRANSIENT_WINDOW", "WATCH_BACKOFF", "WATCH_GRACE", "ByteStream",
           "Kube", "Obj", "PatchKind", "WatchBackoff", "WatchEvent", "observe",
           "require_kubeconfig"]

TRANSIENT_WINDOW = 30.0
"""How long one request rides out a refused connection, a 429 or a 503 (a caller's deadline
may cut it shorter; an API server restarting takes 10-45 s on the local cluster)."""


class Kube(Watching, LogStreams, Observes):
    """An open connection to one cluster. Close it with :meth:`close` or ``async with``."""

    def __init__(self, conn: Connection, *, request_timeout: float = 10.0,
                 watch_grace: float = WATCH_GRACE, watch_backoff: WatchBackoff = WATCH_BACKOFF,
                 transient_window: float = TRANSIENT_WINDOW,
                 connections: int = REQUEST_CONNECTIONS) -> None:
        self._session = Session(conn, connections=connections)
        self.request_timeout = request_timeout
        self.watch_grace = watch_grace
        self.watch_backoff = watch_backoff
        self.transient_window = transient_window
        self.requests = 0
        self.transient_failures = Counter()

    @classmethod
    async def connect(
        cls,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        in_cluster: bool = False,
        request_timeout: float = 10.0,
        transient_window: float = TRANSIENT_WINDOW,
        connections: int = REQUEST_CONNECTIONS,
    ) -> Kube:
        """Open from a kubeconfig file (and context) or the pod's service account.

        A SettingsError names the settings field at fault: ``cluster.kubeconfig`` (no such
        file, or one that does not load), ``cluster.inCluster`` (no service account here).
        ``connections`` bounds the requests' pool (streams have their own, unbounded).
        """
        conn = await load_connection(kubeconfig=kubeconfig, context=context,
                                     in_cluster=in_cluster)
        return cls(conn, request_timeout=request_timeout, transient_window=transient_window,
                   connections=connections)

    async def close(self) -> None:
        await self._session.close()

    async def __aenter__(self) -> Kube:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def host(self) -> str:
        return self._session.host


_IMPLEMENTS_THE_PORT: type[KubeAPI] = Kube  # mypy proves Kube is a KubeAPI

"""The session: the HTTP client below the transport (aiohttp), its TLS, credentials and
proxy, its two connection pools, and what its failures mean.

A failure below HTTP leaves here as a :class:`~dispatch_kubeflow.core.errors.KubeNoAnswer`,
its class and whether it is transient decided from the exception's type (never its message):
:func:`unreachable` when no answer came, :func:`broken` when the answer broke off.

Two connection pools: ordinary requests share one of a fixed size, while streams (watches
and followed logs, which hold a connection for minutes) each get a connection of their own
from a second, unlimited pool. So many concurrent watches never queue behind each other or
behind requests, and no timeout of a stream counts time spent waiting for a connection (a
stream has no total timeout at all: connect and silence are bounded instead).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any
from urllib.parse import urlencode

import aiohttp
from yarl import URL

from dispatch_kubeflow.core import errors
from dispatch_kubeflow.kube.credentials import Connection
from dispatch_kubeflow.kube.slots import Slots

NETWORK_ERRORS = (aiohttp.ClientError, OSError, TimeoutError)
"""What a request or a read of its body raises when the network or the server fails it
(aiohttp's ServerTimeoutError, raised by a sock_read timeout, is both a ClientError and a
TimeoutError)."""

REQUEST_CONNECTIONS = 50
"""How many connections ordinary requests share at most. Each open TLS connection holds a
256 KiB read buffer; measured with StopJob of 200 at once (bench/stops.py --pool, one run
each): 100 connections peaked at 155 MB and took 16.1 s, 50 at 139 MB and 14.6 s, 25 at
131 MB and 22.5 s. The API server, not the connection count, bounds a crowd above 50."""

Timeout = float | aiohttp.ClientTimeout
"""A request's timeout: seconds in all, or aiohttp's parts (:func:`stream_timeout`)."""


def stream_timeout(*, connect: float | None = None, sock_connect: float | None = None,
                   sock_read: float | None = None) -> aiohttp.ClientTimeout:
    """A stream's timeout: none in all (a stream may run for days), the parts given."""
    return aiohttp.ClientTimeout(total=None, connect=connect, sock_connect=sock_connect,
                                 sock_read=sock_read)


def unreachable(exc: BaseException, what: str) -> errors.KubeUnreachable:
    """The error of a request that got no answer, from the type of what it raised."""
    # A connector error means no connection was made, so nothing was sent; a TLS failure is
    # one too, but a certificate the client rejects will not mend by itself.
    return errors.KubeUnreachable(f"{what}: {exc!r}",
                                  transient=not isinstance(exc, aiohttp.ClientSSLError),
                                  sent=not isinstance(exc, aiohttp.ClientConnectorError))


def broken(exc: BaseException, what: str) -> errors.KubeStreamBroken:
    """The error of an answer that broke off or went silent while its body was read."""
    return errors.KubeStreamBroken(f"{what}: {exc!r}")


def env_proxy(host: str) -> tuple[str | None, dict[str, str]]:
    """The environment's proxy for the API server, chosen once as aiohttp would (its own
    lookup: HTTPS_PROXY, NO_PROXY, netrc credentials), and its headers. Chosen once, not per
    request: a session that trusts the environment re-reads the proxy variables and parses
    ~/.netrc in a thread for every request, which was 5 % of the controller's CPU at
    N = 200 (py-spy, docs/scale.md)."""
    from aiohttp.helpers import get_env_proxy_for_url
    from yarl import URL

    try:
        proxy, auth = get_env_proxy_for_url(URL(host))
    except LookupError:  # none set, or NO_PROXY names the host
        return None, {}
    return str(proxy), ({"Proxy-Authorization": auth.encode()} if auth is not None else {})


def _q(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


class Session:
    """The HTTP side of one connection to a cluster: sends, reads, and closes."""

    def __init__(self, conn: Connection, *, connections: int = REQUEST_CONNECTIONS) -> None:
        self.conn = conn
        self._ssl = conn.ssl_context() if conn.host.startswith("https:") else None
        self._proxy: str | None = conn.proxy
        self._proxy_headers: dict[str, str] = {}
        if self._proxy is None:
            self._proxy, self._proxy_headers = env_proxy(conn.host)
        self._requests = self._client(connections)
        self._streams: aiohttp.ClientSession | None = None  # made on first use
        self._slots = Slots(connections) if connections > 0 else None
        """One per connection of the requests' pool, handed out oldest call first (None:
        the pool has no limit)."""

    def _client(self, limit: int) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=limit, ssl=self._ssl or True),
            trust_env=False,  # the proxy is chosen once, above
            # A watch event can hold an object of up to etcd's 1.5 MiB request limit.
            read_bufsize=2**21)

    @property
    def host(self) -> str:
        return self.conn.host

    def slot(self, stream: bool) -> AbstractAsyncContextManager[Any]:
        """Hold it while a request uses a connection of the requests' pool.

        Waiting for a free connection happens here, before the request's timeout starts:
        aiohttp counts the wait for its own pool in the total timeout, so a request queued
        behind a hundred others could time out without having been sent (StopJob of 1,000
        at once: 323 pod DELETEs timed out at 30 s, issue 11). The call's own deadline
        bounds this wait instead. Among waiting requests the oldest call's goes first
        (:mod:`.slots`). Streams have a pool of their own, without a limit."""
        return self._slots if not stream and self._slots is not None else nullcontext()

    def stream_client(self) -> aiohttp.ClientSession:
        """The client of long-lived streams: same TLS, auth and proxy, no connection limit,
        so a stream never waits for another one to end."""
        if self._streams is None:
            self._streams = self._client(0)
        return self._streams

    async def authorize(self, query: Mapping[str, Any] | None,
                        headers: dict[str, str]) -> list[tuple[str, str]]:
        """Add the credentials to ``headers``; the query's parameters (None values left
        out). Done before a connection is waited for."""
        auth = await self.conn.authorization()
        if auth is not None:
            headers["Authorization"] = auth
        return [(k, _q(v)) for k, v in (query or {}).items() if v is not None]

    async def request(self, method: str, path: str, *, params: list[tuple[str, str]],
                      body: Any, headers: dict[str, str], timeout: Timeout,
                      stream: bool) -> aiohttp.ClientResponse:
        """Send one request; its response, body unread. KubeUnreachable when no answer
        came. ``body``: bytes as they are, anything else as JSON (every content type the
        transport sends is JSON, server-side apply's YAML included)."""
        client = self.stream_client() if stream else self._requests
        url = self.host + path + ("?" + urlencode(params) if params else "")
        data = body if body is None or isinstance(body, bytes) else json.dumps(body)
        try:
            return await client.request(
                method, URL(url, encoded=True), data=data, headers=headers,
                timeout=timeout if isinstance(timeout, aiohttp.ClientTimeout)
                else aiohttp.ClientTimeout(total=timeout),
                proxy=self._proxy, proxy_headers=self._proxy_headers or None,
                server_hostname=self.conn.server_name)
        except NETWORK_ERRORS as exc:
            raise unreachable(exc, f"{method} {path}") from exc

    @staticmethod
    async def read(resp: aiohttp.ClientResponse, what: str) -> bytes:
        """The whole body, the connection released for another request; KubeStreamBroken
        when it broke off (the connection then closed: never reused)."""
        try:
            raw = await resp.read()
        except NETWORK_ERRORS as exc:
            resp.close()
            raise broken(exc, f"{what}: reading the answer failed") from exc
        except BaseException:
            resp.close()
            raise
        resp.release()
        return raw

    async def close(self) -> None:
        try:
            if self._streams is not None:
                await self._streams.close()
        finally:
            await self._requests.close()

"""The session: the HTTP client below the transport (aiohttp, through kubernetes-asyncio's
REST client), its proxy, its two connection pools, and what its failures mean.

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

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import TYPE_CHECKING, Any

import aiohttp

from dispatch_kubeflow.core import errors
from dispatch_kubeflow.kube.slots import Slots

if TYPE_CHECKING:
    from kubernetes_asyncio import client as k8s_client

NETWORK_ERRORS = (aiohttp.ClientError, OSError, TimeoutError)
"""What a request or a read of its body raises when the network or the server fails it
(aiohttp's ServerTimeoutError, raised by a sock_read timeout, is both a ClientError and a
TimeoutError)."""

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


def _proxy_once(rest: Any, host: str | None) -> None:
    """Choose the environment's proxy for the API server once, as aiohttp would (its own
    lookup: HTTPS_PROXY, NO_PROXY, netrc credentials), and stop aiohttp choosing it again per
    request: kubernetes_asyncio's session trusts the environment, so every request re-read
    the proxy variables and parsed ~/.netrc in a thread, 5 % of the controller's CPU at
    N = 200 (py-spy, docs/scale.md)."""
    session = rest.pool_manager
    if not getattr(session, "_trust_env", False):
        return
    if not rest.proxy and host:
        from aiohttp.helpers import get_env_proxy_for_url
        from yarl import URL

        try:
            proxy, auth = get_env_proxy_for_url(URL(host))
        except LookupError:  # none set, or NO_PROXY names the host
            pass
        else:
            rest.proxy = str(proxy)
            if auth is not None:
                rest.proxy_headers = {**(rest.proxy_headers or {}),
                                      "Proxy-Authorization": auth.encode()}
    session._trust_env = False  # aiohttp keeps the flag there; no public setter


def _pool_limit(rest_client: Any) -> int:
    """How many connections the requests' pool opens at most (0: no limit)."""
    connector = getattr(getattr(rest_client, "pool_manager", None), "connector", None)
    return int(getattr(connector, "limit", 0) or 0)


def _q(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


class Session:
    """The HTTP side of one connection to a cluster: sends, reads, and closes."""

    def __init__(self, api: k8s_client.ApiClient) -> None:
        self.api = api
        _proxy_once(api.rest_client, api.configuration.host)
        self._streams: Any = None  # the RESTClientObject of streams, made on first use
        limit = _pool_limit(api.rest_client)
        self._slots = Slots(limit) if limit > 0 else None
        """One per connection of the requests' pool, handed out oldest call first (None:
        the pool has no limit)."""

    @property
    def host(self) -> str:
        return str(self.api.configuration.host)

    def slot(self, stream: bool) -> AbstractAsyncContextManager[Any]:
        """Hold it while a request uses a connection of the requests' pool.

        Waiting for a free connection happens here, before the request's timeout starts:
        aiohttp counts the wait for its own pool in the total timeout, so a request queued
        behind a hundred others could time out without having been sent (StopJob of 1,000
        at once: 323 pod DELETEs timed out at 30 s, issue 11). The call's own deadline
        bounds this wait instead. Among waiting requests the oldest call's goes first
        (:mod:`.slots`). Streams have a pool of their own, without a limit."""
        return self._slots if not stream and self._slots is not None else nullcontext()

    def stream_client(self) -> Any:
        """The client of long-lived streams: same TLS, auth and proxy, no connection limit
        (``maxsize=0``), so a stream never waits for another one to end."""
        if self._streams is None:
            from kubernetes_asyncio.client import rest as k8s_rest

            self._streams = k8s_rest.RESTClientObject(self.api.configuration, maxsize=0)
            _proxy_once(self._streams, self.api.configuration.host)
        return self._streams

    async def authorize(self, query: Mapping[str, Any] | None,
                        headers: dict[str, str]) -> list[tuple[str, str]]:
        """Add the credentials to ``headers``; the query's parameters (None values left
        out) and the credentials' own. Done before a connection is waited for."""
        queries: list[tuple[str, Any]] = []
        await self.api.update_params_for_auth(headers, queries, ["BearerToken"])
        return [(k, _q(v)) for k, v in (query or {}).items() if v is not None] + queries

    async def request(self, method: str, path: str, *, params: list[tuple[str, str]],
                      body: Any, headers: dict[str, str], timeout: Timeout,
                      stream: bool) -> aiohttp.ClientResponse:
        """Send one request; its response, body unread. KubeUnreachable when no answer
        came."""
        client = self.stream_client() if stream else self.api.rest_client
        try:
            resp: aiohttp.ClientResponse = await client.request(
                method, self.host + path, query_params=params,  # type: ignore[arg-type]  # urlencode takes pairs
                headers=headers, body=body,
                _preload_content=False, _request_timeout=timeout,
            )
        except NETWORK_ERRORS as exc:
            raise unreachable(exc, f"{method} {path}") from exc
        return resp

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
            await self.api.close()

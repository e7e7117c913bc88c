"""The transport: every request to the API server goes through :class:`Kube`.

It speaks JSON dictionaries (the objects as the server sends them), maps error statuses to
:mod:`dispatch_kubeflow.errors`, counts requests (for the benchmarks), and offers watches
that survive expiry (410), broken streams, stalls and API server restarts by listing again.

Nothing of aiohttp leaves this module: a failure below HTTP is a :class:`~dispatch_kubeflow.
errors.KubeError` with ``status`` 0 and a ``reason`` that says which kind, decided from the
exception's type (never its message):

* ``Unreachable``: no answer (refused, reset, TLS or connect timeout, disconnected early);
* ``StreamBroken``: the answer broke off or went silent while its body was read;
* ``BadResponse``: the body was not the JSON the server should have sent.

Two connection pools: ordinary requests share one of a fixed size, as before, while streams
(watches and followed logs, which hold a connection for minutes) each get a connection of
their own from a second, unlimited pool. So many concurrent watches never queue behind each
other or behind requests, and no timeout of a stream counts time spent waiting for a
connection (a stream has no total timeout at all: connect and silence are bounded instead).
"""

from __future__ import annotations

import asyncio
import builtins
import collections
import json
import logging
import os
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp

from dispatch_kubeflow.core import errors
from dispatch_kubeflow.kube import retry
from dispatch_kubeflow.kube.port import KubeAPI, Obj, PatchKind, WatchEvent
from dispatch_kubeflow.kube.resources import SELF_SUBJECT_ACCESS_REVIEW, Resource

# Obj, PatchKind and WatchEvent are the port's; named here too for older imports.
__all__ = ["WATCH_BACKOFF", "ByteStream", "Kube", "Obj", "PatchKind", "WatchBackoff",
           "WatchEvent", "observe", "require_kubeconfig"]

log = logging.getLogger(__name__)

_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}


_NETWORK_ERRORS = (aiohttp.ClientError, OSError, TimeoutError)
"""What a request or a read of its body raises when the network or the server fails it
(aiohttp's ServerTimeoutError, raised by a sock_read timeout, is both a ClientError and a
TimeoutError)."""
MAX_EVENT_BYTES = 64 << 20
"""The longest watch event read: far past any object the API server stores (etcd's request
limit is 1.5 MiB by default), short of letting a broken stream take the memory."""


class _Lines:
    """A stream's lines, whatever their length up to MAX_EVENT_BYTES. aiohttp's own
    readline() raises LineTooLong, outside the error tree, past its buffer's limit; this
    reads what has arrived and splits it here, every complete line of a chunk at once."""

    def __init__(self, resp: aiohttp.ClientResponse, path: str) -> None:
        self.resp = resp
        self.path = path
        self.ready: collections.deque[bytes] = collections.deque()
        self.partial = bytearray()

    async def next(self) -> bytes | None:
        """The next line (without its newline; b"" for an empty one), None at the end."""
        while not self.ready:
            try:
                chunk = await self.resp.content.readany()
            except _NETWORK_ERRORS as exc:
                raise errors.KubeError(f"watch GET {self.path}: the stream broke: {exc!r}",
                                       status=0, reason="StreamBroken") from exc
            if not chunk:
                if not self.partial:
                    return None
                line, self.partial = bytes(self.partial), bytearray()
                return line
            *complete, rest = chunk.split(b"\n")
            if complete:
                self.partial += complete[0]
                self.ready.append(bytes(self.partial))
                self.ready.extend(complete[1:])
                self.partial = bytearray(rest)
            else:
                self.partial += rest
            if len(self.partial) > MAX_EVENT_BYTES:
                raise errors.KubeError(f"watch GET {self.path}: an event longer than "
                                       f"{MAX_EVENT_BYTES >> 20} MiB", status=0,
                                       reason="BadResponse")
        return self.ready.popleft()


_METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
"""Accept for a list of the items' metadata alone (the API server serves it for every kind;
its items are PartialObjectMetadata, given back their own kind here)."""


@dataclass(frozen=True, slots=True)
class WatchBackoff:
    """How :func:`observe` waits before listing or watching again."""

    first: float = 0.2
    """After the first failure (and after a quick end); doubled after each further one."""
    most: float = 5.0
    quick_end: float = 1.0
    """A watch that ends within this many seconds with no event is backed off from."""


WATCH_BACKOFF = WatchBackoff()

TRANSIENT_WINDOW = 30.0
"""How long one request rides out a refused connection, a 429 or a 503 (a caller's deadline
may cut it shorter; an API server restarting takes 10-45 s on the local cluster)."""
WATCH_GRACE = 30.0
"""How long past a watch's ``timeoutSeconds`` the server may stay silent before the watch
counts as stalled (and is opened again from a fresh list)."""


_FIX_KUBECONFIG = ("set cluster.kubeconfig to an existing kubeconfig file (or cluster.inCluster "
                   "to true in a pod)")


def require_kubeconfig(kubeconfig: str | None) -> None:
    """A SettingsError naming ``cluster.kubeconfig`` when there is no kubeconfig file to load:
    ``kubeconfig``, else those of $KUBECONFIG (one is enough), else ~/.kube/config."""
    if kubeconfig:
        if not os.path.isfile(os.path.expanduser(kubeconfig)):
            raise errors.SettingsError(
                f"cluster.kubeconfig: no such file {kubeconfig}; {_FIX_KUBECONFIG}",
                field="cluster.kubeconfig")
        return
    env = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    candidates = env or [os.path.expanduser("~/.kube/config")]
    if not any(os.path.isfile(p) for p in candidates):
        where = "in $KUBECONFIG (" + ", ".join(env) + ")" if env else "~/.kube/config"
        raise errors.SettingsError(
            f"cluster.kubeconfig: not set, and no such file {where}; {_FIX_KUBECONFIG}",
            field="cluster.kubeconfig")


if TYPE_CHECKING:
    # Imported where a connection is made, not with this module: the client package loads
    # every API model (half a second), which code that never connects need not pay.
    from kubernetes_asyncio import client as k8s_client


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


class Kube:
    """An open connection to one cluster. Close it with :meth:`close` or ``async with``."""

    def __init__(self, api: k8s_client.ApiClient, *, request_timeout: float = 10.0,
                 watch_grace: float = WATCH_GRACE, watch_backoff: WatchBackoff = WATCH_BACKOFF,
                 transient_window: float = TRANSIENT_WINDOW) -> None:
        self._api = api
        _proxy_once(api.rest_client, api.configuration.host)
        self._streams: Any = None  # the RESTClientObject of streams, made on first use
        limit = _pool_limit(api.rest_client)
        self._slots = asyncio.Semaphore(limit) if limit > 0 else None
        """One per connection of the requests' pool (None: the pool has no limit)."""
        self.request_timeout = request_timeout
        self.watch_grace = watch_grace
        self.watch_backoff = watch_backoff
        self.transient_window = transient_window
        """Seconds one request rides out transient failures at most (:mod:`.retry`)."""
        self.requests = 0
        """How many requests were sent (benchmarks read it)."""

    # --- opening ------------------------------------------------------------------------
    @classmethod
    async def connect(
        cls,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        in_cluster: bool = False,
        request_timeout: float = 10.0,
        transient_window: float = TRANSIENT_WINDOW,
    ) -> Kube:
        """Open from a kubeconfig file (and context) or the pod's service account.

        A SettingsError names the settings field at fault: ``cluster.kubeconfig`` (no such
        file, or one that does not load), ``cluster.inCluster`` (no service account here).
        """
        import yaml  # kubernetes_asyncio's own YAML loader, for its error type
        from kubernetes_asyncio import client as k8s_client
        from kubernetes_asyncio import config as k8s_config

        cfg = k8s_client.Configuration()
        if in_cluster:
            try:
                k8s_config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
            except (k8s_config.ConfigException, OSError, TypeError, ValueError) as exc:
                raise errors.SettingsError(
                    f"cluster.inCluster: cannot use the pod's service account: {exc}",
                    field="cluster.inCluster") from exc
        else:
            require_kubeconfig(kubeconfig)
            try:
                await k8s_config.load_kube_config(
                    config_file=kubeconfig, context=context, client_configuration=cfg
                )
            except (k8s_config.ConfigException, OSError, TypeError, ValueError,
                    yaml.YAMLError) as exc:  # not YAML at all: one line, not a traceback
                where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
                how = f" with context {context}" if context else ""
                why = " ".join(str(exc).split())  # a YAML error spans lines: one line here
                raise errors.SettingsError(
                    f"cluster.kubeconfig: cannot load {where}{how}: {why}",
                    field="cluster.kubeconfig") from exc
        return cls(k8s_client.ApiClient(configuration=cfg), request_timeout=request_timeout,
                   transient_window=transient_window)

    async def close(self) -> None:
        try:
            if self._streams is not None:
                await self._streams.close()
        finally:
            await self._api.close()

    def _stream_client(self) -> Any:
        """The client of long-lived streams: same TLS, auth and proxy, no connection limit
        (``maxsize=0``), so a stream never waits for another one to end."""
        if self._streams is None:
            from kubernetes_asyncio.client import rest as k8s_rest

            self._streams = k8s_rest.RESTClientObject(self._api.configuration, maxsize=0)
            _proxy_once(self._streams, self._api.configuration.host)
        return self._streams

    async def __aenter__(self) -> Kube:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def host(self) -> str:
        return str(self._api.configuration.host)

    # --- the one request path -----------------------------------------------------------
    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | aiohttp.ClientTimeout | None = None,
        stream: bool = False,
        accept: str = "application/json",
    ) -> Any:
        """One request, retrying transient failures (:mod:`.retry`). Streams are not
        retried here: their callers (``observe``) list again themselves."""
        if stream:
            return await self._send_once(method, path, query=query, body=body,
                                         content_type=content_type, timeout=timeout,
                                         stream=True)
        tries = retry.Backoff(self.transient_window)
        while True:
            try:
                return await self._send_once(method, path, query=query, body=body,
                                             content_type=content_type, timeout=timeout,
                                             accept=accept)
            except errors.KubeError as exc:
                wait = tries.next(exc) if retry.transient(exc, method) else None
                if wait is None:
                    raise
                log.info("%s %s: %s; try %d in %.1fs", method, path, exc, tries.tries, wait)
                await asyncio.sleep(wait)

    async def _send_once(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | aiohttp.ClientTimeout | None = None,
        stream: bool = False,
        accept: str = "application/json",
    ) -> Any:
        headers: dict[str, str] = {"Accept": accept, "Content-Type": content_type}
        queries: list[tuple[str, Any]] = []
        await self._api.update_params_for_auth(headers, queries, ["BearerToken"])
        params = [(k, _q(v)) for k, v in (query or {}).items() if v is not None] + queries
        url = str(self._api.configuration.host) + path
        if timeout is None:
            timeout = self.request_timeout
        self.requests += 1
        # Wait for a free connection of the pool here, before the request's timeout starts:
        # aiohttp counts the wait for its own pool in the total timeout, so a request queued
        # behind a hundred others could time out without having been sent (StopJob of 1,000
        # at once: 323 pod DELETEs timed out at 30 s, issue 11). The call's own deadline
        # bounds this wait instead. Streams have a pool of their own, without a limit.
        slot = self._slots if not stream and self._slots is not None else nullcontext()
        async with slot:
            client = self._stream_client() if stream else self._api.rest_client
            try:
                resp = await client.request(
                    method, url, query_params=params,  # type: ignore[arg-type]  # urlencode takes pairs
                    headers=headers, body=body,
                    _preload_content=False, _request_timeout=timeout,
                )
            except _NETWORK_ERRORS as exc:
                raise errors.KubeError(f"{method} {path}: {exc!r}", status=0,
                                       reason="Unreachable") from exc
            ok = 200 <= resp.status <= 299
            if ok and stream:
                return resp
            try:
                raw = await resp.read()
            except _NETWORK_ERRORS as exc:
                resp.close()  # broken mid-body: never reuse the connection
                raise errors.KubeError(f"{method} {path}: reading the answer failed: {exc!r}",
                                       status=0, reason="StreamBroken") from exc
            except BaseException:
                resp.close()
                raise
            resp.release()
            if not ok:
                try:
                    status_body = json.loads(raw) if raw else {}
                except ValueError:
                    status_body = {"message": raw.decode(errors="replace")}
                if not isinstance(status_body, dict):
                    status_body = {"message": raw.decode(errors="replace")}
                raise errors.kube_error(resp.status, status_body, f"{method} {path}")
            try:
                return json.loads(raw) if raw else {}
            except ValueError as exc:
                raise errors.KubeError(f"{method} {path}: the answer is not JSON: {exc}",
                                       status=0, reason="BadResponse") from exc

    # --- verbs ---------------------------------------------------------------------------
    async def get(self, res: Resource, name: str, namespace: str | None = None,
                  *, subresource: str | None = None) -> Obj:
        obj: Obj = await self._send("GET", res.path(namespace, name, subresource))
        return obj

    async def get_or_none(self, res: Resource, name: str,
                          namespace: str | None = None) -> Obj | None:
        try:
            return await self.get(res, name, namespace)
        except errors.KubeNotFound:
            return None

    async def list(self, res: Resource, namespace: str | None = None, *,
                   label_selector: str | None = None,
                   field_selector: str | None = None,
                   trim: Callable[[Obj], Obj] | None = None,
                   metadata: bool = False) -> tuple[list[Obj], str]:
        """All items (following ``continue``: one consistent read) and the list's
        resourceVersion; ``trim`` applied to each item as its page arrives. ``metadata``:
        the server sends each item's metadata alone (a PartialObjectMetadataList)."""
        items: list[Obj] = []
        cont: str | None = None
        while True:
            page = await self._send("GET", res.path(namespace), query={
                "labelSelector": label_selector, "fieldSelector": field_selector,
                # A page is parsed whole before it is trimmed: smaller pages bound what a
                # trimmed list (an informer's, of a whole namespace) holds at once, 100 pods
                # about 5 MB, for a few more requests of a list made once per informer.
                # Metadata alone is a tenth of that.
                "limit": 500 if trim is None or metadata else 100, "continue": cont,
            }, accept=_METADATA_LIST if metadata else "application/json")
            for item in page.pop("items", None) or []:
                if metadata:
                    item["apiVersion"], item["kind"] = res.api_version, res.kind
                item.setdefault("apiVersion", res.api_version)
                item.setdefault("kind", res.kind)
                items.append(item if trim is None else trim(item))
            cont = (page.get("metadata") or {}).get("continue")
            if not cont:
                return items, str((page.get("metadata") or {}).get("resourceVersion", ""))

    async def create(self, res: Resource, body: Obj, namespace: str | None = None, *,
                     dry_run: bool = False, field_manager: str | None = None,
                     name: str | None = None, subresource: str | None = None) -> Obj:
        """POST a new object; with ``name`` and ``subresource``, POST to that subresource
        (e.g. ``serviceaccounts/<name>/token``; ``body`` then names its own kind)."""
        if subresource and not name:
            raise ValueError("a subresource needs the object's name")
        body = {"apiVersion": res.api_version, "kind": res.kind, **body}
        obj: Obj = await self._send("POST", res.path(namespace, name, subresource), body=body,
                                    query={"dryRun": "All" if dry_run else None,
                                           "fieldManager": field_manager})
        return obj

    async def replace(self, res: Resource, body: Obj, namespace: str | None = None, *,
                      subresource: str | None = None) -> Obj:
        name = body["metadata"]["name"]
        obj: Obj = await self._send("PUT", res.path(namespace, name, subresource), body=body)
        return obj

    async def patch(self, res: Resource, name: str, patch: Any, namespace: str | None = None,
                    *, kind: PatchKind = "merge", subresource: str | None = None,
                    field_manager: str | None = None, force: bool = False,
                    dry_run: bool = False) -> Obj:
        """PATCH with the given content type. ``apply`` is server-side apply; ``dry_run``
        runs every admission step and persists nothing."""
        if kind == "apply" and not field_manager:
            raise ValueError("server-side apply needs a field manager")
        obj: Obj = await self._send(
            "PATCH", res.path(namespace, name, subresource), body=patch,
            content_type=_CONTENT_TYPES[kind],
            query={"fieldManager": field_manager, "force": "true" if force else None,
                   "dryRun": "All" if dry_run else None},
        )
        return obj

    async def delete(self, res: Resource, name: str, namespace: str | None = None, *,
                     uid: str | None = None, propagation: str = "Background",
                     grace_period: int | None = None) -> Obj | None:
        """Delete, optionally only the object with this UID. None when it was already gone."""
        body: Obj = {"kind": "DeleteOptions", "apiVersion": "v1",
                     "propagationPolicy": propagation}
        if uid:
            body["preconditions"] = {"uid": uid}
        if grace_period is not None:
            body["gracePeriodSeconds"] = grace_period
        try:
            obj: Obj = await self._send("DELETE", res.path(namespace, name), body=body)
        except errors.KubeNotFound:
            return None
        return obj

    # --- watches -------------------------------------------------------------------------
    async def watch(self, res: Resource, namespace: str | None = None, *,
                    resource_version: str = "", label_selector: str | None = None,
                    field_selector: str | None = None,
                    timeout_seconds: int = 290) -> AsyncIterator[WatchEvent]:
        """Raw watch from a resourceVersion. Raises KubeGone when it expired.

        Ends when the server ends the watch (after ``timeout_seconds``). A stream that
        breaks, or stays silent ``watch_grace`` seconds past ``timeout_seconds`` (a stall),
        raises KubeError (status 0, reason ``StreamBroken``); an undecodable event raises
        KubeError (status 0, ``BadResponse``). No timeout counts time spent waiting for a
        connection: connecting is bounded by the request timeout, the stream by silence.
        """
        path = res.path(namespace)
        resp = await self._send(
            "GET", path, stream=True,
            query={"watch": "true", "resourceVersion": resource_version or None,
                   "allowWatchBookmarks": "true", "labelSelector": label_selector,
                   "fieldSelector": field_selector, "timeoutSeconds": timeout_seconds},
            timeout=aiohttp.ClientTimeout(total=None, connect=None,
                                          sock_connect=self.request_timeout,
                                          sock_read=timeout_seconds + self.watch_grace),
        )
        ended = False
        lines = _Lines(resp, path)
        try:
            while True:
                line = await lines.next()
                if line is None:
                    ended = True
                    return
                if not line.strip():
                    continue
                ev = _event(line, path)
                typ, obj = ev["type"], ev["object"]
                if typ == "ERROR":
                    raise errors.kube_error(int(obj.get("code") or 500), obj, "watch error")
                if typ == "BOOKMARK":
                    continue
                obj.setdefault("apiVersion", res.api_version)
                obj.setdefault("kind", res.kind)
                yield WatchEvent(typ, obj)
        finally:
            if ended:
                resp.release()  # read to its end: the connection may serve again
            else:
                resp.close()  # broken, stalled or abandoned mid-stream: never reuse it

    def observe(self, res: Resource, namespace: str | None = None, *,
                label_selector: str | None = None,
                field_selector: str | None = None,
                timeout_seconds: int = 290,
                trim: Callable[[Obj], Obj] | None = None) -> AsyncIterator[WatchEvent]:
        """List, then watch, surviving expiry and failures: see :func:`observe`."""
        return observe(self, res, namespace, label_selector=label_selector,
                       field_selector=field_selector, timeout_seconds=timeout_seconds,
                       backoff=self.watch_backoff, trim=trim)

    # --- special endpoints ---------------------------------------------------------------
    async def served_versions(self, group: str) -> builtins.list[str]:
        """The versions the server serves for an API group ([] when the group is absent)."""
        try:
            doc = await self._send("GET", f"/apis/{group}")
        except errors.KubeNotFound:
            return []
        return [str(v.get("version")) for v in doc.get("versions") or []]

    async def access_review(self, verb: str, resource: str, *, group: str = "",
                            namespace: str | None = None, subresource: str | None = None,
                            name: str | None = None) -> tuple[bool, str]:
        """Ask whether the caller may do ``verb`` on ``resource`` (SelfSubjectAccessReview)."""
        attrs = {k: v for k, v in {
            "verb": verb, "group": group, "resource": resource, "namespace": namespace,
            "subresource": subresource, "name": name}.items() if v}
        out = await self.create(SELF_SUBJECT_ACCESS_REVIEW, {"spec": {"resourceAttributes": attrs}})
        status = out.get("status") or {}
        reason = status.get("reason") or status.get("evaluationError") or ""
        return bool(status.get("allowed")), str(reason)

    async def open_pod_log(self, name: str, namespace: str, *, container: str | None = None,
                           follow: bool = False, stream: str | None = None) -> ByteStream:
        """A pod's log as an open stream of chunks; the request is answered (or its error
        raised) before this returns. ``stream`` is Stdout / Stderr / All where the server
        splits them.

        Reads have no total timeout (a followed log may run for days); a non-followed read
        fails when the server stays silent for the request timeout.
        """
        resp = await self._send(
            "GET", f"/api/v1/namespaces/{namespace}/pods/{name}/log", stream=True,
            query={"container": container, "follow": "true" if follow else None,
                   "stream": stream},
            timeout=aiohttp.ClientTimeout(
                total=None, connect=self.request_timeout,
                sock_read=None if follow else self.request_timeout),
        )
        return ByteStream(resp)


async def observe(api: KubeAPI, res: Resource, namespace: str | None = None, *,
                  label_selector: str | None = None, field_selector: str | None = None,
                  timeout_seconds: int = 290,
                  backoff: WatchBackoff = WATCH_BACKOFF,
                  trim: Callable[[Obj], Obj] | None = None) -> AsyncIterator[WatchEvent]:
    """List, then watch; yields a SYNC event with every list. ``trim``: what is kept of
    each object listed (page by page) or watched.

    Lists again (and yields SYNC) after a 410, and, with a back-off (by default 0.2 s
    doubling to 5 s), after any other failure of the list or the watch: the server unreachable or
    restarting, a broken or stalled stream, an error status. Only 401, 403 and 404 end
    it (raised). The stream never ends by itself otherwise: cancel the consumer.

    Written against the port alone, so every :class:`KubeAPI` (the unit tests' fake too)
    observes the same way.
    """
    delay = backoff.first
    while True:
        try:
            items, rv = await api.list(res, namespace, label_selector=label_selector,
                                       field_selector=field_selector, trim=trim)
            # The list's resourceVersion rides on the SYNC: where a cache of it is at.
            yield WatchEvent("SYNC", {"metadata": {"resourceVersion": rv}}, tuple(items))
            while True:
                loop = asyncio.get_running_loop()
                began, seen = loop.time(), 0
                async for ev in api.watch(res, namespace, resource_version=rv,
                                          label_selector=label_selector,
                                          field_selector=field_selector,
                                          timeout_seconds=timeout_seconds):
                    rv = str(ev.object.get("metadata", {}).get("resourceVersion", rv))
                    seen += 1
                    delay = backoff.first  # the server is answering again
                    yield ev if trim is None else WatchEvent(ev.type, trim(ev.object))
                if not seen and loop.time() - began >= backoff.quick_end:
                    delay = backoff.first  # a quiet watch that ran its course
                elif not seen:
                    # Ended at once with nothing: a server shutting down, or one that
                    # cuts watches short. Back off rather than spin.
                    log.debug("watch of %s ended at once; again in %.1fs",
                              res.plural, delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, backoff.most)
        except errors.KubeGone:
            log.debug("watch of %s expired; listing again", res.plural)
        except errors.KubeError as exc:
            if exc.status in (401, 403, 404):
                raise
            log.warning("watch of %s failed: %s; retrying in %.1fs", res.plural, exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, backoff.most)


_IMPLEMENTS_THE_PORT: type[KubeAPI] = Kube  # mypy proves Kube is a KubeAPI


class ByteStream:
    """An open streaming response: iterate for chunks; :meth:`aclose` releases it."""

    def __init__(self, resp: Any) -> None:
        self._resp = resp

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in _chunks_of(self._resp, "GET pod log"):
                yield chunk
        finally:
            self._resp.release()

    async def aclose(self) -> None:
        self._resp.release()


async def _chunks_of(resp: Any, what: str) -> AsyncIterator[bytes]:
    """A streaming body's chunks; a break or stall while reading is KubeError StreamBroken."""
    while True:
        try:
            chunk: bytes = await resp.content.readany()
        except _NETWORK_ERRORS as exc:
            raise errors.KubeError(f"{what}: the stream broke: {exc!r}", status=0,
                                   reason="StreamBroken") from exc
        if not chunk:
            return
        yield chunk


def _event(line: bytes, path: str) -> dict[str, Any]:
    """One line of a watch stream as {"type": str, "object": dict}; KubeError if it is not."""
    try:
        ev = json.loads(line)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise errors.KubeError(f"watch GET {path}: an event is not JSON: {exc}",
                               status=0, reason="BadResponse") from exc
    if not (isinstance(ev, dict) and isinstance(ev.get("type"), str)
            and isinstance(ev.get("object") or {}, dict)):
        raise errors.KubeError(f"watch GET {path}: an event is not a watch event: "
                               f"{line[:200]!r}", status=0, reason="BadResponse")
    return {"type": ev["type"], "object": ev.get("object") or {}}


def _q(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)

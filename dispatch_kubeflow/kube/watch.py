"""Watching: the raw watch of :class:`~dispatch_kubeflow.kube.Kube` (its lines read at any
length an object can have), and :func:`observe`, list-then-watch written once over the port,
which the transport and every other :class:`~dispatch_kubeflow.kube.KubeAPI` (the unit
tests' fake) offer through :class:`Observes`.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp

from dispatch_kubeflow.core import errors
from dispatch_kubeflow.kube.port import KubeAPI, Obj, WatchEvent
from dispatch_kubeflow.kube.resources import Resource
from dispatch_kubeflow.kube.session import NETWORK_ERRORS, broken, stream_timeout
from dispatch_kubeflow.kube.verbs import Requests

log = logging.getLogger(__name__)

MAX_EVENT_BYTES = 64 << 20
"""The longest watch event read: far past any object the API server stores (etcd's request
limit is 1.5 MiB by default), short of letting a broken stream take the memory."""
WATCH_GRACE = 30.0
"""How long past a watch's ``timeoutSeconds`` the server may stay silent before the watch
counts as stalled (and is opened again from a fresh list)."""


@dataclass(frozen=True, slots=True)
class WatchBackoff:
    """How :func:`observe` waits before listing or watching again."""

    first: float = 0.2
    """After the first failure (and after a quick end); doubled after each further one."""
    most: float = 5.0
    quick_end: float = 1.0
    """A watch that ends within this many seconds with no event is backed off from."""


WATCH_BACKOFF = WatchBackoff()


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
            except NETWORK_ERRORS as exc:
                raise broken(exc, f"watch GET {self.path}: the stream broke") from exc
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
                raise errors.KubeBadResponse(f"watch GET {self.path}: an event longer than "
                                             f"{MAX_EVENT_BYTES >> 20} MiB")
        return self.ready.popleft()


def _event(line: bytes, path: str) -> dict[str, Any]:
    """One line of a watch stream as {"type": str, "object": dict}; KubeBadResponse if it
    is not."""
    try:
        ev = json.loads(line)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise errors.KubeBadResponse(f"watch GET {path}: an event is not JSON: {exc}") from exc
    if not (isinstance(ev, dict) and isinstance(ev.get("type"), str)
            and isinstance(ev.get("object") or {}, dict)):
        raise errors.KubeBadResponse(f"watch GET {path}: an event is not a watch event: "
                                     f"{line[:200]!r}")
    return {"type": ev["type"], "object": ev.get("object") or {}}


class Watching(Requests):
    """The raw watch of the transport; :class:`~dispatch_kubeflow.kube.Kube` sets the
    attributes."""

    watch_grace: float

    async def watch(self, res: Resource, namespace: str | None = None, *,
                    resource_version: str = "", label_selector: str | None = None,
                    field_selector: str | None = None,
                    timeout_seconds: int = 290) -> AsyncIterator[WatchEvent]:
        """Raw watch from a resourceVersion. Raises KubeGone when it expired.

        Ends when the server ends the watch (after ``timeout_seconds``). A stream that
        breaks, or stays silent ``watch_grace`` seconds past ``timeout_seconds`` (a stall),
        raises KubeStreamBroken; an undecodable event raises KubeBadResponse. No timeout
        counts time spent waiting for a connection: connecting is bounded by the request
        timeout, the stream by silence.
        """
        path = res.path(namespace)
        resp = await self._send(
            "GET", path, stream=True,
            query={"watch": "true", "resourceVersion": resource_version or None,
                   "allowWatchBookmarks": "true", "labelSelector": label_selector,
                   "fieldSelector": field_selector, "timeoutSeconds": timeout_seconds},
            timeout=stream_timeout(sock_connect=self.request_timeout,
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


class _Observable(KubeAPI, Protocol):
    watch_backoff: WatchBackoff


class Observes:
    """The port's ``observe`` for a KubeAPI with a ``watch_backoff``: :func:`observe` over
    its own list and watch. The transport and the unit tests' fake both inherit it, so
    there is one observe."""

    def observe(self: _Observable, res: Resource, namespace: str | None = None, *,
                label_selector: str | None = None,
                field_selector: str | None = None,
                timeout_seconds: int = 290,
                trim: Callable[[Obj], Obj] | None = None) -> AsyncIterator[WatchEvent]:
        """List, then watch, surviving expiry and failures: see :func:`observe`."""
        return observe(self, res, namespace, label_selector=label_selector,
                       field_selector=field_selector, timeout_seconds=timeout_seconds,
                       backoff=self.watch_backoff, trim=trim)

"""Streams: a pod's log as an open stream of chunks, read with no total timeout."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from dispatch_kubeflow.kube.session import NETWORK_ERRORS, broken, stream_timeout
from dispatch_kubeflow.kube.verbs import Requests


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
    """A streaming body's chunks; a break or stall while reading is KubeStreamBroken."""
    while True:
        try:
            chunk: bytes = await resp.content.readany()
        except NETWORK_ERRORS as exc:
            raise broken(exc, f"{what}: the stream broke") from exc
        if not chunk:
            return
        yield chunk


class LogStreams(Requests):
    """The log streams of the transport."""

    async def open_pod_log(self, name: str, namespace: str, *, container: str | None = None,
                           follow: bool = False, stream: str | None = None,
                           tail_lines: int | None = None,
                           since_seconds: int | None = None) -> ByteStream:
        """A pod's log as an open stream of chunks; the request is answered (or its error
        raised) before this returns. ``stream`` is Stdout / Stderr / All where the server
        splits them. ``tail_lines`` and ``since_seconds``: the server's ``tailLines`` and
        ``sinceSeconds`` (only the last lines, only what was logged since).

        Reads have no total timeout (a followed log may run for days); a non-followed read
        fails when the server stays silent for the request timeout.
        """
        resp = await self._send(
            "GET", f"/api/v1/namespaces/{namespace}/pods/{name}/log", stream=True,
            query={"container": container, "follow": "true" if follow else None,
                   "stream": stream, "tailLines": tail_lines,
                   "sinceSeconds": since_seconds},
            timeout=stream_timeout(connect=self.request_timeout,
                                   sock_read=None if follow else self.request_timeout),
        )
        return ByteStream(resp)

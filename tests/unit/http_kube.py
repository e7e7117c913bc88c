"""A :class:`Kube` on a plain-HTTP test server (aiohttp's ``web`` on 127.0.0.1)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube.credentials import Connection

if TYPE_CHECKING:
    from aiohttp import web

# A CA for a test's https Connection that never connects: loading one certificate spares
# loading the system's CA store (~60 ms a client).
UNUSED_CA = Path(__file__).with_name("unused_ca.pem").read_bytes()


def kube_at(port: int, *, pool: int | None = None, **options: Any) -> Kube:
    """A Kube of the server on ``port``; ``pool``: the requests' connection limit;
    ``options`` go to :class:`Kube` as they are."""
    if pool is not None:
        options["connections"] = pool
    return Kube(Connection(host=f"http://127.0.0.1:{port}"), **options)


@contextlib.asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[int]:
    """Serve ``app`` on 127.0.0.1 at a free port, for the block; yields the port."""
    from aiohttp import web

    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    finally:
        await runner.cleanup()

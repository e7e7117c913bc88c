"""A :class:`Kube` on a plain-HTTP test server (aiohttp's ``web`` on 127.0.0.1).

kubernetes_asyncio is imported when a test connects, not when the suite is collected: it is
the heaviest import of the suite (about half a second in every test process), and only the
tests of the transport itself need it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dispatch_kubeflow.kube import Kube

if TYPE_CHECKING:
    from aiohttp import web

# The server speaks plain HTTP, so no CA is ever used; naming a one-certificate file spares
# each client (and each stream client) loading the system's CA store (~60 ms each).
UNUSED_CA = str(Path(__file__).with_name("unused_ca.pem"))


def kube_at(port: int, *, pool: int | None = None, **options: Any) -> Kube:
    """A Kube of the server on ``port``; ``pool``: the requests' connection limit;
    ``options`` go to :class:`Kube` as they are."""
    from kubernetes_asyncio import client as k8s_client

    cfg = k8s_client.Configuration(host=f"http://127.0.0.1:{port}")
    cfg.ssl_ca_cert = UNUSED_CA
    if pool is not None:
        cfg.connection_pool_maxsize = pool
    return Kube(k8s_client.ApiClient(configuration=cfg), **options)


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

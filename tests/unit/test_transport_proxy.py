"""The transport chooses the environment's proxy once, as aiohttp would, not per request."""

from __future__ import annotations

import pytest

from dispatch_kubeflow.kube import Kube
from tests.unit.http_kube import UNUSED_CA

pytestmark = pytest.mark.asyncio


def kube_of(host: str) -> Kube:
    from kubernetes_asyncio import client as k8s_client

    cfg = k8s_client.Configuration(host=host)
    cfg.ssl_ca_cert = UNUSED_CA
    return Kube(k8s_client.ApiClient(configuration=cfg))


async def test_the_environments_proxy_is_chosen_once(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("NO_PROXY", "no_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://user:secret@proxy.invalid:3128")
    kube = kube_of("https://api.example.invalid:6443")
    try:
        rest = kube._session.api.rest_client
        assert rest.proxy == "http://proxy.invalid:3128"
        assert rest.proxy_headers["Proxy-Authorization"].startswith("Basic ")
        assert rest.pool_manager.trust_env is False  # no lookup per request
        streams = kube._session.stream_client()
        assert streams.proxy == "http://proxy.invalid:3128"
        assert streams.pool_manager.trust_env is False
    finally:
        await kube.close()


async def test_no_proxy_for_a_host_no_proxy_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    monkeypatch.setenv("NO_PROXY", "api.example.invalid")
    kube = kube_of("https://api.example.invalid:6443")
    try:
        rest = kube._session.api.rest_client
        assert not rest.proxy
        assert rest.pool_manager.trust_env is False
    finally:
        await kube.close()

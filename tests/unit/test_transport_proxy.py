"""The transport chooses the environment's proxy once, as aiohttp would, not per request."""

from __future__ import annotations

import pytest

from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube.credentials import Connection
from tests.unit.http_kube import UNUSED_CA

pytestmark = pytest.mark.asyncio


def kube_of(host: str, proxy: str | None = None) -> Kube:
    return Kube(Connection(host=host, ca=UNUSED_CA, proxy=proxy))


async def test_the_environments_proxy_is_chosen_once(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("NO_PROXY", "no_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://user:secret@proxy.invalid:3128")
    kube = kube_of("https://api.example.invalid:6443")
    try:
        session = kube._session
        assert session._proxy == "http://proxy.invalid:3128"
        assert session._proxy_headers["Proxy-Authorization"].startswith("Basic ")
        assert session._requests.trust_env is False  # no lookup per request
        assert session.stream_client().trust_env is False
    finally:
        await kube.close()


async def test_no_proxy_for_a_host_no_proxy_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    monkeypatch.setenv("NO_PROXY", "api.example.invalid")
    kube = kube_of("https://api.example.invalid:6443")
    try:
        assert kube._session._proxy is None
        assert kube._session._requests.trust_env is False
    finally:
        await kube.close()


async def test_the_kubeconfigs_proxy_url_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    kube = kube_of("https://api.example.invalid:6443", proxy="http://other.invalid:8080")
    try:
        assert kube._session._proxy == "http://other.invalid:8080"
        assert kube._session._proxy_headers == {}
    finally:
        await kube.close()

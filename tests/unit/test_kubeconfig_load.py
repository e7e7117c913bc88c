"""The transport reads kubeconfigs and the pod's service account itself (kube/kubeconfig.py,
kube/credentials.py), as kubectl reads them: merged files, relative paths, tokens (static,
file, exec plugin, OIDC), basic auth, client certificates, tls-server-name, proxy-url. The
TLS half runs against a real TLS server on loopback that demands a client certificate."""

from __future__ import annotations

import asyncio
import base64
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from cryptography.hazmat.primitives import serialization

from admission import tls
from dispatch_kubeflow.core import errors
from dispatch_kubeflow.kube import Kube, credentials
from dispatch_kubeflow.kube.credentials import ExecToken, FileToken
from dispatch_kubeflow.kube.kubeconfig import in_cluster_connection, load_connection
from dispatch_kubeflow.kube.resources import POD
from tests.unit.test_webhook_mtls import client_cert, make_ca

pytestmark = pytest.mark.asyncio

Obj = dict[str, Any]


def write(path: Path, user: Obj, cluster: Obj | None = None, **extra: Any) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "a",
        "clusters": [{"name": "c", "cluster": cluster or {"server": "https://h.invalid:6443/"}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "a", "context": {"cluster": "c", "user": "u"}}], **extra}))
    return path


def plugin(tmp_path: Path, body: str) -> Path:
    """An exec plugin: a Python script that counts its runs in runs.txt."""
    script = tmp_path / "plugin.py"
    script.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                      f"with open({str(tmp_path / 'runs.txt')!r}, 'a') as f: f.write('x')\n"
                      + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


async def test_a_static_token_and_the_server_without_its_slash(tmp_path: Path) -> None:
    conn = await load_connection(kubeconfig=str(write(tmp_path / "k", {"token": "s3cret"})))
    assert conn.host == "https://h.invalid:6443"
    assert await conn.authorization() == "Bearer s3cret"


async def test_basic_auth(tmp_path: Path) -> None:
    conn = await load_connection(kubeconfig=str(write(
        tmp_path / "k", {"username": "ann", "password": "pw"})))
    assert await conn.authorization() == "Basic " + base64.b64encode(b"ann:pw").decode()


async def test_a_token_file_is_read_again_after_a_minute(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "tok").write_text("one\n")
    conn = await load_connection(kubeconfig=str(write(tmp_path / "k", {"tokenFile": "tok"})))
    assert await conn.authorization() == "Bearer one"  # relative to the kubeconfig
    (tmp_path / "tok").write_text("two\n")
    assert await conn.authorization() == "Bearer one"  # cached
    assert isinstance(conn.token, FileToken)
    conn.token._read_at -= credentials.FILE_TOKEN_REREAD
    assert await conn.authorization() == "Bearer two"
    # Gone mid-rotation: the last token is kept, not an error.
    (tmp_path / "tok").unlink()
    conn.token._read_at -= credentials.FILE_TOKEN_REREAD
    assert await conn.authorization() == "Bearer two"


async def test_an_exec_plugins_token_is_kept_until_near_its_expiry(tmp_path: Path) -> None:
    script = plugin(tmp_path, (
        "info = json.loads(os.environ['KUBERNETES_EXEC_INFO'])\n"
        "assert info['apiVersion'] == 'client.authentication.k8s.io/v1', info\n"
        "n = len(open(os.path.join(os.path.dirname(sys.argv[0]), 'runs.txt')).read())\n"
        "print(json.dumps({'apiVersion': info['apiVersion'], 'kind': 'ExecCredential',\n"
        "  'status': {'token': f\"{os.environ['PREFIX']}-{sys.argv[1]}-{n}\",\n"
        "             'expirationTimestamp': '2999-01-01T00:00:00Z'}}))\n"))
    path = write(tmp_path / "k", {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": "./plugin.py",
        "args": ["arg"], "env": [{"name": "PREFIX", "value": "tok"}]}})
    conn = await load_connection(kubeconfig=str(path))
    assert script.exists()
    assert await conn.authorization() == "Bearer tok-arg-1"  # run once, at load
    assert await conn.authorization() == "Bearer tok-arg-1"
    assert (tmp_path / "runs.txt").read_text() == "x"
    assert isinstance(conn.token, ExecToken)
    assert conn.token.expires is not None
    assert conn.token.expires.year == 2999
    # Near its expiry it runs again, once for a crowd of requests.
    conn.token.expires = conn.token.expires.replace(year=2000)
    got = await asyncio.gather(*(conn.authorization() for _ in range(20)))
    assert set(got) == {"Bearer tok-arg-2"}
    assert (tmp_path / "runs.txt").read_text() == "xx"


async def test_a_failing_exec_plugin_is_a_settings_error_at_load(tmp_path: Path) -> None:
    plugin(tmp_path, "print('no credentials for you', file=sys.stderr)\nsys.exit(3)\n")
    path = write(tmp_path / "k", {"exec": {"command": "./plugin.py"}})
    with pytest.raises(errors.SettingsError) as err:
        await load_connection(kubeconfig=str(path))
    assert err.value.field == "cluster.kubeconfig"
    assert "user u's exec plugin" in str(err.value)
    assert "exited 3: no credentials for you" in str(err.value)
    missing = write(tmp_path / "k2", {"exec": {"command": "no-such-plugin-here"}})
    with pytest.raises(errors.SettingsError, match="cannot run no-such-plugin-here"):
        await load_connection(kubeconfig=str(missing))


async def test_oidc_takes_its_id_token_and_other_providers_are_refused(
        tmp_path: Path) -> None:
    conn = await load_connection(kubeconfig=str(write(tmp_path / "k", {"auth-provider": {
        "name": "oidc", "config": {"id-token": "idt"}}})))
    assert await conn.authorization() == "Bearer idt"
    with pytest.raises(errors.SettingsError, match="auth-provider 'gcp' is not supported"):
        await load_connection(kubeconfig=str(write(tmp_path / "k2", {"auth-provider": {
            "name": "gcp", "config": {}}})))


async def test_files_merge_as_kubectl_merges_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = tmp_path / "one", tmp_path / "two"
    first.mkdir()
    second.mkdir()
    # The first file names the current context; the second holds it, its cluster and user,
    # and a CA file named relative to itself.
    (first / "config").write_text(yaml.safe_dump({"current-context": "b", "users": [
        {"name": "u", "user": {"token": "first-wins"}}]}))
    material = tls.generate(["localhost"])
    (second / "ca.pem").write_bytes(material.ca)
    (second / "config").write_text(yaml.safe_dump({
        "clusters": [{"name": "c", "cluster": {"server": "https://b.invalid",
                                               "certificate-authority": "ca.pem",
                                               "tls-server-name": "localhost",
                                               "proxy-url": "http://p.invalid:3128"}}],
        "users": [{"name": "u", "user": {"token": "second"}}],
        "contexts": [{"name": "b", "context": {"cluster": "c", "user": "u"}}]}))
    monkeypatch.setenv("KUBECONFIG", f"{first / 'config'}{os.pathsep}{second / 'config'}")
    conn = await load_connection()
    assert conn.host == "https://b.invalid"
    assert conn.ca == material.ca
    assert (conn.server_name, conn.proxy) == ("localhost", "http://p.invalid:3128")
    assert await conn.authorization() == "Bearer first-wins"


async def test_a_context_naming_a_missing_user_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "k"
    path.write_text(yaml.safe_dump({"current-context": "a", "clusters": [
        {"name": "c", "cluster": {"server": "https://x"}}],
        "contexts": [{"name": "a", "context": {"cluster": "c", "user": "ghost"}}]}))
    with pytest.raises(errors.SettingsError) as err:
        await load_connection(kubeconfig=str(path))
    assert err.value.field == "cluster.kubeconfig"
    assert "context a names user 'ghost', which is not in the file" in str(err.value)


async def test_in_cluster_reads_the_mounted_service_account(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ca.crt").write_bytes(tls.generate(["x"]).ca)
    (tmp_path / "token").write_text("sa-token")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    conn = in_cluster_connection(str(tmp_path))
    assert conn.host == "https://[fd00::1]:443"
    assert await conn.authorization() == "Bearer sa-token"
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    with pytest.raises(errors.SettingsError) as err:
        in_cluster_connection(str(tmp_path))
    assert err.value.field == "cluster.inCluster"


async def test_tls_with_a_client_certificate_and_a_server_name(tmp_path: Path) -> None:
    """A real handshake: the server's certificate names localhost while the client dials
    127.0.0.1 (tls-server-name), and the server demands a certificate of its client CA."""
    serving = tls.generate(["localhost"])
    client_ca = make_ca("clients")
    cert, key = client_cert(client_ca, "admin")
    seen: list[str | None] = []

    async def pods(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        seen.append(dict(x[0] for x in peer["subject"])["commonName"] if peer else None)
        return web.json_response({"kind": "PodList", "items": [], "metadata": {}})

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/ns/pods", pods)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=serving.ssl_context(
        client_ca[0].public_bytes(serialization.Encoding.PEM)))
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        path = write(tmp_path / "k", {
            "client-certificate-data": base64.b64encode(cert).decode(),
            "client-key-data": base64.b64encode(key).decode()},
            {"server": f"https://127.0.0.1:{port}", "tls-server-name": "localhost",
             "certificate-authority-data": base64.b64encode(serving.ca).decode()})
        kube = await Kube.connect(kubeconfig=str(path))
        try:
            listed = await kube.list(POD, "ns")
        finally:
            await kube.close()
        assert listed[0] == []
        assert seen == ["admin"]
        # Without the server name the certificate does not match 127.0.0.1: refused.
        data = yaml.safe_load(path.read_text())
        del data["clusters"][0]["cluster"]["tls-server-name"]
        path.write_text(yaml.safe_dump(data))
        kube = await Kube.connect(kubeconfig=str(path), request_timeout=5)
        try:
            with pytest.raises(errors.KubeUnreachable) as err:
                await kube.list(POD, "ns")
        finally:
            await kube.close()
        assert err.value.transient is False  # a certificate mismatch does not mend itself
    finally:
        await runner.cleanup()

"""Where a connection's settings come from: a kubeconfig file (and context) or the pod's
service account, loaded into a :class:`~.credentials.Connection` as kubectl reads them.

Every failure is a SettingsError naming the settings field at fault, in one line.
"""

from __future__ import annotations

import base64
import os
import ssl
from dataclasses import dataclass, field
from typing import Any

from dispatch_kubeflow.core import errors
from dispatch_kubeflow.kube.credentials import (
    Connection,
    ExecToken,
    FileToken,
    StaticToken,
    Token,
)

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


@dataclass(frozen=True, slots=True)
class KubeContext:
    """A kubeconfig's context as kubectl picks it: its name and namespace (None: unset)."""

    name: str
    namespace: str | None


def kubeconfig_paths(kubeconfig: str | None) -> list[str]:
    """The files kubectl reads, in its order: ``kubeconfig``, else the existing ones of
    $KUBECONFIG, else ~/.kube/config (after :func:`require_kubeconfig`)."""
    require_kubeconfig(kubeconfig)
    if kubeconfig:
        return [os.path.expanduser(kubeconfig)]
    env = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    return [p for p in env if os.path.isfile(p)] or [os.path.expanduser("~/.kube/config")]


def current_context(kubeconfig: str | None = None, context: str | None = None) -> KubeContext:
    """The context ``context`` (default: the current-context) and its namespace, merged as
    kubectl merges $KUBECONFIG's files: the first file that names a current-context or a
    context wins. Any problem is a one-line SettingsError naming ``cluster.kubeconfig`` or
    ``cluster.context``."""
    merged = _Merged.of(kubeconfig_paths(kubeconfig))
    name, ctx = merged.context(context)
    namespace = ctx.get("namespace")
    return KubeContext(name, namespace if isinstance(namespace, str) and namespace else None)


@dataclass(frozen=True, slots=True)
class _Entry:
    """A named entry of a kubeconfig and the directory of the file that holds it (relative
    paths in it are relative to that file, as kubectl reads them)."""

    body: dict[str, Any]
    base: str


@dataclass(slots=True)
class _Merged:
    """$KUBECONFIG's files merged as kubectl merges them: the first file to name a
    current-context, and the first entry of each name, win."""

    where: str
    current: str | None = None
    entries: dict[str, dict[str, _Entry]] = field(default_factory=dict)

    @classmethod
    def of(cls, paths: list[str]) -> _Merged:
        merged = cls(", ".join(paths), entries={"clusters": {}, "users": {}, "contexts": {}})
        for path in paths:
            data = _read_kubeconfig(path)
            if merged.current is None and isinstance(data.get("current-context"), str):
                merged.current = data["current-context"] or None
            base = os.path.dirname(os.path.abspath(path))
            for kind, known in merged.entries.items():
                listed = data.get(kind) or []
                if not isinstance(listed, list):
                    raise _bad(path, f"{kind} is not a list")
                one = kind[:-1]
                for entry in listed:
                    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                        raise _bad(path, f"a {one} without a name")
                    body = entry.get(one) or {}
                    if not isinstance(body, dict):
                        raise _bad(path, f"{one} {entry['name']} is not a mapping")
                    known.setdefault(entry["name"], _Entry(body, base))
        return merged

    def context(self, name: str | None) -> tuple[str, dict[str, Any]]:
        current = name or self.current
        contexts = self.entries["contexts"]
        if not current:
            raise errors.SettingsError(
                f"cluster.context: {self.where} names no current-context; pass --context "
                "NAME (or run 'kubectl config use-context NAME')", field="cluster.context")
        if current not in contexts:
            have = ", ".join(sorted(contexts)) or "none"
            raise errors.SettingsError(
                f"cluster.context: no context {current} in {self.where} (it has: {have})",
                field="cluster.context")
        return current, contexts[current].body

    def entry(self, kind: str, name: Any, context: str) -> _Entry:
        found = self.entries[kind].get(name) if isinstance(name, str) else None
        if found is None:
            raise _bad(self.where, f"context {context} names {kind[:-1]} {name!r}, "
                                   f"which is not in the file")
        return found


def _read_kubeconfig(path: str) -> dict[str, Any]:
    import yaml  # imported here: most of the library never reads YAML

    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except (OSError, UnicodeDecodeError) as exc:
        raise _bad(path, str(exc)) from None
    except yaml.YAMLError as exc:
        raise _bad(path, f"not YAML: {exc}") from None
    if data is None:
        return {}  # an empty file is an empty kubeconfig, as kubectl takes it
    if not isinstance(data, dict):
        raise _bad(path, f"expected a mapping (a kubeconfig), got {type(data).__name__}")
    return data


def _bad(where: str, why: str) -> errors.SettingsError:
    return errors.SettingsError(f"cluster.kubeconfig: cannot load {where}: "
                                f"{' '.join(why.split())}", field="cluster.kubeconfig")


async def load_connection(*, kubeconfig: str | None = None, context: str | None = None,
                          in_cluster: bool = False) -> Connection:
    """Where the API server is and how to authenticate to it: a kubeconfig file (and
    context), or the pod's service account.

    A SettingsError names the settings field at fault: ``cluster.kubeconfig`` (no such
    file, one that does not load, an exec plugin that fails), ``cluster.context`` (no such
    context), ``cluster.inCluster`` (no service account here).
    """
    conn = in_cluster_connection() if in_cluster else _from_kubeconfig(kubeconfig, context)
    if conn.token is not None:
        await conn.token.token()  # a token that cannot be had fails here, named, not later
    try:
        conn.ssl_context()
    except (ssl.SSLError, ValueError) as exc:
        field_ = "cluster.inCluster" if in_cluster else "cluster.kubeconfig"
        raise errors.SettingsError(f"{field_}: its TLS material does not load: {exc}",
                                   field=field_) from exc
    return conn


SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where the kubelet mounts a pod's service-account token and the cluster's CA."""


def in_cluster_connection(root: str = SERVICE_ACCOUNT) -> Connection:
    """The pod's service account: the API server from KUBERNETES_SERVICE_HOST/PORT, its CA
    and token from the mounted files (the token re-read as the kubelet rotates it)."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise errors.SettingsError(
            "cluster.inCluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not "
            "set: this is not a pod; set cluster.kubeconfig instead", field="cluster.inCluster")
    if ":" in host:
        host = f"[{host}]"  # IPv6
    try:
        with open(os.path.join(root, "ca.crt"), "rb") as f:
            ca = f.read()
    except OSError as exc:
        raise errors.SettingsError(
            f"cluster.inCluster: cannot use the pod's service account: {exc}",
            field="cluster.inCluster") from exc
    return Connection(host=f"https://{host}:{port}", ca=ca,
                      token=FileToken(os.path.join(root, "token"), "cluster.inCluster"))


def _from_kubeconfig(kubeconfig: str | None, context: str | None) -> Connection:
    merged = _Merged.of(kubeconfig_paths(kubeconfig))
    name, ctx = merged.context(context)
    cluster = merged.entry("clusters", ctx.get("cluster"), name)
    user = merged.entry("users", ctx.get("user"), name)
    c, u = cluster.body, user.body
    server = c.get("server")
    if not isinstance(server, str) or not server:
        raise _bad(merged.where, f"cluster {ctx.get('cluster')} has no server")
    where = f"{merged.where} (context {name})"
    return Connection(
        host=server.rstrip("/"),
        ca=_material(c, "certificate-authority", cluster.base, where),
        insecure=c.get("insecure-skip-tls-verify") is True,
        server_name=_text(c.get("tls-server-name")),
        proxy=_text(c.get("proxy-url")),
        certificate=_material(u, "client-certificate", user.base, where),
        key=_material(u, "client-key", user.base, where),
        token=_token(u, user.base, str(ctx.get("user")), where),
        basic=(u["username"], str(u.get("password") or ""))
        if isinstance(u.get("username"), str) and u["username"] else None,
    )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _path(value: str, base: str) -> str:
    value = os.path.expanduser(value)
    return value if os.path.isabs(value) else os.path.join(base, value)


def _material(body: dict[str, Any], key: str, base: str, where: str) -> bytes | None:
    """``key-data`` (base64) or the file ``key`` names, as bytes."""
    data = body.get(f"{key}-data")
    if isinstance(data, str) and data:
        try:
            return base64.b64decode(data, validate=True)
        except ValueError as exc:
            raise _bad(where, f"{key}-data is not base64: {exc}") from None
    path = _text(body.get(key))
    if path is None:
        return None
    try:
        with open(_path(path, base), "rb") as f:
            return f.read()
    except OSError as exc:
        raise _bad(where, f"{key}: {exc}") from None


def _token(u: dict[str, Any], base: str, user: str, where: str) -> Token | None:
    if _text(u.get("token")):
        return StaticToken(u["token"])
    if _text(u.get("tokenFile")):
        return FileToken(_path(u["tokenFile"], base), "cluster.kubeconfig")
    plugin = u.get("exec")
    if isinstance(plugin, dict):
        command = _text(plugin.get("command"))
        if command is None:
            raise _bad(where, f"user {user}'s exec has no command")
        if os.sep in command and not os.path.isabs(command):
            command = _path(command, base)  # relative to the kubeconfig, as client-go
        env = {e["name"]: str(e.get("value", "")) for e in plugin.get("env") or []
               if isinstance(e, dict) and isinstance(e.get("name"), str)}
        return ExecToken(command, [str(a) for a in plugin.get("args") or []], env,
                         _text(plugin.get("apiVersion")) or "client.authentication.k8s.io/v1",
                         user)
    provider = u.get("auth-provider")
    if isinstance(provider, dict):
        config = provider.get("config") or {}
        if provider.get("name") == "oidc" and _text(config.get("id-token")):
            return StaticToken(config["id-token"])
        raise _bad(where, f"user {user}'s auth-provider {provider.get('name')!r} is not "
                          "supported (client-go dropped the gcp and azure providers): use an "
                          "exec plugin (e.g. gke-gcloud-auth-plugin, kubelogin)")
    return None

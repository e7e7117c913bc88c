"""Where a connection's settings come from: a kubeconfig file (and context) or the pod's
service account, loaded by kubernetes-asyncio into its ``Configuration``.

Every failure is a SettingsError naming the settings field at fault, in one line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dispatch_kubeflow.core import errors

if TYPE_CHECKING:
    # Imported where a connection is made, not with this module: the client package loads
    # every API model (half a second), which code that never connects need not pay.
    from kubernetes_asyncio import client as k8s_client

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
    paths = kubeconfig_paths(kubeconfig)
    current = context
    contexts: dict[str, Any] = {}
    for path in paths:
        data = _read_kubeconfig(path)
        if current is None and isinstance(data.get("current-context"), str):
            current = data["current-context"] or None
        listed = data.get("contexts") or []
        if not isinstance(listed, list):
            raise _bad(path, "contexts is not a list")
        for entry in listed:
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise _bad(path, "a context without a name")
            contexts.setdefault(entry["name"], entry.get("context") or {})
    where = ", ".join(paths)
    if not current:
        raise errors.SettingsError(
            f"cluster.context: {where} names no current-context; pass --context NAME "
            "(or run 'kubectl config use-context NAME')", field="cluster.context")
    if current not in contexts:
        have = ", ".join(sorted(contexts)) or "none"
        raise errors.SettingsError(
            f"cluster.context: no context {current} in {where} (it has: {have})",
            field="cluster.context")
    ctx = contexts[current]
    if not isinstance(ctx, dict):
        raise _bad(where, f"context {current} is not a mapping")
    namespace = ctx.get("namespace")
    return KubeContext(current, namespace if isinstance(namespace, str) and namespace
                       else None)


def _read_kubeconfig(path: str) -> dict[str, Any]:
    import yaml  # as load_configuration: a YAML error is one line, never a traceback

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


async def load_configuration(*, kubeconfig: str | None = None, context: str | None = None,
                             in_cluster: bool = False) -> k8s_client.Configuration:
    """The client configuration of a kubeconfig file (and context) or of the pod's service
    account.

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
        return cfg
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
    return cfg

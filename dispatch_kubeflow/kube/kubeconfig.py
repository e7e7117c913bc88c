"""Where a connection's settings come from: a kubeconfig file (and context) or the pod's
service account, loaded by kubernetes-asyncio into its ``Configuration``.

Every failure is a SettingsError naming the settings field at fault, in one line.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

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

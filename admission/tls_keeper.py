"""The shared TLS Secret, kept: every replica serves the certificate it holds, and the webhook
configuration's caBundle is its CA.

Every replica watches the Secret by name. Deleted, the leader makes it again from what the
replicas serve now (they all loaded it from that Secret), so nothing changes for the API
server: the caBundle still fits every replica. Changed (rotated by hand, or made anew by a
replica that started while it was gone), every replica loads the new certificate into the
context it serves from, and the leader writes the new CA into the webhook configuration
(:class:`~admission.webhook_config.ConfigurationKeeper`): all converge on one CA. Between
the two, a replica still on the old certificate is refused by the API server, which fails
closed (the pod's create is retried), for as long as the watch takes to bring the change.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable

from admission.keeper import Keeper, Obj
from admission.lease import LeaderElector
from admission.tls import SECRET, TlsMaterial, of_secret, secret_body
from dispatch_kubeflow.core import errors
from dispatch_kubeflow.kube import KubeAPI

log = logging.getLogger(__name__)


class SecretKeeper(Keeper):
    """The shared TLS Secret (the module docstring; :class:`~admission.keeper.Keeper`)."""

    def __init__(self, kube: KubeAPI, elector: LeaderElector, namespace: str, name: str,
                 material: TlsMaterial, serving: ssl.SSLContext,
                 on_change: Callable[[TlsMaterial], None]) -> None:
        super().__init__(kube, elector, SECRET, name, namespace)
        self.material = material
        """What this replica serves now."""
        self.serving = serving
        self.on_change = on_change
        """Told the new material once it is served (the webhook configuration's caBundle)."""
        self._gone = False

    def cannot_watch(self, exc: errors.KubeError) -> None:
        # RBAC older than this controller (no list and watch by name): it serves what it
        # loaded at start, as before the keeper.
        log.error("cannot watch Secret %s/%s (%s): a rotated or re-made certificate is "
                  "taken up at the next restart only; apply deploy/admission's RBAC",
                  self.namespace, self.name, exc)

    def observed(self, current: Obj | None) -> None:
        if current is None:
            self._gone = True
            self.look()
            return
        self._gone = False
        material = of_secret(current)
        if material is None:
            log.error("Secret %s/%s lacks tls.crt, tls.key or ca.crt: serving the certificate "
                      "loaded before; delete it and the leader makes it again",
                      self.namespace, self.name)
            return
        if material != self.material:
            material.load_into(self.serving)
            self.material = material
            log.info("serving the certificate of Secret %s/%s as it is now",
                     self.namespace, self.name)
            self.on_change(material)

    def due(self) -> bool:
        return self._gone

    async def write(self) -> None:
        """Make it again, holding what every replica serves now. A create by name, so two
        leaders in turn cannot make two."""
        try:
            await self.kube.create(SECRET, secret_body(self.namespace or "", self.name,
                                                       self.material), self.namespace)
            log.info("made Secret %s/%s again from the certificate the replicas serve",
                     self.namespace, self.name)
        except errors.KubeConflict:
            pass  # made meanwhile: its event follows

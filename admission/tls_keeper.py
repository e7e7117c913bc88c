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

import asyncio
import logging
import ssl
from collections.abc import Callable

from admission.lease import LeaderElector
from admission.tls import SECRET, TlsMaterial, of_secret, secret_body
from dispatch_kubeflow.core import errors
from dispatch_kubeflow.kube import KubeAPI, WatchEvent

log = logging.getLogger(__name__)


class SecretKeeper:
    RETRY = (0.5, 30.0)
    """Seconds before another try after a failed create: first, and at most."""

    def __init__(self, kube: KubeAPI, elector: LeaderElector, namespace: str, name: str,
                 material: TlsMaterial, serving: ssl.SSLContext,
                 on_change: Callable[[TlsMaterial], None]) -> None:
        self.kube = kube
        self.elector = elector
        self.namespace = namespace
        self.name = name
        self.material = material
        """What this replica serves now."""
        self.serving = serving
        self.on_change = on_change
        """Told the new material once it is served (the webhook configuration's caBundle)."""
        self._gone = False
        self._look = asyncio.Event()
        elector.on_change(self._on_leadership)

    def _on_leadership(self, leading: bool) -> None:
        if leading and self._gone:  # deleted while another replica led
            self._look.set()

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._watch())
            tg.create_task(self._keep())

    async def _watch(self) -> None:
        try:
            async for ev in self.kube.observe(SECRET, self.namespace,
                                              field_selector=f"metadata.name={self.name}"):
                self.seen(ev)
        except (errors.KubeForbidden, errors.KubeNotFound) as exc:
            # RBAC older than this controller (no list and watch by name): it serves what it
            # loaded at start, as before the keeper.
            log.error("cannot watch Secret %s/%s (%s): a rotated or re-made certificate is "
                      "taken up at the next restart only; apply deploy/admission's RBAC",
                      self.namespace, self.name, exc)

    def seen(self, ev: WatchEvent) -> None:
        if ev.type == "SYNC":
            current = next(iter(ev.items), None)
        else:
            current = None if ev.type == "DELETED" else ev.object
        if current is None:
            self._gone = True
            self._look.set()
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

    async def _keep(self) -> None:
        """As the leader, while the Secret is gone: make it again, holding what every
        replica serves now. A create by name, so two leaders in turn cannot make two."""
        delay = self.RETRY[0]
        while True:
            await self._look.wait()
            self._look.clear()
            if not self._gone or not self.elector.is_leader():
                continue
            try:
                await self.kube.create(SECRET, secret_body(self.namespace, self.name,
                                                           self.material), self.namespace)
                log.info("made Secret %s/%s again from the certificate the replicas serve",
                         self.namespace, self.name)
                delay = self.RETRY[0]
            except errors.KubeConflict:
                pass  # made meanwhile: its event follows
            except errors.KubeError as exc:
                log.warning("cannot make Secret %s/%s again: %s; again in %.1fs",
                            self.namespace, self.name, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.RETRY[1])
                self._look.set()

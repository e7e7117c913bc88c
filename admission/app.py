"""The controller's lifecycle: start the parts, run until a signal, stop in order.

Start: TLS and webhook first (every replica serves it, and readiness waits for it), then the
informers, then the campaign for the Lease. Stop (SIGTERM/SIGINT): stop deciding, write
``Active=False`` while still leader, release the Lease so a standby takes over at once, stop
serving, close the transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from admission import tls
from admission.checks import ActiveConditions
from admission.holds import HoldExpiry
from admission.informer import Informer
from admission.lease import LeaderElector
from admission.observability import EventRecorder, HealthServer, Metrics
from admission.readmission import Readmission
from admission.webhook import ClientConfig, WebhookServer, ensure_configuration
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube.resources import ADMISSION_CHECK, CLUSTER_QUEUE, POD, WORKLOAD

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Config:
    namespace: str = names.CONTROLLER_NAMESPACE
    lease_name: str = names.LEASE_NAME
    identity: str = ""
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    webhook_listen: str = "0.0.0.0:9443"
    webhook_url: str = ""
    webhook_service: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""
    tls_secret: str = ""
    metrics_listen: str = ""
    health_listen: str = ""

    def tls_hosts(self) -> list[str]:
        """The names the serving certificate must carry."""
        if self.webhook_url:
            host = urlparse(self.webhook_url).hostname or "127.0.0.1"
            return [host, "localhost", "127.0.0.1"] if host != "127.0.0.1" else [host,
                                                                                 "localhost"]
        if self.webhook_service:
            ns, _, name = self.webhook_service.partition(":")[0].partition("/")
            return [f"{name}.{ns}.svc", f"{name}.{ns}.svc.cluster.local", f"{name}.{ns}", name]
        return ["localhost", "127.0.0.1"]


class Controller:
    def __init__(self, kube: Kube, config: Config) -> None:
        self.kube = kube
        self.config = config
        self.metrics = Metrics()
        self.elector = LeaderElector(
            kube, namespace=config.namespace, name=config.lease_name, identity=config.identity,
            lease_duration=config.lease_duration, renew_deadline=config.renew_deadline,
            retry_period=config.retry_period)
        self.elector.on_change(lambda leading: self.metrics.leader.set(1 if leading else 0))
        self.workloads = Informer(kube, WORKLOAD)
        self.pods = Informer(kube, POD, label_selector=names.JOBSET_NAME_LABEL)
        self.admission_checks = Informer(kube, ADMISSION_CHECK)
        self.cluster_queues = Informer(kube, CLUSTER_QUEUE)
        self.informers = (self.workloads, self.pods, self.admission_checks, self.cluster_queues)
        self.events = EventRecorder(kube, instance=config.identity)
        self.readmission = Readmission(
            kube, self.elector, workloads=self.workloads, pods=self.pods,
            admission_checks=self.admission_checks, cluster_queues=self.cluster_queues,
            metrics=self.metrics, events=self.events)
        self.active = ActiveConditions(kube, self.elector, self.admission_checks)
        self.holds = HoldExpiry(kube, self.elector, self.workloads, self.metrics)
        self.webhook = WebhookServer(kube, self.metrics)
        self.health = HealthServer(self.ready, self.metrics)
        self._tasks: list[asyncio.Task[None]] = []

    def ready(self) -> tuple[bool, str]:
        if not self.webhook.serving:
            return False, "webhook not serving yet"
        waiting = [i.res.plural for i in self.informers if not i.synced.is_set()]
        if waiting:
            return False, "caches not synced: " + ", ".join(waiting)
        return True, "leader" if self.elector.leading.is_set() else "standby"

    async def _tls(self) -> tls.TlsMaterial:
        c = self.config
        if c.tls_cert or c.tls_key:
            return tls.from_files(c.tls_cert, c.tls_key, c.tls_ca or None)
        if c.tls_secret:
            return await tls.from_secret(self.kube, c.namespace, c.tls_secret, c.tls_hosts())
        return tls.generate(c.tls_hosts())

    async def start(self) -> None:
        c = self.config
        await self.health.start(health=c.health_listen or None,
                                metrics=c.metrics_listen or None)
        material = await self._tls()
        await self.webhook.start(c.webhook_listen, material.ssl_context())
        if c.webhook_url or c.webhook_service:
            await ensure_configuration(
                self.kube, ClientConfig(url=c.webhook_url, service=c.webhook_service),
                material.ca_bundle)
        spawn = asyncio.get_running_loop().create_task
        self._tasks += [spawn(i.run(), name=f"informer {i.res.plural}") for i in self.informers]
        await asyncio.gather(*(i.synced.wait() for i in self.informers))
        log.info("caches synced", extra={"identity": c.identity})
        self._tasks += [spawn(self.readmission.run(), name="readmission"),
                        spawn(self.active.run(), name="active condition"),
                        spawn(self.elector.run(), name="leader election")]

    async def stop(self) -> None:
        election = [t for t in self._tasks if t.get_name() == "leader election"]
        for t in election:
            t.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*election, return_exceptions=True)
        if self.elector.is_leader():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.active.sync(stopping=True), 5)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.elector.release(), 5)
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.holds.close()
        self.readmission.queue.close()
        await self.webhook.stop()
        await self.health.stop()

    async def run(self) -> int:
        """Start, wait for SIGTERM/SIGINT or a part's crash, stop. Returns the exit code."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        crashed: asyncio.Future[asyncio.Task[None]] = loop.create_future()

        def _watch(t: asyncio.Task[None]) -> None:
            if not t.cancelled() and t.exception() is not None and not crashed.done():
                crashed.set_result(t)

        waiter = loop.create_task(stop.wait())
        # Starting can wait long (an unreachable API server): a signal must still stop it.
        starting = loop.create_task(self.start())
        try:
            await asyncio.wait([starting, waiter], return_when=asyncio.FIRST_COMPLETED)
            if not starting.done():
                starting.cancel()
                await asyncio.gather(starting, return_exceptions=True)
                return 0
            starting.result()  # a SettingsError (bad TLS files) propagates to the CLI
            for t in self._tasks:
                t.add_done_callback(_watch)
            either: list[asyncio.Future[Any]] = [waiter, crashed]
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            if crashed.done():
                task = crashed.result()
                log.error("%s crashed: %r", task.get_name(), task.exception())
                return 1
            return 0
        finally:
            waiter.cancel()
            log.info("shutting down", extra={"identity": self.config.identity})
            await self.stop()

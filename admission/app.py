"""The controller's parts and the order they start and stop in.

kopf runs the process (:mod:`admission.operator`) and calls :meth:`Controller.start` from its
``on.startup`` handler and :meth:`Controller.stop` from its ``on.cleanup`` handler (and the CLI
calls ``stop`` again, harmlessly, in case kopf was stopped before its startup finished).

Start: health and metrics, TLS and the webhook (every replica serves it, and readiness waits
for it). kopf starts watching only once the startup handler has returned, so the rest waits
in a task: once the indexes hold everything the API server lists, the work queue, the Active
condition and the campaign for the Lease start. Stop (SIGTERM/SIGINT, handled by kopf): stop
campaigning, release the Lease so a standby takes over at once, and write ``Active=False``
only if no replica took the Lease within a retry period (see :meth:`Controller.stop`), stop
deciding, stop serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import ssl
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from admission import tls
from admission.checks import ActiveConditions
from admission.faults import Faults
from admission.gate_lift import GateLift
from admission.holds import HoldExpiry
from admission.intake import Caches, Feed, list_live
from admission.lease import LeaderElector
from admission.observability import EventRecorder, HealthServer, Metrics
from admission.permit_revocation import PermitRevocation
from admission.pod_identity import WebhookServer
from admission.readmission import Readmission
from admission.tls_keeper import SecretKeeper
from admission.webhook_config import ClientConfig, ConfigurationKeeper, ensure_configuration
from admission.worker_agent import WorkerAgent, WorkerConfig
from admission.worker_proof import Workers
from dispatch_kubeflow.core import errors, names
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import (
    ADMISSION_CHECK,
    CLUSTER_QUEUE,
    JOBSET,
    LEASE,
    POD,
    TRAINJOB,
    WORKLOAD,
)

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
    client_ca: str = ""
    """A CA bundle file: when set, the webhook requires the API server's client certificate
    it signed (mutual TLS); unset, it serves anyone who reaches it."""
    metrics_listen: str = ""
    health_listen: str = ""
    faults: tuple[str, ...] = ()
    """Test-only fault injection (admission.faults): none in production."""
    workers: int = 8
    """Readmission workers: Workloads judged at once. Two queued a burst's decisions in pairs
    (issue 11: p99 3.5x the floor at N = 200 with decisions themselves ~50 ms)."""
    worker_of: WorkerConfig | None = None
    """In a MultiKueue worker cluster (``--worker-of``): this worker's part of the permit."""

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
    def __init__(self, kube: KubeAPI, config: Config,
                 workers: Mapping[str, KubeAPI] | None = None,
                 manager: KubeAPI | None = None) -> None:
        """``workers``: in a MultiKueue manager, a client of each worker cluster by its
        MultiKueueCluster's name (``--worker-kubeconfigs``); None in any other cluster.
        ``manager``: in a worker (``config.worker_of``), a client of the manager cluster."""
        self.kube = kube
        self.config = config
        self.metrics = Metrics()
        self.faults = Faults(config.faults)
        self.elector = LeaderElector(
            kube, namespace=config.namespace, name=config.lease_name, identity=config.identity,
            lease_duration=config.lease_duration, renew_deadline=config.renew_deadline,
            retry_period=config.retry_period)
        self.elector.on_change(lambda leading: self.metrics.leader.set(1 if leading else 0))
        self.caches = Caches()
        self.feeds = {res.plural: Feed(res.plural)
                      for res in (WORKLOAD, TRAINJOB, POD, JOBSET, ADMISSION_CHECK,
                                  CLUSTER_QUEUE)}
        self.events = EventRecorder(kube, instance=config.identity)
        self.permits = PermitRevocation(kube) if workers is not None else None
        """The permits of the workers (a MultiKueue manager's leader times, revokes and
        grants them); None outside a manager."""
        self.workers = dict(workers or {})
        self.readmission = Readmission(
            kube, self.elector, self.caches, workloads=self.feeds[WORKLOAD.plural],
            trainjobs=self.feeds[TRAINJOB.plural], pods=self.feeds[POD.plural],
            jobsets=self.feeds[JOBSET.plural],
            admission_checks=self.feeds[ADMISSION_CHECK.plural],
            cluster_queues=self.feeds[CLUSTER_QUEUE.plural], metrics=self.metrics,
            events=self.events, workers=config.workers, faults=self.faults,
            clusters=Workers(self.workers, self.permits) if self.permits is not None else None)
        self.active = ActiveConditions(kube, self.elector, self.caches,
                                       self.feeds[ADMISSION_CHECK.plural])
        self.gate_lift = GateLift(kube, self.elector, self.feeds[POD.plural], self.metrics,
                                  self.events, workers=config.workers, faults=self.faults)
        self.holds = HoldExpiry(kube, self.elector, self.caches, self.feeds[WORKLOAD.plural],
                                self.metrics, self.faults, events=self.events)
        self.webhook = WebhookServer(kube, self.metrics)
        self.agent = (WorkerAgent(manager, kube, config.worker_of, config.identity)
                      if config.worker_of is not None and manager is not None else None)
        """In a MultiKueue worker: its permit, the fences' door, what the webhook adds."""
        self._door_tls: ssl.SSLContext | None = None
        self.keeper: ConfigurationKeeper | None = None
        """Keeps the webhook configuration when this controller manages it."""
        self.secret: SecretKeeper | None = None
        """Keeps the shared TLS Secret, and serves what it holds (``--tls-secret``)."""
        self.health = HealthServer(self.ready, self.metrics)
        self.warm = asyncio.Event()
        self.stop_flag = asyncio.Event()
        """kopf's stop flag: set when a part crashes, so the operator stops in order."""
        self.crashed: str | None = None
        self.fatal: errors.SettingsError | None = None
        """A startup error the operator cannot get past (bad TLS files): exit code 2."""
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = False

    def _new_ca(self, material: tls.TlsMaterial) -> None:
        if self.keeper is not None:
            self.keeper.use_ca(material.ca_bundle)
        if self._door_tls is not None:
            material.load_into(self._door_tls)
        side = self.webhook.worker
        if side is not None:
            # New pods' fences trust the new CA. A running pod's fence keeps the CA it was
            # given: a new CA (not the Secret made again from what the replicas serve, which
            # keeps it) ends those pods' shares, so rotate between MultiKueue jobs.
            self.webhook.worker = dataclasses.replace(side, placement=dataclasses.replace(
                side.placement, ca=material.ca.decode()))

    def ready(self) -> tuple[bool, str]:
        if not self.webhook.serving:
            return False, "webhook not serving yet"
        if not self.warm.is_set():
            return False, "indexes not warm yet"
        return True, "leader" if self.elector.leading.is_set() else "standby"

    async def _tls(self) -> tls.TlsMaterial:
        c = self.config
        if c.tls_cert or c.tls_key:
            return tls.from_files(c.tls_cert, c.tls_key, c.tls_ca or None)
        if c.tls_secret:
            return await tls.from_secret(self.kube, c.namespace, c.tls_secret, c.tls_hosts())
        return tls.generate(c.tls_hosts())

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        task.add_done_callback(self._watch)
        self._tasks.append(task)

    def _watch(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None or self._stopped:
            return
        if self.crashed is None:
            self.crashed = task.get_name()
            log.error("%s crashed: %r", task.get_name(), task.exception(),
                      exc_info=task.exception())
        self.stop_flag.set()  # kopf stops the operator; on.cleanup stops the rest in order

    async def start(self, indexes: Mapping[str, Any]) -> None:
        """The on.startup part: serve, then warm up in the background (kopf starts watching
        only when this returns)."""
        c = self.config
        self.caches.bind(indexes)
        try:
            await self.health.start(health=c.health_listen or None,
                                    metrics=c.metrics_listen or None)
            material = await self._tls()
            serving = material.ssl_context(tls.client_ca(c.client_ca) if c.client_ca else b"")
            if self.agent is not None:
                # Pods, not the API server, knock at the door: no client certificate there.
                self._door_tls = material.ssl_context()
                self.webhook.worker = await self.agent.side(c.namespace, c.identity,
                                                            material.ca)
                await self.agent.start(self._door_tls)
            await self.webhook.start(c.webhook_listen, serving)
            if c.webhook_url or c.webhook_service:
                client = ClientConfig(url=c.webhook_url, service=c.webhook_service)
                await ensure_configuration(self.kube, client, material.ca_bundle)
                self.keeper = ConfigurationKeeper(self.kube, self.elector, client,
                                                  material.ca_bundle)
            if c.tls_secret and not (c.tls_cert or c.tls_key):
                self.secret = SecretKeeper(self.kube, self.elector, c.namespace, c.tls_secret,
                                           material, serving, self._new_ca)
        except BaseException:
            if self.agent is not None:
                await self.agent.stop()
            # kopf retries a failed startup activity: let the retry start from nothing. Kept
            # bound, the health port failed every retry with EADDRINUSE (seen in the fault
            # suite: the TLS Secret's read failed during an API server restart, and the
            # replica never became Ready again).
            await self.webhook.stop()
            await self.health.stop()
            raise
        if self.agent is not None:
            # Every replica renews its own permit, leader or not, from the start.
            self._spawn(self.agent.renewal.run(), "permit renewal")
            self._spawn(self.agent.clearing.run(), "permit clearing")
        self._spawn(self._warm_up(), "warm-up")

    async def _warm_up(self, interval: float = 0.25) -> None:
        """Wait until the indexes hold every object the API server lists, then decide.

        An object counts as missing only if two lists in a row show it, so churn (objects
        created after kopf listed, deleted before it did) cannot hold the warm-up back.
        """
        started = time.monotonic()
        seen: dict[str, set[tuple[str, str]]] | None = None
        said = 0.0
        while True:
            try:
                missing = self.caches.missing(await list_live(self.kube))
            except errors.KubeError as exc:
                log.warning("warm-up: cannot list: %s", exc)
                await asyncio.sleep(1.0)
                continue
            lacking = {k: v & seen.get(k, set()) if seen is not None else v
                       for k, v in missing.items()}
            if not any(lacking.values()):
                break
            seen = missing
            if time.monotonic() - said > 10:
                said = time.monotonic()
                log.info("waiting for kopf to index: %s", ", ".join(
                    f"{len(v)} {k}" for k, v in lacking.items() if v))
            await asyncio.sleep(interval)
        self.warm.set()
        self.readmission.triggers.warm = True
        log.info("indexes warm", extra={"identity": self.config.identity,
                                        "warm_up_ms": round((time.monotonic() - started) * 1e3)})
        self._spawn(self.readmission.run(), "readmission")
        self._spawn(self.active.run(), "active condition")
        self._spawn(self.gate_lift.run(), "gate lift")
        self._spawn(self.holds.run(), "hold expiry")
        if self.keeper is not None:
            self._spawn(self.keeper.run(), "webhook configuration")
        if self.secret is not None:
            self._spawn(self.secret.run(), "TLS secret")
        if self.permits is not None:
            self._spawn(self.permits.lead(self.elector.is_leader, self.workers),
                        "worker permits")
        self._spawn(self.elector.run(), "leader election")

    async def _successor(self, within: float) -> bool:
        """Whether another replica holds the Lease within ``within`` seconds."""
        deadline = time.monotonic() + within
        while True:
            with contextlib.suppress(errors.KubeError):
                lease = await self.kube.get_or_none(LEASE, self.config.lease_name,
                                                    self.config.namespace)
                holder = str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")
                if holder and holder != self.config.identity:
                    return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.2)

    async def stop(self) -> None:
        """Ordered shutdown; safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        election = [t for t in self._tasks if t.get_name() == "leader election"]
        for t in election:
            t.cancel()
        await asyncio.gather(*election, return_exceptions=True)
        # Release first, then say Active=False only if no standby took over. Written before
        # the release, the False made Kueue mark every ClusterQueue of the check inactive for
        # the takeover; a Workload created in that moment was judged Inadmissible
        # ("ClusterQueue is inactive") and Kueue did not queue it again when the successor
        # wrote True: seen on the local cluster, deleting the leader pod stranded a job.
        was_leader = self.elector.is_leader()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.elector.release(), 5)
        if was_leader and not await self._successor(self.config.retry_period + 1):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.active.sync(stopping=True, last_leader=True), 5)
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.holds.close()
        self.gate_lift.close()
        await self.readmission.aclose()
        if self.agent is not None:
            await self.agent.stop()
        await self.webhook.stop()
        await self.health.stop()
        log.info("stopped", extra={"identity": self.config.identity})

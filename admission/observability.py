"""Logs, Events, metrics and health endpoints.

* Logs are one JSON object a line (``ts``, ``level``, ``logger``, ``msg`` and any ``extra``).
* Each readmission decision is an events.k8s.io/v1 Event on the TrainJob.
* Prometheus metrics live in their own registry (tests start several controllers in one
  process) and are served on ``--metrics-listen``; ``/healthz`` and ``/readyz`` on
  ``--health-listen``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import secrets
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from dispatch_kubeflow.core import errors, names
from dispatch_kubeflow.core.times import format_microtime
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import EVENT

log = logging.getLogger(__name__)

_STD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message"}


_KOPF_ATTRS = frozenset({"settings", "k8s_skip", "k8s_ref"})
"""What kopf's object loggers add to a record: its settings (dropped), whether to post an
Event (dropped: posting is off) and the object (rendered as ``object``)."""


def _kopf_object(ref: Any) -> str | None:
    if not isinstance(ref, dict):
        return None
    where = "/".join(str(ref[k]) for k in ("namespace", "name") if ref.get(k))
    return f"{ref.get('kind') or '?'} {where}".strip()


class JsonFormatter(logging.Formatter):
    """One JSON object per line; ``extra`` fields become top-level keys.

    kopf's records (loggers ``kopf.*``) come through the same formatter; the object a kopf
    message is about becomes ``object``.
    """

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        obj = _kopf_object(getattr(record, "k8s_ref", None))
        if obj:
            out["object"] = obj
        for k, v in vars(record).items():
            if k not in _STD_ATTRS and k not in _KOPF_ATTRS and not k.startswith("_"):
                out[k] = v if isinstance(v, str | int | float | bool | None) else str(v)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, separators=(",", ":"))


def setup_logging(level: str = "INFO") -> None:
    """JSON lines on stderr for every logger, kopf's included (kopf.operator() installs no
    handlers of its own; only its CLI would)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # kopf logs every handler call at INFO (several per watch event): keep that for DEBUG.
    logging.getLogger("kopf").setLevel(level.upper() if level.upper() == "DEBUG"
                                       else logging.WARNING)


class Metrics:
    """The controller's Prometheus metrics."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.decisions = Counter(
            "dispatch_admission_decisions", "Readmission decisions by outcome.",
            ["outcome"], registry=self.registry)
        self.ready_latency = Histogram(
            "dispatch_admission_ready_latency_seconds",
            "From the Workload's quota reservation to the check written Ready.",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
            registry=self.registry)
        self.leader = Gauge("dispatch_admission_leader",
                            "1 while this replica holds the Lease.", registry=self.registry)
        self.webhook = Counter("dispatch_admission_webhook_reviews",
                               "Pod admission reviews by outcome.", ["outcome"],
                               registry=self.registry)
        self.holds_released = Counter("dispatch_admission_holds_released",
                                      "Expired holds released.", registry=self.registry)
        self.holds_unreadable = Counter(
            "dispatch_admission_hold_until_unreadable",
            "Held Workloads whose hold-until is not an RFC 3339 time (they do not expire).",
            registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class EventRecorder:
    """Posts events.k8s.io/v1 Events; a failure is logged, never raised (events are advice)."""

    def __init__(self, kube: KubeAPI, *, instance: str) -> None:
        self.kube = kube
        self.instance = instance[:128]

    async def record(self, regarding: dict[str, Any], *, reason: str, note: str,
                     action: str, type_: str = "Normal", key: str | None = None) -> None:
        """Post an Event. With ``key``, the Event's name is made from it, so recording the
        same key again (another leader, after a crash) is a no-op: idempotent by name."""
        meta = regarding.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        suffix = (hashlib.sha256(key.encode()).hexdigest()[:16] if key is not None
                  else secrets.token_hex(8))
        body = {
            "metadata": {"name": f"{meta.get('name')}.{suffix}", "namespace": namespace},
            "eventTime": format_microtime(datetime.now(UTC)),
            "reportingController": names.CONTROLLER_NAME,
            "reportingInstance": self.instance,
            "action": action,
            "reason": reason,
            "note": note[:1024],
            "type": type_,
            "regarding": {"apiVersion": regarding.get("apiVersion", ""),
                          "kind": regarding.get("kind", ""), "namespace": namespace,
                          "name": meta.get("name", ""), "uid": meta.get("uid", "")},
        }
        try:
            await self.kube.create(EVENT, body, namespace)
        except errors.KubeConflict as exc:
            if key is None:  # a random name taken: advice lost, as any other failure
                log.warning("cannot record event %s on %s/%s: %s", reason, namespace,
                            meta.get("name"), exc)
            else:
                log.debug("event %s on %s/%s was recorded already", reason, namespace,
                          meta.get("name"))
        except errors.KubeError as exc:
            log.warning("cannot record event %s on %s/%s: %s", reason, namespace,
                        meta.get("name"), exc)


class BackgroundEvents:
    """Events recorded in the background, off a decision's critical path: the next write
    does not wait for them. At most ``limit`` at once; beyond it one is dropped, with a
    warning (Events are advice; decisions must not wait for them)."""

    def __init__(self, limit: int = 256) -> None:
        self.limit = limit
        self._tasks: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, what: str, coro: Coroutine[Any, Any, None]) -> None:
        if len(self._tasks) >= self.limit:
            coro.close()
            log.warning("not recording event %s: %d events in flight already", what,
                        len(self._tasks))
            return
        task = asyncio.get_running_loop().create_task(coro, name=f"event {what}")
        self._tasks.add(task)
        task.add_done_callback(self._recorded)

    def _recorded(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()  # the recorder logs API errors itself: this is a bug
        if exc is not None:
            log.error("%s failed", task.get_name(), exc_info=exc)

    async def settle(self) -> None:
        """Wait until no Event is being recorded (tests; the recorder never raises)."""
        while self._tasks:
            await asyncio.gather(*set(self._tasks), return_exceptions=True)

    async def aclose(self, timeout: float = 5.0) -> None:
        """Give the Events in flight ``timeout`` seconds to be recorded, then cancel them."""
        if not self._tasks:
            return
        _, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            log.warning("stopping: %d events not recorded", len(pending))
        await asyncio.gather(*pending, return_exceptions=True)


def parse_listen(value: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:port`` for IPv6); raises ValueError with a readable message."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected host:port, got {value!r}")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


class HealthServer:
    """``/healthz`` (the event loop answers) and ``/readyz`` (``ready()`` says so)."""

    def __init__(self, ready: Callable[[], tuple[bool, str]], metrics: Metrics) -> None:
        self._ready = ready
        self._metrics = metrics
        self._runners: list[web.AppRunner] = []

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, _: web.Request) -> web.Response:
        ok, why = self._ready()
        return web.Response(status=200 if ok else 503, text=f"{why}\n")

    async def _metrics_view(self, _: web.Request) -> web.Response:
        return web.Response(body=self._metrics.render(),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def start(self, *, health: str | None, metrics: str | None) -> None:
        for listen, routes in ((health, [web.get("/healthz", self._healthz),
                                         web.get("/readyz", self._readyz)]),
                               (metrics, [web.get("/metrics", self._metrics_view)])):
            if not listen:
                continue
            app = web.Application()
            app.add_routes(routes)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            self._runners.append(runner)  # cleaned up by stop() even if the bind fails
            host, port = parse_listen(listen)
            await web.TCPSite(runner, host, port).start()

    async def stop(self) -> None:
        for runner in self._runners:
            await runner.cleanup()
        self._runners.clear()

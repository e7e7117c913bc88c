"""The ``admission`` fixture: the admission controller as host processes on the test cluster.

Registered as a pytest plugin by tests/conftest.py. Every replica listens on the webhook
address the MutatingWebhookConfiguration names (127.0.0.1:9443, or $DISPATCH_TEST_WEBHOOK;
shared with SO_REUSEPORT)
and serves with the shared TLS Secret, so any live replica answers the API server, as
endpoints behind a Service would. A controller started by ``deploy/local/admission.sh`` is
paused for the session and started again afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "deploy/local/admission.sh"
# Another cluster on this machine needs a webhook address of its own.
WEBHOOK = os.environ.get("DISPATCH_TEST_WEBHOOK", "127.0.0.1:9443")
TLS_SECRET = "dispatch-admission-tls"
RESOURCE_FLAVOR = r.Resource(names.KUEUE_GROUP, names.KUEUE_VERSION, "resourceflavors",
                             "ResourceFlavor", namespaced=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Replica:
    identity: str
    proc: subprocess.Popen[bytes]
    health: int
    log: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill9(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self, timeout: float = 20) -> int:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return int(self.proc.returncode)

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health}/readyz", timeout=1) as f:
                return bool(f.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@dataclass
class AdmissionHandle:
    """Start, kill and inspect controller replicas; everything is stopped at teardown."""

    kubeconfig: str
    state: Path
    lease_duration: float = 6.0
    renew_deadline: float = 4.0
    retry_period: float = 1.0
    replicas: list[Replica] = field(default_factory=list)

    def start(self, *, identity: str | None = None, env: dict[str, str] | None = None,
              wait: bool = True, args: tuple[str, ...] = ()) -> Replica:
        """Start a replica; ``args`` are added last (so they override the defaults)."""
        identity = identity or f"adm-test-{uuid.uuid4().hex[:6]}"
        health = _free_port()
        log = self.state / f"{identity}.log"
        cmd = [sys.executable, "-m", "admission", "--kubeconfig", self.kubeconfig,
               "--identity", identity, "--webhook-listen", WEBHOOK,
               "--webhook-url", f"https://{WEBHOOK}", "--tls-secret", TLS_SECRET,
               "--health-listen", f"127.0.0.1:{health}",
               "--lease-duration", str(self.lease_duration),
               "--renew-deadline", str(self.renew_deadline),
               "--retry-period", str(self.retry_period), *args]
        with open(log, "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
                                    env={**os.environ, **(env or {})})
        rep = Replica(identity, proc, health, log)
        self.replicas.append(rep)
        if wait:
            deadline = time.monotonic() + 60
            while not rep.ready():
                if not rep.alive():
                    raise AssertionError(f"replica {identity} exited:\n{rep.log_text()}")
                if time.monotonic() > deadline:
                    raise AssertionError(f"replica {identity} not ready:\n{rep.log_text()}")
                time.sleep(0.1)
        return rep

    async def holder(self, kube: Kube) -> str:
        lease = await kube.get_or_none(r.LEASE, names.LEASE_NAME, names.CONTROLLER_NAMESPACE)
        return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")

    async def wait_leader(self, kube: Kube, among: list[Replica] | None = None,
                          limit: float = 30) -> Replica:
        ids = {rep.identity: rep for rep in (among or self.replicas) if rep.alive()}
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            holder = await self.holder(kube)
            if holder in ids:
                return ids[holder]
            await asyncio.sleep(0.1)
        raise AssertionError(f"no replica of {sorted(ids)} took the lease within {limit}s")

    def stop_all(self) -> None:
        for rep in self.replicas:
            rep.terminate()


@pytest.fixture(scope="session")
def _host_controller_paused(kubeconfig: str) -> Iterator[None]:
    """Stop a controller run by admission.sh for the session; start it again afterwards."""
    running = SCRIPT.exists() and subprocess.run(
        [str(SCRIPT), "status"], capture_output=True, check=False).returncode == 0
    if running:
        subprocess.run([str(SCRIPT), "stop"], check=True)
    try:
        yield
    finally:
        if running:
            subprocess.run([str(SCRIPT), "start", kubeconfig], check=False)


@pytest_asyncio.fixture(scope="session")
async def admission_base(kube: Kube) -> AsyncIterator[None]:
    """The cluster objects the admission tests need: the AdmissionCheck and a flavor."""
    made: list[tuple[r.Resource, str]] = []
    # The controller's namespace is left in place: the Lease and TLS Secret live there.
    with contextlib.suppress(errors.KubeConflict):
        await kube.create(r.NAMESPACE, {"metadata": {"name": names.CONTROLLER_NAMESPACE}})
    for res, body in (
        (r.ADMISSION_CHECK, {"metadata": {"name": names.ADMISSION_CHECK},
                             "spec": {"controllerName": names.CONTROLLER_NAME}}),
        (RESOURCE_FLAVOR, {"metadata": {"name": "default-flavor"}}),
    ):
        try:
            await kube.create(res, body)
            made.append((res, body["metadata"]["name"]))
        except errors.KubeConflict:
            pass
    yield
    for res, name in made:
        await kube.delete(res, name)


LOCK = Path(os.environ.get("DISPATCH_ADMISSION_TEST_LOCK", "/tmp/dispatch-admission-test.lock"))


@pytest.fixture
def admission(kubeconfig: str, _host_controller_paused: None, admission_base: None,
              tmp_path: Path) -> Iterator[AdmissionHandle]:
    # One Lease and one webhook address per cluster: test runs of several processes on one
    # cluster would take each other's leadership, so they take turns (a file lock).
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        handle = AdmissionHandle(kubeconfig=kubeconfig, state=tmp_path)
        try:
            yield handle
        finally:
            handle.stop_all()


def dump_logs(handle: AdmissionHandle) -> str:
    return "\n".join(f"--- {rep.identity}\n{rep.log_text()[-4000:]}" for rep in handle.replicas)


Obj = dict[str, Any]

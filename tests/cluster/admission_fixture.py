"""The ``admission`` fixture: the admission controller the tests run against.

Its fixtures are imported by tests/cluster/conftest.py. ``await admission.deployed()`` is the
default: the controller as users deploy it, the Deployment ``dispatch-system/dispatch-admission``
that deploy/local/up.sh rolls out (two replicas on the control-plane node, webhook behind its
Service). Tests that inject faults at a precise instant (a crash point named by --fault, a
SIGKILL of one replica, a shorter lease) start host-process replicas with
``admission.start(...)`` instead; the Deployment is scaled to zero first, so the two never
run at once, and ``deployed()`` scales it back. Every host replica listens on the webhook
address the MutatingWebhookConfiguration then names (127.0.0.1:9443, or
$DISPATCH_TEST_WEBHOOK; shared with SO_REUSEPORT) and serves with a TLS Secret of its own
(its certificate names 127.0.0.1), so any live replica answers the API server, as endpoints
behind a Service would. A controller started by ``deploy/local/admission.sh`` is paused for
the session and started again afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import shutil
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
import yaml

from dispatch_kubeflow import errors, preflight
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r
from tests.cluster.helpers import token_kubeconfig

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "deploy/local/admission.sh"
# Another cluster on this machine needs a webhook address of its own.
WEBHOOK = os.environ.get("DISPATCH_TEST_WEBHOOK", "127.0.0.1:9443")
# Not the in-cluster controller's Secret: a host replica's certificate names 127.0.0.1.
TLS_SECRET = "dispatch-admission-host-tls"
DEPLOYMENT = r.Resource("apps", "v1", "deployments", "Deployment")
# deploy/admission's Deployment, Service and pod label (not names.CONTROLLER_NAME, the
# AdmissionCheck's controllerName).
DEPLOYMENT_NAME = "dispatch-admission"
CLIENT_CA_CONFIGMAP = "dispatch-admission-client-ca"
"""The CA of the API server's client certificate for webhooks (deploy/admission/mtls)."""
DEPLOYED_REPLICAS = 2
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
    admin_kubeconfig: str = ""
    used_deployment: bool = False

    def _kubectl(self, *args: str) -> str:
        done = subprocess.run([kubectl_binary(), "--kubeconfig", self.admin_kubeconfig,
                               "-n", names.CONTROLLER_NAMESPACE, *args],
                              capture_output=True, text=True, check=False, timeout=150)
        if done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {done.stderr}")
        return done.stdout

    def _has_deployment(self) -> bool:
        return bool(self.admin_kubeconfig) and subprocess.run(
            [kubectl_binary(), "--kubeconfig", self.admin_kubeconfig, "-n",
             names.CONTROLLER_NAMESPACE, "get", "deployment", DEPLOYMENT_NAME],
            capture_output=True, check=False).returncode == 0

    def client_ca(self) -> list[str]:
        """``--client-ca`` as the deployed controller has it (the ConfigMap the mtls component
        mounts), so host replicas too serve only the API server; none without it."""
        if not self.admin_kubeconfig:
            return []
        done = subprocess.run(
            [kubectl_binary(), "--kubeconfig", self.admin_kubeconfig, "-n",
             names.CONTROLLER_NAMESPACE, "get", "configmap", CLIENT_CA_CONFIGMAP, "-o",
             r"jsonpath={.data.ca\.crt}"], capture_output=True, text=True, check=False)
        if done.returncode != 0 or not done.stdout.strip():
            return []
        path = self.state / "client-ca.crt"
        path.write_text(done.stdout)
        return ["--client-ca", str(path)]

    def none(self) -> None:
        """No controller at all for a while (the next start() or deployed() brings one): the
        Deployment scaled to zero and host replicas stopped. Its AdmissionCheck goes
        inactive, so Kueue reserves no quota in the meantime."""
        self.stop_all()
        self._scale_deployment_to_zero()

    def _scale_deployment_to_zero(self) -> None:
        """No in-cluster replica runs beside host replicas: they would share the Lease."""
        if not self._has_deployment():
            return
        self._kubectl("scale", "deployment", DEPLOYMENT_NAME, "--replicas=0")
        self._kubectl("wait", "--for=delete", "pod", "-l",
                      f"app.kubernetes.io/name={DEPLOYMENT_NAME}", "--timeout=60s")

    async def deployed(self, kube: Kube, limit: float = 120) -> str:
        """The in-cluster controller, all replicas Ready and one of them leading; returns the
        leader's pod name. Host replicas of this test are stopped first."""
        if not self._has_deployment():
            raise AssertionError(
                "no Deployment dispatch-system/dispatch-admission: deploy/local/up.sh deploys "
                "it unless DISPATCH_CONTROLLER=host; on another cluster apply deploy/admission")
        self.stop_all()
        self.replicas.clear()
        self.used_deployment = True
        # Scaling sets an absolute count: idempotent.
        self._kubectl("scale", "deployment", DEPLOYMENT_NAME,
                      f"--replicas={DEPLOYED_REPLICAS}")
        self._kubectl("rollout", "status", f"deployment/{DEPLOYMENT_NAME}",
                      f"--timeout={int(limit)}s")
        deadline = time.monotonic() + limit
        while True:
            pods, _ = await kube.list(r.POD, names.CONTROLLER_NAMESPACE,
                                   label_selector=f"app.kubernetes.io/name={DEPLOYMENT_NAME}")
            live = {p["metadata"]["name"] for p in pods
                    if not p["metadata"].get("deletionTimestamp")}
            holder = await self.holder(kube)
            if holder in live:
                return holder
            if time.monotonic() > deadline:
                raise AssertionError(f"no pod of {sorted(live)} leads (holder {holder!r})")
            await asyncio.sleep(0.2)

    def deployed_logs(self) -> str:
        if not self.used_deployment:
            return ""
        done = subprocess.run([kubectl_binary(), "--kubeconfig", self.admin_kubeconfig, "-n",
                               names.CONTROLLER_NAMESPACE, "logs", "--prefix", "--tail=200",
                               "-l", f"app.kubernetes.io/name={DEPLOYMENT_NAME}"],
                              capture_output=True, text=True, check=False)
        return done.stdout + done.stderr

    def start(self, *, identity: str | None = None, env: dict[str, str] | None = None,
              wait: bool = True, args: tuple[str, ...] = ()) -> Replica:
        """Start a host replica; ``args`` are added last (so they override the defaults)."""
        if not self.replicas:
            self._scale_deployment_to_zero()
        identity = identity or f"adm-test-{uuid.uuid4().hex[:6]}"
        health = _free_port()
        log = self.state / f"{identity}.log"
        cmd = [sys.executable, "-m", "admission", "--kubeconfig", self.kubeconfig,
               "--identity", identity, "--webhook-listen", WEBHOOK,
               "--webhook-url", f"https://{WEBHOOK}", "--tls-secret", TLS_SECRET,
               "--health-listen", f"127.0.0.1:{health}",
               "--lease-duration", str(self.lease_duration),
               "--renew-deadline", str(self.renew_deadline),
               "--retry-period", str(self.retry_period), *self.client_ca(), *args]
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
def _admission_turn() -> Iterator[None]:
    # One Lease and one webhook address per cluster: test runs of several processes on one
    # cluster would take each other's leadership, so they take turns (a file lock).
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest_asyncio.fixture(scope="session")
async def a_policy_in_force(kube: Kube) -> AsyncIterator[None]:
    """The A-write policy, in force from the first admission test to the session's end.

    Once per session, not per test: while the API server drops a binding whose ConfigMap it
    already forgot, it refuses every TrainJob write (422, "no params found"), which would
    hit whatever test runs next."""
    async with a_write_policy(kube):
        yield


@pytest.fixture(scope="session")
def _deployment_restored(kubeconfig: str) -> Iterator[None]:
    """The in-cluster controller as up.sh left it once the session ends (host-replica tests
    scale it to zero)."""
    yield
    handle = AdmissionHandle(kubeconfig=kubeconfig, state=Path("/tmp"),
                             admin_kubeconfig=kubeconfig)
    if handle._has_deployment():
        handle._kubectl("scale", "deployment", DEPLOYMENT_NAME,
                        f"--replicas={DEPLOYED_REPLICAS}")


@pytest_asyncio.fixture
async def admission(kubeconfig: str, kube: Kube, _host_controller_paused: None,
                    _deployment_restored: None,
                    admission_base: None, a_policy_in_force: None, _admission_turn: None,
                    tmp_path: Path) -> AsyncIterator[AdmissionHandle]:
    # Only the controller may write A in Kueue mode, and the tests' library is the admin:
    # the replicas log in as the controller's ServiceAccount, as in a cluster.
    await ensure_controller_identity(kube)
    path = await controller_kubeconfig(kube, kubeconfig, tmp_path / "controller.kubeconfig")
    handle = AdmissionHandle(kubeconfig=path, state=tmp_path, admin_kubeconfig=kubeconfig)
    try:
        yield handle
    finally:
        handle.stop_all()


def dump_logs(handle: AdmissionHandle) -> str:
    return "\n".join([f"--- {rep.identity}\n{rep.log_text()[-4000:]}" for rep in handle.replicas]
                     + [handle.deployed_logs()[-8000:]])


def kubectl_binary() -> str:
    """The cluster's own kubectl (deploy/local/lib.sh's cache), else one on PATH."""
    given = os.environ.get("DISPATCH_KUBECTL")
    if given:
        return given
    cache = Path(os.environ.get("DISPATCH_CACHE") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dispatch-kubeflow")
    cached = sorted((cache / "bin").glob("kubectl-v*"))
    if cached:
        return str(cached[-1])
    found = shutil.which("kubectl")
    if not found:
        pytest.skip("no kubectl")
    return found


Obj = dict[str, Any]


# --- the controller's identity, and who may write A -------------------------------------------

MANIFESTS = REPO / "deploy/admission"
FIXTURE_MANAGER = "dispatch-admission-fixture"
_RBAC, _REG = "rbac.authorization.k8s.io", "admissionregistration.k8s.io"
KINDS: dict[str, r.Resource] = {
    "ServiceAccount": r.SERVICE_ACCOUNT,
    "ConfigMap": r.Resource("", "v1", "configmaps", "ConfigMap"),
    "Role": r.Resource(_RBAC, "v1", "roles", "Role"),
    "RoleBinding": r.Resource(_RBAC, "v1", "rolebindings", "RoleBinding"),
    "ClusterRole": r.Resource(_RBAC, "v1", "clusterroles", "ClusterRole", namespaced=False),
    "ClusterRoleBinding": r.Resource(_RBAC, "v1", "clusterrolebindings", "ClusterRoleBinding",
                                     namespaced=False),
    "MutatingWebhookConfiguration": r.Resource(
        _REG, "v1", "mutatingwebhookconfigurations", "MutatingWebhookConfiguration",
        namespaced=False),
    "ValidatingAdmissionPolicy": r.Resource(
        _REG, "v1", "validatingadmissionpolicies", "ValidatingAdmissionPolicy",
        namespaced=False),
    "ValidatingAdmissionPolicyBinding": r.Resource(
        _REG, "v1", "validatingadmissionpolicybindings", "ValidatingAdmissionPolicyBinding",
        namespaced=False),
}
A_POLICY_FILE = "admission-count-policy.yaml"


def manifest(file: str) -> list[Obj]:
    """The documents of one file of deploy/admission, as written (no kustomize)."""
    return [d for d in yaml.safe_load_all((MANIFESTS / file).read_text()) if d]


def located(doc: Obj) -> tuple[r.Resource, str, str | None]:
    res = KINDS[doc["kind"]]
    return res, doc["metadata"]["name"], doc["metadata"].get("namespace") if res.namespaced \
        else None


async def ensure_controller_identity(kube: Kube) -> None:
    """The controller's ServiceAccount and RBAC (server-side apply: idempotent), and its
    webhook configuration when there is none: the controller may only get and update it."""
    for doc in manifest("serviceaccount.yaml") + manifest("rbac.yaml"):
        res, name, ns = located(doc)
        await kube.patch(res, name, doc, ns, kind="apply", field_manager=FIXTURE_MANAGER,
                         force=True)
    for doc in manifest("webhook.yaml"):
        # Created, never applied over: a host controller points it at a URL, and the
        # manifest's Service reference applied over that would hold both.
        res, _, _ = located(doc)
        with contextlib.suppress(errors.KubeConflict):
            await kube.create(res, doc)


async def controller_kubeconfig(kube: Kube, admin_kubeconfig: str, path: Path,
                                seconds: int = 7200) -> str:
    """A kubeconfig holding a token of the controller's ServiceAccount (TokenRequest)."""
    sa = manifest("serviceaccount.yaml")[0]["metadata"]
    issued = await kube.create(
        KINDS["ServiceAccount"], {"apiVersion": "authentication.k8s.io/v1",
                                  "kind": "TokenRequest", "spec": {"expirationSeconds": seconds}},
        sa["namespace"], name=sa["name"], subresource="token")
    return token_kubeconfig(admin_kubeconfig, issued["status"]["token"], path)


async def username(kube: Kube) -> str:
    review = await kube.create(preflight.SELF_SUBJECT_REVIEW, {})
    return str(review["status"]["userInfo"]["username"])


LOCAL_RESUMERS = "kueue-controller\ntrainer-controller\n"
"""Kueue's and Trainer's users on the local cluster (deploy/local/pki.sh), as up.sh lists
them: they resume Kueue-mode TrainJobs (the policy's key resumers)."""


def a_policy_docs(library_user: str) -> list[Obj]:
    """The policy, its bindings and their ConfigMaps as the local cluster has them: the
    plain-mode list names the tests' library (the admin), the Kueue-mode one lists the local
    Kueue and Trainer as resumers.
    ConfigMaps first and bindings last: a binding without its ConfigMap refuses every write."""
    docs = manifest(A_POLICY_FILE)
    for d in docs:
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == preflight.a_binding(False):
            d["data"] = {"writers": f"{library_user}\n"}
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == preflight.a_binding(True):
            d["data"]["resumers"] = LOCAL_RESUMERS
    order = ["ConfigMap", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    return sorted(docs, key=lambda d: order.index(d["kind"]))


A_PROBE = "dispatch-a-policy-probe"


def a_probe(queued: bool) -> Obj:
    """A TrainJob with A, for dry-run creates in ``default`` (never persisted)."""
    return {"metadata": {"name": A_PROBE, "annotations": {names.ADMISSION_COUNT: "1"},
                         "labels": {names.QUEUE_NAME_LABEL: "lq"} if queued else {}},
            "spec": {"runtimeRef": {"apiGroup": names.TRAINER_GROUP,
                                    "kind": names.KIND_CLUSTER_TRAINING_RUNTIME,
                                    "name": "dispatch-kind"}, "suspend": True}}


async def wait_a_policy_in_force(kube: Kube, limit: float = 30) -> None:
    """The API server takes up a new policy, binding or ConfigMap a moment later: wait until
    the admin's dry-run create of a queued TrainJob with A is refused by the policy, and of
    an unqueued one admitted (the admin is the plain-mode library)."""
    seen: list[str] = []

    async def in_force() -> bool:
        answers: list[errors.KubeError | None] = []
        for queued in (True, False):
            try:
                await kube.create(r.TRAINJOB, a_probe(queued), "default", dry_run=True)
                answers.append(None)
            except errors.KubeError as exc:
                answers.append(exc)
        seen[:] = [str(a) for a in answers]
        queued_refusal, plain_refusal = answers
        return (queued_refusal is not None and plain_refusal is None
                and preflight.refused_by_policy(queued_refusal, A_PROBE))

    deadline = time.monotonic() + limit
    while not await in_force():
        if time.monotonic() > deadline:
            raise AssertionError(f"the A-write policy not in force within {limit}s: {seen}")
        await asyncio.sleep(0.2)


@contextlib.asynccontextmanager
async def a_write_policy(kube: Kube) -> AsyncIterator[None]:
    """deploy/admission's A-write policy in force while the caller runs. What this made is
    deleted afterwards, bindings first; what existed before is left (admission.sh's)."""
    made: list[tuple[r.Resource, str, str | None]] = []
    try:
        for doc in a_policy_docs(await username(kube)):
            res, name, ns = located(doc)
            try:
                await kube.create(res, doc, ns)
                made.append((res, name, ns))
            except errors.KubeConflict:
                pass
        await wait_a_policy_in_force(kube)
        yield
    finally:
        for res, name, ns in reversed(made):
            await kube.delete(res, name, ns)

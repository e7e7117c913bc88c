"""The admission controller's kustomize manifests (deploy/admission) against the real cluster.

The API server accepts every rendered object (server-side dry run, nothing persisted), the
Deployment's pods meet the restricted Pod Security Standard its namespace enforces, and the
controller does its whole job with nothing but the ServiceAccount's RBAC: it runs as a host
process with a kubeconfig holding a token of that ServiceAccount.
"""

from __future__ import annotations

import copy
import re
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml

from dispatch_kubeflow import errors, preflight
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube, Resource
from dispatch_kubeflow.kube import resources as r
from tests.cluster.admission_fixture import (
    KINDS,
    AdmissionHandle,
    controller_kubeconfig,
    dump_logs,
    kubectl_binary,
)
from tests.cluster.helpers import (
    delete_cluster_queue,
    eventually,
    is_true,
    make_queues,
    pod_log,
)
from tests.cluster.test_admission_cluster import (
    SLOW_TERM,
    admission_count,
    dispatch_job,
    env_of,
    raised_events,
    wait_ready,
    wait_running_pods,
)

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="session")]
Obj = dict[str, Any]

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "deploy/admission"
FIELD_MANAGER = "dispatch-manifest-test"
RBAC = "rbac.authorization.k8s.io"
RESOURCES: dict[str, Resource] = {
    "ServiceAccount": r.SERVICE_ACCOUNT,
    "Role": Resource(RBAC, "v1", "roles", "Role"),
    "RoleBinding": Resource(RBAC, "v1", "rolebindings", "RoleBinding"),
    "ClusterRole": Resource(RBAC, "v1", "clusterroles", "ClusterRole", namespaced=False),
    "ClusterRoleBinding": Resource(RBAC, "v1", "clusterrolebindings", "ClusterRoleBinding",
                                   namespaced=False),
    "Service": Resource("", "v1", "services", "Service"),
    "Deployment": Resource("apps", "v1", "deployments", "Deployment"),
    "MutatingWebhookConfiguration": Resource(
        "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration", namespaced=False),
    # Who may write A (admission-count-policy.yaml).
    **{k: KINDS[k] for k in ("ConfigMap", "ValidatingAdmissionPolicy",
                             "ValidatingAdmissionPolicyBinding")},
}
IDENTITY_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")




def kubectl(kubeconfig: str, *args: str, stdin: str | None = None,
            check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([kubectl_binary(), "--kubeconfig", kubeconfig, *args], input=stdin,
                          capture_output=True, text=True, timeout=120, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return proc


def rendered(kubeconfig: str) -> list[Obj]:
    out = kubectl(kubeconfig, "kustomize", str(MANIFESTS)).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def one(docs: list[Obj], kind: str) -> Obj:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, (kind, found)
    return found[0]


def dump(docs: list[Obj]) -> str:
    return yaml.safe_dump_all(docs)


async def exists(kube: Kube, doc: Obj) -> bool:
    res = RESOURCES[doc["kind"]]
    ns = doc["metadata"].get("namespace") if res.namespaced else None
    return await kube.get_or_none(res, doc["metadata"]["name"], ns) is not None


# --- 1. the API server accepts every object -------------------------------------------------

async def test_manifests_are_accepted_by_the_api_server(kubeconfig: str, kube: Kube) -> None:
    docs = rendered(kubeconfig)
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(["Namespace", "ServiceAccount", "Role", "ClusterRole", "RoleBinding",
                            "ClusterRoleBinding", "Service", "Deployment", "AdmissionCheck",
                            "PodDisruptionBudget", "MutatingWebhookConfiguration",
                            # who may write A (two), what the controller may write (one)
                            "ConfigMap", "ConfigMap", "ConfigMap",
                            "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicy",
                            "ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicyBinding",
                            "ValidatingAdmissionPolicyBinding"])
    before = {(d["kind"], d["metadata"]["name"]): await exists(kube, d)
              for d in docs if d["kind"] in RESOURCES}

    # A controller run on the host (deploy/local/admission.sh, the admission fixture) points
    # the live configuration at a URL; applying the manifest's Service reference over it
    # would hold both, which the API server rightly refuses. Check the manifest's own
    # configuration as a fresh object then, under another name.
    webhook = one(docs, "MutatingWebhookConfiguration")
    live = await kube.get_or_none(RESOURCES["MutatingWebhookConfiguration"],
                                  webhook["metadata"]["name"])
    if live and any("url" in (h.get("clientConfig") or {}) for h in live.get("webhooks") or []):
        webhook["metadata"]["name"] = f"dispatch-manifest-check-{uuid.uuid4().hex[:6]}"
    proc = kubectl(kubeconfig, "apply", "--server-side", "--dry-run=server",
                   f"--field-manager={FIELD_MANAGER}", "--force-conflicts", "-f", "-",
                   stdin=dump(docs))
    accepted = [line for line in proc.stdout.splitlines()
                if line.endswith("serverside-applied (server dry run)")]
    assert len(accepted) == len(docs), proc.stdout
    assert "PodSecurity" not in proc.stderr, proc.stderr

    # Nothing was persisted.
    for d in docs:
        if d["kind"] in RESOURCES:
            was = before.get((d["kind"], d["metadata"]["name"]), False)
            assert await exists(kube, d) == was, (d["kind"], d["metadata"]["name"])
    cluster_role = one(docs, "ClusterRole")["metadata"]["name"]
    if not before[("ClusterRole", cluster_role)]:
        assert await kube.get_or_none(RESOURCES["ClusterRole"], cluster_role) is None

    # The Deployment's pods pass the Pod Security level its namespace enforces. The live
    # namespace may predate the manifest's labels (admission.sh creates it bare), so check in
    # a scratch namespace labelled exactly as namespace.yaml labels dispatch-system.
    ns_labels = one(docs, "Namespace")["metadata"].get("labels") or {}
    assert ns_labels.get("pod-security.kubernetes.io/enforce") == "restricted", ns_labels
    scratch = f"psa-{uuid.uuid4().hex[:8]}"
    await kube.create(r.NAMESPACE, {"metadata": {"name": scratch, "labels": {
        k: v for k, v in ns_labels.items() if k.startswith("pod-security.kubernetes.io/")}}})
    try:
        deployment = copy.deepcopy(one(docs, "Deployment"))
        deployment["metadata"]["namespace"] = scratch
        proc = kubectl(kubeconfig, "apply", "--server-side", "--dry-run=server",
                       f"--field-manager={FIELD_MANAGER}", "-f", "-", stdin=dump([deployment]))
        assert "PodSecurity" not in proc.stderr, proc.stderr

        # Pods are where the level is enforced: a pod from the template, server dry run. Its
        # ServiceAccount is the scratch namespace's default (the controller's is not there).
        template = deployment["spec"]["template"]
        spec = {**template["spec"], "serviceAccountName": "default"}
        pod = {"metadata": {**template["metadata"], "name": "dispatch-admission-psa"},
               "spec": spec}
        await eventually(lambda: kube.get_or_none(RESOURCES["ServiceAccount"], "default",
                                                  scratch), 30, "the default ServiceAccount")
        made = await kube.create(r.POD, pod, scratch, dry_run=True)
        assert made["metadata"]["name"] == "dispatch-admission-psa"
        # The same pod without its security context is refused: the level is enforced.
        bare = copy.deepcopy(pod)
        bare["spec"].pop("securityContext")
        for c in bare["spec"]["containers"]:
            c.pop("securityContext")
        with pytest.raises(errors.KubeError, match="restricted"):
            await kube.create(r.POD, bare, scratch, dry_run=True)
    finally:
        await kube.delete(r.NAMESPACE, scratch)


# --- 2. the controller works with only its RBAC ---------------------------------------------

@pytest_asyncio.fixture
async def identity_applied(kubeconfig: str, kube: Kube,
                           admission_base: None) -> AsyncIterator[list[Obj]]:
    """The manifests' ServiceAccount, roles and bindings, really applied; what this made is
    deleted afterwards (what existed before is left)."""
    docs = [d for d in rendered(kubeconfig) if d["kind"] in IDENTITY_KINDS]
    assert sorted(d["kind"] for d in docs) == sorted(IDENTITY_KINDS)
    made = [d for d in docs if not await exists(kube, d)]
    kubectl(kubeconfig, "apply", "--server-side", f"--field-manager={FIELD_MANAGER}",
            "--force-conflicts", "-f", "-", stdin=dump(docs))
    try:
        yield docs
    finally:
        for d in reversed(made):
            res = RESOURCES[d["kind"]]
            await kube.delete(res, d["metadata"]["name"],
                              d["metadata"].get("namespace") if res.namespaced else None)


@pytest_asyncio.fixture
async def webhook_configuration(kubeconfig: str, kube: Kube) -> AsyncIterator[None]:
    """The manifests create the MutatingWebhookConfiguration (the controller may only get and
    update it, by name): create it the same way when no earlier controller left one."""
    doc = one(rendered(kubeconfig), "MutatingWebhookConfiguration")
    if await exists(kube, doc):
        yield
        return
    kubectl(kubeconfig, "apply", "--server-side", f"--field-manager={FIELD_MANAGER}",
            "-f", "-", stdin=dump([doc]))
    try:
        yield
    finally:
        await kube.delete(RESOURCES["MutatingWebhookConfiguration"], doc["metadata"]["name"])


@pytest_asyncio.fixture
async def queued_ns(kube: Kube) -> AsyncIterator[str]:
    name = f"adm-rbac-{uuid.uuid4().hex[:6]}"
    await kube.create(r.NAMESPACE, {"metadata": {"name": name}})
    await make_queues(kube, name, checks=[names.ADMISSION_CHECK], cpu="2", memory="1Gi")
    try:
        yield name
    finally:
        await kube.delete(r.NAMESPACE, name)
        await delete_cluster_queue(kube, name)


@pytest.mark.usefixtures("_host_controller_paused", "webhook_configuration")
async def test_controller_works_with_only_its_rbac(
        kubeconfig: str, kube: Kube, identity_applied: list[Obj], queued_ns: str,
        tmp_path: Path) -> None:
    sa = one(identity_applied, "ServiceAccount")["metadata"]
    path = await controller_kubeconfig(kube, kubeconfig, tmp_path / "sa.yaml", seconds=3600)
    async with await Kube.connect(kubeconfig=path) as as_sa:
        who = await as_sa.create(preflight.SELF_SUBJECT_REVIEW, {})
        assert who["status"]["userInfo"]["username"] == \
            f"system:serviceaccount:{sa['namespace']}:{sa['name']}"
    async with await Kube.connect(kubeconfig=path) as as_sa:
        allowed, _ = await as_sa.access_review("delete", "pods", namespace=queued_ns)
        assert not allowed, "the token must carry the ServiceAccount's rights, not an admin's"

    # admin_kubeconfig: the in-cluster Deployment is scaled to zero first (one Lease).
    handle = AdmissionHandle(kubeconfig=path, state=tmp_path, admin_kubeconfig=kubeconfig)
    try:
        rep = handle.start()
        assert await handle.wait_leader(kube) is rep

        async def active() -> Obj | None:
            ac = await kube.get(r.ADMISSION_CHECK, names.ADMISSION_CHECK)
            return ac if is_true(ac, "Active") else None
        ac = await eventually(active, 30, "AdmissionCheck Active")
        assert rep.identity in next(c for c in ac["status"]["conditions"]
                                    if c["type"] == "Active")["message"]

        job_id, tj = await dispatch_job(kube, queued_ns, SLOW_TERM, nodes=1)
        try:
            await wait_ready(kube, queued_ns, tj)
            assert await admission_count(kube, queued_ns, tj) == 1
            # The webhook read A from the TrainJob with the ServiceAccount's rights.
            pods = await wait_running_pods(kube, queued_ns, tj, 1, "ready")
            env = env_of(await pod_log(kube, queued_ns, pods[0]["metadata"]["name"]))
            assert env["DISPATCH_ATTEMPT"] == f"{job_id}.1.1.1.0", env
            assert await raised_events(kube, queued_ns, tj, want=1) == 1
        finally:
            await kube.delete(r.TRAINJOB, tj, queued_ns)

        # A clean stop writes Active=False and releases the Lease: also with these rights.
        assert rep.terminate() == 0, dump_logs(handle)
        assert await handle.holder(kube) == ""
        ac = await kube.get(r.ADMISSION_CHECK, names.ADMISSION_CHECK)
        cond = next(c for c in ac["status"]["conditions"] if c["type"] == "Active")
        assert (cond["status"], cond["reason"]) == ("False", "ControllerStopped")
        # No refusal anywhere, kopf's "Not enough permissions" warnings included.
        log = rep.log_text()
        # A refusal reads "(403 Forbidden" or "HTTP 403"; a bare 403 can be part of a time.
        for pattern in (r"\b403 ", r"HTTP 403", "Forbidden", "forbidden", "permissions",
                        '"level":"error"'):
            assert not re.search(pattern, log), \
                f"{pattern!r} in the controller's log:\n{log[-6000:]}"
    finally:
        handle.stop_all()
        print(dump_logs(handle))  # shown when the test fails

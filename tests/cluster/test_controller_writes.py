"""The controller's own token may make the writes the controller makes and no other: the
policy deploy/admission/controller-writes-policy.yaml on the real API server (issue 28,
least privilege). Every write here is a dry run: the API server judges it, admission
included, and keeps nothing. Beside it, the controller's effective permissions as the API
server lists them, held to the table in docs/install-admission.md.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r
from tests.cluster.admission_fixture import (
    KINDS,
    REPO,
    controller_kubeconfig,
    ensure_controller_identity,
    kubectl_binary,
)
from tests.cluster.helpers import delete_cluster_queue, eventually, make_queues

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio]
Obj = dict[str, Any]
POLICY = "dispatch-admission-controller-writes"
SA = "system:serviceaccount:dispatch-system:dispatch-admission"
WEBHOOKS = KINDS["MutatingWebhookConfiguration"]


@pytest_asyncio.fixture
async def controller(kube: Kube, kubeconfig: str, tmp_path: Path) -> AsyncIterator[Kube]:
    """The controller's identity: a token of its ServiceAccount, as the replicas use."""
    await ensure_controller_identity(kube)
    path = await controller_kubeconfig(kube, kubeconfig, tmp_path / "controller.kubeconfig")
    async with await Kube.connect(kubeconfig=path) as k:
        yield k


async def forbidden(write: Awaitable[Obj]) -> None:
    """Refused by this policy: 403 Forbidden, its message naming the policy."""
    with pytest.raises(errors.KubeForbidden) as err:
        await write
    assert POLICY in str(err.value), str(err.value)


def trainjob(name: str) -> Obj:
    """Queued, in a queue with no quota: Kueue makes its Workload and never admits it."""
    return {"metadata": {"name": name, "labels": {names.QUEUE_NAME_LABEL: "lq"}},
            "spec": {"runtimeRef": {"apiGroup": names.TRAINER_GROUP,
                                    "kind": names.KIND_CLUSTER_TRAINING_RUNTIME,
                                    "name": "dispatch-kind"},
                     "suspend": True}}


async def test_the_controller_may_change_only_the_fields_it_owns(
        kube: Kube, controller: Kube, namespace: str) -> None:
    ns, name = namespace, "tj-owned"
    await make_queues(kube, ns, cpu="0", memory="0")
    try:
        tj = await kube.create(r.TRAINJOB, trainjob(name), ns)
        uid = tj["metadata"]["uid"]

        async def workload() -> str | None:
            items, _ = await kube.list(r.WORKLOAD, ns,
                                       label_selector=f"{names.KUEUE_JOB_UID_LABEL}={uid}")
            return str(items[0]["metadata"]["name"]) if items else None

        wl = await eventually(workload, 60, "Kueue's Workload of the TrainJob")

        # TrainJobs: A, its token, the approved JobSet and the hold, nothing else.
        await controller.patch(r.TRAINJOB, name, {"metadata": {"annotations": {
            names.HOLD_REASON: "expired", names.ADMISSION_COUNT: "1"}}}, ns, dry_run=True)
        await forbidden(controller.patch(r.TRAINJOB, name, {"spec": {"trainer": {
            "numNodes": 3}}}, ns, dry_run=True))
        await forbidden(controller.patch(r.TRAINJOB, name, {"metadata": {"labels": {
            names.QUEUE_NAME_LABEL: "elsewhere"}}}, ns, dry_run=True))
        await forbidden(controller.patch(r.TRAINJOB, name, {"metadata": {"annotations": {
            "example.com/note": "x"}}}, ns, dry_run=True))

        # Workloads: spec.active and the hold, nothing else of the spec or metadata.
        await controller.patch(r.WORKLOAD, wl, {"spec": {"active": False}, "metadata": {
            "annotations": {names.HOLD_INSTANCE: "1"}}}, ns, dry_run=True)
        await forbidden(controller.patch(r.WORKLOAD, wl, {"spec": {"queueName": "other"}},
                                         ns, dry_run=True))
        await forbidden(controller.patch(r.WORKLOAD, wl, {"metadata": {"annotations": {
            "example.com/note": "x"}}}, ns, dry_run=True))
        # Its status: dispatch's check entry only; no other check, no condition.
        now = "2026-01-01T00:00:00Z"
        await forbidden(controller.patch(r.WORKLOAD, wl, {"status": {"admissionChecks": [
            {"name": "someone-elses-check", "state": "Ready", "message": "",
             "lastTransitionTime": now}]}}, ns, subresource="status", dry_run=True))
        await forbidden(controller.patch(r.WORKLOAD, wl, {"status": {"conditions": [
            {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "",
             "lastTransitionTime": now}]}}, ns, subresource="status", dry_run=True))
    finally:
        await delete_cluster_queue(kube, ns)


async def test_the_controller_may_only_lift_dispatchs_gate_from_a_pod(
        kube: Kube, controller: Kube, namespace: str) -> None:
    # Gated by someone else: it never schedules, so nothing runs.
    pod = await kube.create(r.POD, {
        "metadata": {"name": "gated"},
        "spec": {"schedulingGates": [{"name": "example.com/wait"}],
                 "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}},
        namespace)
    name = pod["metadata"]["name"]
    await forbidden(controller.patch(r.POD, name, {"metadata": {"labels": {"x": "y"}}},
                                     namespace, dry_run=True))
    await forbidden(controller.patch(r.POD, name, [
        {"op": "replace", "path": "/spec/containers/0/image",
         "value": "registry.example/other:1"}], namespace, kind="json", dry_run=True))
    await forbidden(controller.patch(r.POD, name, [
        {"op": "remove", "path": "/spec/schedulingGates/0"}], namespace, kind="json",
        dry_run=True))


async def test_the_controller_may_point_its_webhook_only_at_its_service(
        kube: Kube, controller: Kube) -> None:
    """The controller may create webhook configurations (to make its own again when it is
    deleted: RBAC cannot limit a create to a name); the policy admits only its own."""
    config = await kube.get(WEBHOOKS, names.WEBHOOK_CONFIGURATION)
    hooks = config["webhooks"]

    def body(name: str, webhooks: list[Obj]) -> Obj:
        return {"metadata": {"name": name}, "webhooks": webhooks}

    # As it is, under another name: refused (a create is checked before the name is taken).
    await forbidden(controller.create(WEBHOOKS, body("someone-elses", hooks), dry_run=True))
    elsewhere = [{**h, "clientConfig": {"url": "https://webhook.example.com/mutate",
                                        "caBundle": h["clientConfig"].get("caBundle", "")}}
                 for h in hooks]
    await forbidden(controller.create(WEBHOOKS, body(names.WEBHOOK_CONFIGURATION, elsewhere),
                                      dry_run=True))
    wider = [{**h, "rules": [{**rule, "apiGroups": ["*"], "resources": ["*"]}
                             for rule in h["rules"]]} for h in hooks]
    await forbidden(controller.create(WEBHOOKS, body(names.WEBHOOK_CONFIGURATION, wider),
                                      dry_run=True))
    # Its own, as the manifests make it: admitted by the policy (the name is taken: 409).
    with pytest.raises(errors.KubeConflict):
        await controller.create(WEBHOOKS, body(names.WEBHOOK_CONFIGURATION, hooks),
                                dry_run=True)


# --- effective permissions ----------------------------------------------------------------
PERMISSIONS_HEADING = "### What the controller may do"


def documented_permissions() -> set[tuple[str, str, str]]:
    """(resource, resource names, verbs) rows of the docs' table."""
    text = (REPO / "docs" / "install-admission.md").read_text()
    section = text.split(PERMISSIONS_HEADING, 1)[1].split("\n#", 1)[0]
    rows = set()
    for line in section.splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] not in ("Scope", "---") and not cells[0].startswith("-"):
            rows.add((cells[1], cells[2], cells[3]))
    return rows


def can_i(kubeconfig: str, *scope: str) -> set[tuple[str, str, str]]:
    """``kubectl auth can-i --list`` as the controller: (resource or URL, names, verbs)."""
    out = subprocess.run([kubectl_binary(), "--kubeconfig", kubeconfig, "auth", "can-i",
                          "--list", f"--as={SA}", *scope],
                         capture_output=True, text=True, check=True).stdout
    print(f"kubectl auth can-i --list --as={SA} {' '.join(scope)}\n{out}")
    rows = set()
    for line in out.splitlines()[1:]:
        cols = re.split(r"\s{2,}", line.strip())
        if len(cols) == 4:  # a resource: Resources, Non-Resource URLs ([]), names, verbs
            rows.add((cols[0], cols[2].strip("[]"), cols[3].strip("[]")))
        elif len(cols) == 3:  # a URL: the Resources column is empty
            rows.add((cols[0].strip("[]"), cols[1].strip("[]"), cols[2].strip("[]")))
    return rows


async def everyones(kube: Kube) -> set[str]:
    """What any authenticated ServiceAccount may read or review, whatever its RBAC: the
    resources and URLs of the ClusterRoles bound to system:authenticated and
    system:serviceaccounts (discovery, health, self reviews, trust bundles)."""
    crb = r.Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings",
                     "ClusterRoleBinding", namespaced=False)
    bindings, _ = await kube.list(crb)
    everyone = {"system:authenticated", "system:serviceaccounts"}
    out: set[str] = set()
    for b in bindings:
        if not any(s.get("kind") == "Group" and s.get("name") in everyone
                   for s in b.get("subjects") or []):
            continue
        role = await kube.get(KINDS["ClusterRole"], b["roleRef"]["name"])
        for rule in role.get("rules") or []:
            out.update(rule.get("nonResourceURLs") or [])
            for group in rule.get("apiGroups") or []:
                out.update(f"{res}.{group}" if group else res
                           for res in rule.get("resources") or [])
    return out


async def test_the_controller_holds_no_permission_the_docs_do_not_list(
        kube: Kube, kubeconfig: str) -> None:
    documented = documented_permissions()
    assert documented, "the docs' permissions table was not found"
    held = can_i(kubeconfig) | can_i(kubeconfig, "-n", names.CONTROLLER_NAMESPACE)
    baseline = await everyones(kube)
    granted = {row for row in held if not (row[0] in baseline and not row[1])}
    undocumented = sorted(granted - documented)
    assert not undocumented, (
        f"the controller may do more than docs/install-admission.md lists under "
        f"'{PERMISSIONS_HEADING}': {undocumented}")
    # And the table lists nothing it cannot do: the docs say what is true.
    assert not sorted(documented - granted), sorted(documented - granted)

"""Webhook patch building, identity and the configuration it writes (pure)."""

from __future__ import annotations

import base64
import json
import socket
import ssl
from typing import Any

import aiohttp
import pytest

from admission import tls
from admission.observability import Metrics
from admission.pod_identity import (
    Denied,
    WebhookServer,
    env_patch,
    identity_for,
    review,
)
from admission.webhook_config import (
    GATE_LIFT_OR_CREATE,
    PATH,
    ClientConfig,
    webhook_configuration,
)
from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names


def pod(**labels: str) -> dict[str, Any]:
    base = {names.JOB_ID_LABEL: "01JOB", names.SUBMISSION_LABEL: "1",
            names.ATTEMPT_LABEL: "1", names.JOBSET_NAME_LABEL: "dj-01job-s1",
            names.RESTART_ATTEMPT_LABEL: "0"}
    base.update(labels)
    return {"metadata": {"generateName": "p-", "labels": {k: v for k, v in base.items() if v}},
            "spec": {"initContainers": [{"name": "init"}],
                     "containers": [{"name": "node", "env": [
                         {"name": "KEEP", "value": "1"},
                         {"name": "DISPATCH_EPOCH", "value": "stale"}]},
                         {"name": "side"}]}}


def trainjob(a: str | None = None, job: str = "01JOB") -> dict[str, Any]:
    ann = {names.ADMISSION_COUNT: a} if a is not None else {}
    return {"metadata": {"name": "dj-01job-s1", "namespace": "ns",
                         "labels": {names.JOB_ID_LABEL: job}, "annotations": ann}}


def test_identity_a_and_j() -> None:
    ident = identity_for(pod(**{names.RESTART_ATTEMPT_LABEL: "1"}), trainjob("2"))
    assert ident.env() == {"DISPATCH_JOB_ID": "01JOB", "DISPATCH_SUBMISSION": "1",
                           "DISPATCH_ATTEMPT": "01JOB.1.1.2.1", "DISPATCH_EPOCH": "1000003"}
    twelve = identity_for(pod(**{names.SUBMISSION_LABEL: "12",
                                 names.RESTART_ATTEMPT_LABEL: "1"}), trainjob("2"))
    assert twelve.env()["DISPATCH_EPOCH"] == "12000003"


def test_preflight_probe_identity() -> None:
    # design.md: a dry-run pod of the probe (A absent = 0, J 0) gets .1.1.0.0 and 1000000.
    env = identity_for(pod(), trainjob()).env()
    assert env["DISPATCH_ATTEMPT"] == "01JOB.1.1.0.0"
    assert env["DISPATCH_EPOCH"] == "1000000"


@pytest.mark.parametrize(("p", "tj"), [
    (pod(**{names.SUBMISSION_LABEL: ""}), trainjob("1")),
    (pod(**{names.ATTEMPT_LABEL: "x"}), trainjob("1")),
    (pod(**{names.RESTART_ATTEMPT_LABEL: "-1"}), trainjob("1")),
    (pod(), trainjob("one")),
    (pod(), trainjob("1", job="OTHER")),
])
def test_unreadable_identity_is_denied(p: dict[str, Any], tj: dict[str, Any]) -> None:
    with pytest.raises(Denied):
        identity_for(p, tj)


def test_patch_sets_every_container_and_replaces_existing_values() -> None:
    ops = env_patch(pod(), identity_for(pod(), trainjob("1")))
    assert [o["path"] for o in ops] == ["/spec/initContainers/0/env",
                                        "/spec/containers/0/env", "/spec/containers/1/env"]
    assert all(o["op"] == "add" for o in ops)
    node_env = {e["name"]: e["value"] for e in ops[1]["value"]}
    assert node_env["KEEP"] == "1"
    assert node_env["DISPATCH_EPOCH"] == "1000001"
    assert [e["name"] for e in ops[1]["value"]].count("DISPATCH_EPOCH") == 1


async def _review(p: dict[str, Any], tj: dict[str, Any] | Exception | None,
                  pods: list[dict[str, Any]] | Exception | None = None,
                  dry_run: bool = True,
                  workloads: list[dict[str, Any]] | Exception | None = None) -> dict[str, Any]:
    async def get(ns: str, name: str) -> dict[str, Any] | None:
        assert (ns, name) == ("ns", "dj-01job-s1")
        if isinstance(tj, Exception):
            raise tj
        return tj

    async def list_pods(ns: str, name: str) -> list[dict[str, Any]]:
        assert (ns, name) == ("ns", "dj-01job-s1")
        if isinstance(pods, Exception):
            raise pods
        return pods or []

    async def list_workloads(ns: str, uid: str) -> list[dict[str, Any]]:
        assert ns == "ns"
        if isinstance(workloads, Exception):
            raise workloads
        return workloads or []

    out = await review({"uid": "u", "namespace": "ns", "object": p, "dryRun": dry_run}, get,
                       list_pods, list_workloads)
    assert out["apiVersion"] == "admission.k8s.io/v1"
    assert out["kind"] == "AdmissionReview"
    resp: dict[str, Any] = out["response"]
    assert resp["uid"] == "u"
    return resp


@pytest.mark.asyncio
async def test_review_patches_denies_and_ignores() -> None:
    ok = await _review(pod(), trainjob("1"))
    assert ok["allowed"]
    assert ok["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(ok["patch"]))[0]["op"] == "add"
    gone = await _review(pod(), None)
    assert not gone["allowed"]
    assert "does not exist" in gone["status"]["message"]
    broken = await _review(pod(), errors.KubeError("boom", status=500))
    assert not broken["allowed"]
    assert broken["status"]["code"] == 403
    no_jobset = await _review(pod(**{names.JOBSET_NAME_LABEL: ""}), trainjob("1"))
    assert not no_jobset["allowed"]
    other = await _review({"metadata": {"labels": {"app": "x"}}}, trainjob("1"))
    assert other["allowed"]
    assert "patch" not in other


def _ops(resp: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = json.loads(base64.b64decode(resp["patch"]))
    return out


def _stored(p: dict[str, Any], a: str, uid: str, gated: bool = True,
            phase: str = "Pending") -> dict[str, Any]:
    """``p`` as the webhook admitted it at A = ``a`` and the API server stored it."""
    ident = identity_for(p, trainjob(a))
    out: dict[str, Any] = json.loads(json.dumps(p))
    out["metadata"].update(name=f"p-{uid}", uid=uid, namespace="ns")
    out["spec"]["containers"][0]["env"] = [{"name": k, "value": v}
                                           for k, v in ident.env().items()]
    if gated:
        out["spec"]["schedulingGates"] = [{"name": "other"}, {"name": names.EXECUTION_GATE}]
    out["status"] = {"phase": phase}
    return out


@pytest.mark.asyncio
async def test_an_admitted_pod_is_gated_and_a_reinvocation_gates_it_once() -> None:
    ops = _ops(await _review(pod(), trainjob("1"), dry_run=False))
    assert ops[-1] == {"op": "add", "path": "/spec/schedulingGates",
                       "value": [{"name": names.EXECUTION_GATE}]}
    other = pod()
    other["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/topology"}]
    assert _ops(await _review(other, trainjob("1")))[-1] == {
        "op": "add", "path": "/spec/schedulingGates/-", "value": {"name": names.EXECUTION_GATE}}
    null = pod()
    null["spec"]["schedulingGates"] = None
    assert _ops(await _review(null, trainjob("1")))[-1] == {
        "op": "add", "path": "/spec/schedulingGates", "value": [{"name": names.EXECUTION_GATE}]}
    again = _stored(pod(), "1", "a")  # the webhook called again after another's mutation
    assert all("schedulingGates" not in o["path"]
               for o in _ops(await _review(again, trainjob("1"))))


@pytest.mark.asyncio
async def test_a_pod_with_its_node_set_at_creation_is_refused() -> None:
    p = pod()
    p["spec"]["nodeName"] = "dk-worker"
    resp = await _review(p, trainjob("1"), dry_run=False)
    assert not resp["allowed"]
    assert "spec.nodeName" in resp["status"]["message"]


async def _lift(old: dict[str, Any], tj: dict[str, Any], pods: list[dict[str, Any]],
                new: dict[str, Any] | None = None) -> dict[str, Any]:
    if new is None:
        new = dict(json.loads(json.dumps(old)))
        new["spec"]["schedulingGates"] = [g for g in old["spec"]["schedulingGates"]
                                          if g["name"] != names.EXECUTION_GATE]

    async def get(ns: str, name: str) -> dict[str, Any] | None:
        return tj

    async def list_pods(ns: str, name: str) -> list[dict[str, Any]]:
        return pods

    async def list_workloads(ns: str, uid: str) -> list[dict[str, Any]]:
        return []

    out = await review({"uid": "u", "namespace": "ns", "operation": "UPDATE", "object": new,
                        "oldObject": old}, get, list_pods, list_workloads)
    resp: dict[str, Any] = out["response"]
    return resp


@pytest.mark.asyncio
async def test_the_gate_lifts_only_for_the_current_execution_with_no_other_alive() -> None:
    mine = _stored(pod(), "2", "m")
    rank1 = _stored(pod(), "2", "r1")
    rank1["metadata"]["labels"][names.COMPLETION_INDEX_LABEL] = "1"
    # The current execution, beside another rank of it (itself among the pods stored):
    ok = await _lift(mine, trainjob("2"), [mine, rank1])
    assert ok["allowed"]
    assert "patch" not in ok
    # A pod the webhook admitted at A = 1, stored after the job moved on to A = 2 (the
    # model's podrace): its execution is over, it never starts.
    late = await _lift(_stored(pod(), "1", "l"), trainjob("2"), [mine])
    assert not late["allowed"]
    assert "given A=1" in late["status"]["message"]
    assert "at A=2 now" in late["status"]["message"]
    # An alive pod of another execution stored: wait for it to go.
    old = _stored(pod(**{names.RESTART_ATTEMPT_LABEL: "1"}), "2", "o", gated=False,
                  phase="Running")
    busy = await _lift(mine, trainjob("2"), [mine, old])
    assert not busy["allowed"]
    assert "waiting for 1 pods of another execution" in busy["status"]["message"]
    # ... gone, or finished: it starts.
    old["status"]["phase"] = "Succeeded"
    assert (await _lift(mine, trainjob("2"), [mine, old]))["allowed"]
    held = trainjob("2")
    held["spec"] = {"suspend": True}
    assert not (await _lift(mine, held, [mine]))["allowed"]


@pytest.mark.asyncio
async def test_updates_that_do_not_lift_the_gate_are_not_judged() -> None:
    mine = _stored(pod(), "1", "m")
    relabelled = json.loads(json.dumps(mine))
    relabelled["metadata"]["labels"]["x"] = "y"
    # The TrainJob is gone: a judged update would be refused; this one is not judged.
    resp = await _lift(mine, {}, [], new=relabelled)
    assert resp["allowed"]
    assert "patch" not in resp


def test_configuration_matches_design() -> None:
    cfg = webhook_configuration(ClientConfig(url="https://127.0.0.1:9443"), "Q0E=")
    assert cfg["metadata"]["name"] == "dispatch-admission"
    (hook,) = cfg["webhooks"]
    assert hook["name"] == "identity.dispatch.phpboyscout.uk"
    assert hook["failurePolicy"] == "Fail"
    assert hook["sideEffects"] == "None"
    assert hook["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    assert hook["rules"][0]["resources"] == ["pods"]
    # Of the updates, only the lift of dispatch's gate calls the webhook.
    assert hook["matchConditions"] == [{"name": "create-or-gate-lift",
                                        "expression": GATE_LIFT_OR_CREATE}]
    assert GATE_LIFT_OR_CREATE.startswith("request.operation == 'CREATE' || (")
    assert GATE_LIFT_OR_CREATE.count(names.EXECUTION_GATE) == 2
    assert hook["objectSelector"] == {"matchExpressions": [
        {"key": names.JOB_ID_LABEL, "operator": "Exists"}]}
    assert hook["clientConfig"] == {"url": "https://127.0.0.1:9443/mutate-pods",
                                    "caBundle": "Q0E="}
    svc = webhook_configuration(ClientConfig(service="dispatch-system/dispatch-admission"), "")
    assert svc["webhooks"][0]["clientConfig"]["service"] == {
        "namespace": "dispatch-system", "name": "dispatch-admission", "path": "/mutate-pods",
        "port": 443}


class _FakeKube:
    """Answers the GET and the LIST the webhook makes (unit test only)."""

    async def get_or_none(self, res: Any, name: str, namespace: str | None = None) -> Any:
        return trainjob("4") if name == "dj-01job-s1" else None

    async def list(self, res: Any, namespace: str | None = None,
                   **_: Any) -> tuple[list[Any], str]:
        return [], "1"


@pytest.mark.asyncio
async def test_https_server_answers_admission_reviews() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    material = tls.generate(["127.0.0.1"])
    server = WebhookServer(_FakeKube(), Metrics())  # type: ignore[arg-type]
    await server.start(f"127.0.0.1:{port}", material.ssl_context())
    try:
        client_ctx = ssl.create_default_context(cadata=material.ca.decode())
        review_body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": "x", "namespace": "ns", "object": pod()}}
        async with aiohttp.ClientSession() as http:
            async with http.post(f"https://127.0.0.1:{port}{PATH}", json=review_body,
                                 ssl=client_ctx) as resp:
                out = await resp.json()
            async with http.post(f"https://127.0.0.1:{port}{PATH}", data=b"nope",
                                 ssl=client_ctx) as bad:
                assert bad.status == 400
    finally:
        await server.stop()
    ops = json.loads(base64.b64decode(out["response"]["patch"]))
    env = {e["name"]: e["value"] for e in ops[1]["value"]}
    assert env["DISPATCH_ATTEMPT"] == "01JOB.1.1.4.0"


def running(name: str, *, jobset: str = "js1", a: int = 1, j: int = 0,
            phase: str = "Running", rank: str = "1") -> dict[str, Any]:
    """A pod that exists, with the identity the webhook gave it (rank 1; the new pods of
    these tests carry no rank label, which reads as another rank)."""
    return {"metadata": {"name": name, "labels": {
                names.JOBSET_NAME_LABEL: "dj-01job-s1", names.JOBSET_UID_LABEL: jobset,
                names.RESTART_ATTEMPT_LABEL: str(j), names.COMPLETION_INDEX_LABEL: rank}},
            "spec": {"containers": [{"name": "node", "env": [
                {"name": "DISPATCH_ATTEMPT", "value": f"01JOB.1.1.{a}.{j}"}]}]},
            "status": {"phase": phase}}


def approved(a: str, jobset: str | None) -> dict[str, Any]:
    tj = trainjob(a)
    if jobset is not None:
        tj["metadata"]["annotations"][names.APPROVED_JOBSET] = jobset
    return tj


@pytest.mark.asyncio
@pytest.mark.parametrize(("new", "tj", "pods", "allowed", "says"), [
    # The approved execution's pods, beside each other: admitted.
    (pod(**{names.JOBSET_UID_LABEL: "js1"}), approved("1", "js1"), [running("r1")], True, ""),
    # A re-made JobSet's pod while the old one lingers in its TERM handler (case 1).
    (pod(**{names.JOBSET_UID_LABEL: "js2"}), approved("1", "js1"), [running("old")], False,
     "the gate approved JobSet js1"),
    # ... and even once approved, while a pod of the old JobSet is alive (the last fence).
    (pod(**{names.JOBSET_UID_LABEL: "js2"}), approved("2", "js2"), [running("old")], False,
     "waiting for 1 pods of another execution"),
    # The old pod ended on TERM but is not gone yet: still waited for.
    (pod(**{names.JOBSET_UID_LABEL: "js2"}), approved("2", "js2"),
     [{**running("old", phase="Failed"),
       "metadata": {**running("old")["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}],
     False, "another execution"),
    # The old pod finished and nobody deletes it: nothing to wait for.
    (pod(**{names.JOBSET_UID_LABEL: "js2"}), approved("2", "js2"),
     [running("old", phase="Succeeded")], True, ""),
    # Admitted without the gate (check dropped from the queue, case 6): A unchanged, a pod
    # of the previous admission is still alive in its TERM handler.
    (pod(**{names.JOBSET_UID_LABEL: "js1"}), approved("1", "js1"),
     [running("old", a=0)], False, "another execution"),
    # A JobSet restart (J + 1) waits for the previous restart's pods too.
    (pod(**{names.JOBSET_UID_LABEL: "js1", names.RESTART_ATTEMPT_LABEL: "1"}),
     approved("1", "js1"), [running("j0")], False, "another execution"),
    # The same rank of the same execution while its pod is still in its TERM handler (a
    # replacement, or an admission the gate never saw, with the identity unchanged): the
    # second pod of a rank waits.
    (pod(**{names.JOBSET_UID_LABEL: "js1", names.COMPLETION_INDEX_LABEL: "1"}),
     approved("1", "js1"), [running("old")], False, "of the same rank"),
    # Approved before the record existed (an older controller): the pod rule alone.
    (pod(**{names.JOBSET_UID_LABEL: "js9"}), approved("1", None), [], True, ""),
    # A rank the Job had not made yet when the hold came (Kueue has not suspended the
    # TrainJob yet): refused, or it would start after Inspect said held.
    (pod(**{names.JOBSET_UID_LABEL: "js1"}),
     {**approved("1", "js1"), "metadata": {**approved("1", "js1")["metadata"], "annotations": {
         **approved("1", "js1")["metadata"]["annotations"], names.HOLD_INSTANCE: "2"}}},
     [], False, "is held (hold instance 2)"),
    # A pod of attempt 1's runtime copy under attempt 2's TrainJob (Trainer's stale cache).
    (pod(**{names.JOBSET_UID_LABEL: "js1", names.ATTEMPT_LABEL: "1"}),
     {**approved("1", "js1"), "metadata": {**approved("1", "js1")["metadata"], "labels": {
         **approved("1", "js1")["metadata"]["labels"], names.ATTEMPT_LABEL: "2"}}},
     [], False, "is not its TrainJob's '2'"),
    # ... and once Kueue suspended the TrainJob (an eviction, a hold).
    (pod(**{names.JOBSET_UID_LABEL: "js1"}), {**approved("1", "js1"), "spec": {"suspend": True}},
     [], False, "its TrainJob is suspended"),
])
async def test_the_pod_is_the_last_fence(new: dict[str, Any], tj: dict[str, Any],
                                         pods: list[dict[str, Any]], allowed: bool,
                                         says: str) -> None:
    resp = await _review(new, tj, pods, dry_run=False)
    assert resp["allowed"] is allowed
    if not allowed:
        assert says in resp["status"]["message"]
        assert "01JOB" in resp["status"]["message"]  # names the job


@pytest.mark.asyncio
async def test_a_job_never_admitted_gets_no_pod_but_a_dry_run_passes() -> None:
    real = await _review(pod(**{names.JOBSET_UID_LABEL: "js1"}), trainjob(), dry_run=False)
    assert not real["allowed"]
    assert "never admitted" in real["status"]["message"]
    dry = await _review(pod(**{names.JOBSET_UID_LABEL: "js1"}), trainjob(), dry_run=True)
    assert dry["allowed"]  # the preflight's probe: nothing is made


@pytest.mark.asyncio
async def test_the_job_s_pods_unreadable_means_refused() -> None:
    resp = await _review(pod(), trainjob("1"), errors.KubeError("boom", status=500),
                         dry_run=False)
    assert not resp["allowed"]
    assert "cannot list the pods" in resp["status"]["message"]


def kueue_approved(token: str) -> dict[str, Any]:
    tj = approved("1", "js1")
    tj["metadata"]["labels"][names.QUEUE_NAME_LABEL] = "lq"
    tj["metadata"]["annotations"][names.ADMISSION_TOKEN] = token
    return tj


def admitted(uid: str, evictions: int, *, deleting: bool = False) -> dict[str, Any]:
    wl: dict[str, Any] = {
        "metadata": {"uid": uid, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "status": {"schedulingStats": {"evictions": [
            {"reason": "Deactivated", "count": evictions}] if evictions else []}}}
    if deleting:
        wl["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    return wl


@pytest.mark.asyncio
@pytest.mark.parametrize(("tj", "workloads", "allowed", "says"), [
    # The admission the gate approved (its token recorded with A).
    (kueue_approved("w1/1"), [admitted("w1", 1)], True, ""),
    # Evicted and admitted again without the gate (the ClusterQueue dropped the check): the
    # old pods are gone, and a pod now would run at the same identity.
    (kueue_approved("w1/1"), [admitted("w1", 2)], False, "is not the one dispatch's gate"),
    # A Workload re-made and admitted without the check.
    (kueue_approved("w1/1"), [admitted("w1", 1, deleting=True), admitted("w2", 0)], False,
     "admitted without the check"),
    (kueue_approved("w1/1"), [], False, "it has no Workload"),
    # Plain mode has no Workload: the rule does not apply.
    (approved("1", "js1") | {"metadata": {**approved("1", "js1")["metadata"], "annotations": {
        **approved("1", "js1")["metadata"]["annotations"],
        names.ADMISSION_TOKEN: "w1/1"}}}, [], True, ""),
])
async def test_only_the_admission_the_gate_approved_runs(
        tj: dict[str, Any], workloads: list[dict[str, Any]], allowed: bool, says: str) -> None:
    resp = await _review(pod(**{names.JOBSET_UID_LABEL: "js1"}), tj, [], dry_run=False,
                         workloads=workloads)
    assert resp["allowed"] is allowed, resp
    if not allowed:
        assert says in resp["status"]["message"]


@pytest.mark.asyncio
async def test_the_job_s_workloads_unreadable_means_refused() -> None:
    resp = await _review(pod(**{names.JOBSET_UID_LABEL: "js1"}), kueue_approved("w1/1"), [],
                         dry_run=False, workloads=errors.KubeError("boom", status=500))
    assert not resp["allowed"]
    assert "cannot list the Workloads" in resp["status"]["message"]

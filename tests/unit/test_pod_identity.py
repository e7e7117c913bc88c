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
    PATH,
    ClientConfig,
    Denied,
    WebhookServer,
    env_patch,
    identity_for,
    review,
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


async def _review(p: dict[str, Any], tj: dict[str, Any] | Exception | None) -> dict[str, Any]:
    async def get(ns: str, name: str) -> dict[str, Any] | None:
        assert (ns, name) == ("ns", "dj-01job-s1")
        if isinstance(tj, Exception):
            raise tj
        return tj

    out = await review({"uid": "u", "namespace": "ns", "object": p, "dryRun": True}, get)
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


def test_configuration_matches_design() -> None:
    cfg = webhook_configuration(ClientConfig(url="https://127.0.0.1:9443"), "Q0E=")
    assert cfg["metadata"]["name"] == "dispatch-admission"
    (hook,) = cfg["webhooks"]
    assert hook["name"] == "identity.dispatch.phpboyscout.uk"
    assert hook["failurePolicy"] == "Fail"
    assert hook["sideEffects"] == "None"
    assert hook["rules"][0]["operations"] == ["CREATE"]
    assert hook["rules"][0]["resources"] == ["pods"]
    assert hook["objectSelector"] == {"matchExpressions": [
        {"key": names.JOB_ID_LABEL, "operator": "Exists"}]}
    assert hook["clientConfig"] == {"url": "https://127.0.0.1:9443/mutate-pods",
                                    "caBundle": "Q0E="}
    svc = webhook_configuration(ClientConfig(service="dispatch-system/dispatch-admission"), "")
    assert svc["webhooks"][0]["clientConfig"]["service"] == {
        "namespace": "dispatch-system", "name": "dispatch-admission", "path": "/mutate-pods",
        "port": 443}


class _FakeKube:
    """Answers the one GET the webhook makes (unit test only)."""

    async def get_or_none(self, res: Any, name: str, namespace: str | None = None) -> Any:
        return trainjob("4") if name == "dj-01job-s1" else None


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

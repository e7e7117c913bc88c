"""CLI flags, Active condition, hold expiry, work queue, TLS and JSON logs."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from admission import checks, cli, holds, tls
from admission.observability import JsonFormatter, parse_listen
from admission.workqueue import WorkQueue, serve
from dispatch_kubeflow.core import errors, names
from dispatch_kubeflow.core.kueue import is_our_check


@pytest.mark.parametrize("argv", [
    ["--bogus"],
    ["--webhook-listen", "nohost"],
    ["--lease-duration", "-1"],
    ["--lease-duration", "5"],  # below the renew deadline
    ["--webhook-url", "http://127.0.0.1:9443"],
    ["--webhook-service", "just-a-name"],
    ["--tls-cert", "x"],
    ["--kubeconfig", "/nonexistent/kubeconfig"],
    ["--workers", "0"],
    ["--workers", "two"],
])
def test_bad_flags_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    assert "dispatch-admission: error:" in capsys.readouterr().err


def test_workers_flag_reaches_the_config() -> None:
    p = cli.parser()
    assert cli.config_from(p.parse_args([])).workers == 8
    assert cli.config_from(p.parse_args(["--workers", "3"])).workers == 3


def test_unparseable_kubeconfig_exits_2(tmp_path: Any, capsys: pytest.CaptureFixture[str]
                                        ) -> None:
    bad = tmp_path / "kc"
    bad.write_text("clusters: [\n")
    assert cli.main(["--kubeconfig", str(bad)]) == 2
    assert f"cannot load {bad}" in capsys.readouterr().err


def test_parse_listen() -> None:
    assert parse_listen("127.0.0.1:9443") == ("127.0.0.1", 9443)
    assert parse_listen(":8080") == ("0.0.0.0", 8080)
    assert parse_listen("[::1]:1") == ("::1", 1)


def ac(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "dispatch-admission", "generation": 2},
            "spec": {"controllerName": names.CONTROLLER_NAME, **spec}}


def test_active_condition() -> None:
    want = checks.desired(ac(), identity="me", lease="ns/l")
    assert (want.status, want.reason) == ("True", "Active")
    body = checks.apply_body(ac(), want, datetime(2026, 1, 1, tzinfo=UTC))
    (cond,) = body["status"]["conditions"]
    assert cond["type"] == "Active"
    assert cond["observedGeneration"] == 2
    written = ac()
    written["status"] = body["status"]
    assert not checks.needs_write(written, want)
    stop = checks.desired(ac(), identity="me", lease="ns/l", stopping=True)
    assert stop.status == "False"
    assert checks.needs_write(written, stop)
    params = checks.desired(ac(parameters={"kind": "X"}), identity="me", lease="ns/l")
    assert (params.status, params.reason) == ("False", "ParametersNotSupported")
    assert not is_our_check({"spec": {"controllerName": "kueue.x-k8s.io/provisioning"}})


def test_hold_expiry() -> None:
    held = {"metadata": {"resourceVersion": "7", "annotations": {
        names.HOLD_UNTIL: "2026-01-02T03:04:05Z", names.HOLD_INSTANCE: "1"}},
        "spec": {"active": False}}
    assert holds.hold_until(held) == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert holds.hold_until({**held, "spec": {"active": True}}) is None
    patch = holds.release_patch(held)
    assert patch["spec"] == {"active": True}
    assert patch["metadata"]["resourceVersion"] == "7"
    assert patch["metadata"]["annotations"] == dict.fromkeys(names.HOLD_ANNOTATIONS)


@pytest.mark.asyncio
async def test_workqueue_dedups_and_never_runs_a_key_twice_at_once() -> None:
    q: WorkQueue[str] = WorkQueue(base_delay=0.01)
    q.add("a")
    q.add("a")
    q.add("b")
    assert len(q) == 2
    k = await q.get()
    q.add(k)  # added while processing: not handed out again until done
    other = await q.get()
    assert other != k
    assert len(q) == 0
    q.done(other)
    q.done(k)
    assert await asyncio.wait_for(q.get(), 1) == k
    q.done(k)
    assert q.retry("c") == pytest.approx(0.01)
    assert await asyncio.wait_for(q.get(), 1) == "c"
    q.close()


@pytest.mark.asyncio
async def test_a_worker_outlives_a_keys_failure_and_brings_the_key_back(
        caplog: pytest.LogCaptureFixture) -> None:
    """serve, shared by the readmission and the gate lift: an API error, a bug or a
    not-yet (False) brings the key back after its backoff; the worker goes on with the
    other keys, and each failure is counted."""
    q: WorkQueue[tuple[str, str]] = WorkQueue(base_delay=0.01)
    outcomes: dict[tuple[str, str], list[Exception | bool]] = {
        ("ns", "api"): [errors.KubeConflict("conflict", status=409), True],
                ("ns", "bug"): [RuntimeError("a bug"), True],
                ("ns", "later"): [False, True], ("ns", "ok"): [True]}
    seen: list[tuple[str, str]] = []
    failures: list[int] = []
    done = asyncio.Event()

    async def reconcile(key: tuple[str, str]) -> bool:
        seen.append(key)
        outcome = outcomes[key].pop(0)
        if not any(outcomes.values()):
            done.set()
        if isinstance(outcome, Exception):
            raise outcome
        return bool(outcome)

    for key in outcomes:
        q.add(key)
    worker = asyncio.ensure_future(serve(q, reconcile, what="thing",
                                         failed=lambda: failures.append(1)))
    await asyncio.wait_for(done.wait(), 2)
    worker.cancel()
    await asyncio.gather(worker, return_exceptions=True)
    q.close()
    assert sorted(seen) == sorted([("ns", "api")] * 2 + [("ns", "bug")] * 2
                                  + [("ns", "later")] * 2 + [("ns", "ok")])
    assert len(failures) == 2  # the API error and the bug; a not-yet is no failure
    assert "thing ns/bug: unexpected failure" in caplog.text
    assert "thing ns/api: conflict" in caplog.text


def test_generated_certificate_serves_the_hosts() -> None:
    m = tls.generate(["127.0.0.1", "svc.ns.svc"])
    cert = x509.load_pem_x509_certificate(m.cert)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert sans.get_values_for_type(x509.DNSName) == ["svc.ns.svc"]
    assert isinstance(m.ssl_context(), ssl.SSLContext)
    ca = x509.load_pem_x509_certificate(m.ca)
    cert.verify_directly_issued_by(ca)


def test_json_logs() -> None:
    rec = logging.LogRecord("admission", logging.INFO, "f", 1, "hello %s", ("x",), None)
    rec.workload = "ns/w"
    out = json.loads(JsonFormatter().format(rec))
    assert out["msg"] == "hello x"
    assert out["workload"] == "ns/w"
    assert out["level"] == "info"


def test_the_deployment_ships_a_disruption_budget_that_keeps_one_webhook_up() -> None:
    """The pod webhook fails closed: a drain must never take both replicas at once."""
    root = Path(__file__).parents[2] / "deploy" / "admission"
    kustomization = yaml.safe_load((root / "kustomization.yaml").read_text())
    assert "pdb.yaml" in kustomization["resources"]
    pdb = yaml.safe_load((root / "pdb.yaml").read_text())
    deployment = yaml.safe_load((root / "deployment.yaml").read_text())
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pdb["kind"] == "PodDisruptionBudget"
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert 1 <= pdb["spec"]["minAvailable"] < deployment["spec"]["replicas"]


def test_the_network_policy_opens_the_webhook_port_to_no_pod() -> None:
    """deploy/admission/networkpolicy: the webhook port only from address blocks that
    except the pod network (the API server calls from its node), never from a pod or
    namespace selector; it selects the Deployment's pods by the ports they name."""
    root = Path(__file__).parents[2] / "deploy" / "admission"
    policy = yaml.safe_load((root / "networkpolicy" / "networkpolicy.yaml").read_text())
    component = yaml.safe_load((root / "networkpolicy" / "kustomization.yaml").read_text())
    assert component["kind"] == "Component"
    assert component["resources"] == ["networkpolicy.yaml"]
    deployment = yaml.safe_load((root / "deployment.yaml").read_text())
    pod = deployment["spec"]["template"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert policy["metadata"]["namespace"] == "dispatch-system"
    ports = {p["name"] for p in pod["spec"]["containers"][0]["ports"]}
    rules = policy["spec"]["ingress"]
    assert {p["port"] for rule in rules for p in rule["ports"]} == ports
    [webhook] = [rule for rule in rules if {"port": "webhook", "protocol": "TCP"} in rule["ports"]]
    assert webhook["from"]
    assert all(set(peer) == {"ipBlock"} and peer["ipBlock"]["except"]
                                   for peer in webhook["from"])


def test_worker_kubeconfigs_are_a_mounted_secrets_files(tmp_path: Any) -> None:
    # A mounted Secret: ..data links to a timestamped directory; each key links into it.
    data = tmp_path / "..2026_12_06"
    data.mkdir()
    for name in ("w1", "w2"):
        (data / name).write_text("apiVersion: v1\n")
    (tmp_path / "..data").symlink_to(data.name)
    for name in ("w1", "w2"):
        (tmp_path / name).symlink_to(f"..data/{name}")
    assert cli.worker_kubeconfigs(str(tmp_path)) == {
        "w1": str(tmp_path / "w1"), "w2": str(tmp_path / "w2")}


@pytest.mark.parametrize("what", ["empty", "missing"])
def test_a_manager_without_workers_exits_2(what: str, tmp_path: Any,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    where = tmp_path if what == "empty" else tmp_path / "nope"
    with pytest.raises(SystemExit) as exc:
        cli.main(["--worker-kubeconfigs", str(where)])
    assert exc.value.code == 2
    assert "--worker-kubeconfigs:" in capsys.readouterr().err


def test_a_managers_controller_proves_its_workers_and_leads_their_permits() -> None:
    from admission.app import Config, Controller
    from admission.worker_proof import Workers

    worker = object()
    c = Controller(kube=None, config=Config(identity="m"),  # type: ignore[arg-type]
                   workers={"w1": worker})  # type: ignore[dict-item]
    assert isinstance(c.readmission.clusters, Workers)
    assert c.readmission.clusters.clients == {"w1": worker}
    assert c.permits is not None
    assert c.readmission.clusters.revocation is c.permits
    plain = Controller(kube=None, config=Config(identity="p"))  # type: ignore[arg-type]
    assert (plain.readmission.clusters, plain.permits) == (None, None)


def test_the_manager_component_mounts_the_workers_where_its_flag_reads_them() -> None:
    """deploy/admission/multikueue-manager: the flag it adds names the directory its Secret
    is mounted at, and the Role it adds lets the leader list and update the permit Leases."""
    root = Path(__file__).parents[2] / "deploy" / "admission" / "multikueue-manager"
    component = yaml.safe_load((root / "kustomization.yaml").read_text())
    assert component["kind"] == "Component"
    [patch] = component["patches"]
    ops = {op["path"].rsplit("/", 2)[-2]: op["value"] for op in yaml.safe_load(patch["patch"])}
    ns = cli.parser().parse_args([ops["args"]])
    assert ns.worker_kubeconfigs == ops["volumeMounts"]["mountPath"]
    assert ops["volumeMounts"]["name"] == ops["volumes"]["name"]
    assert ops["volumes"]["secret"]["secretName"] == "dispatch-admission-workers"
    role, binding = yaml.safe_load_all((root / "permits-rbac.yaml").read_text())
    assert component["resources"] == ["permits-rbac.yaml"]
    [rule] = role["rules"]
    assert (rule["resources"], set(rule["verbs"])) == (["leases"], {"get", "list", "update"})
    assert role["metadata"]["namespace"] == names.CONTROLLER_NAMESPACE
    assert binding["roleRef"]["name"] == role["metadata"]["name"]


def test_the_worker_component_gives_its_flags_what_they_read() -> None:
    """deploy/admission/multikueue-worker: --worker-of from the variable it defines,
    --manager-kubeconfig inside the Secret's mount, the door's port named and served."""
    root = Path(__file__).parents[2] / "deploy" / "admission" / "multikueue-worker"
    component = yaml.safe_load((root / "kustomization.yaml").read_text())
    deployment, service = component["patches"]
    ops = yaml.safe_load(deployment["patch"])
    args = [op["value"] for op in ops if op["path"].endswith("/args/-")]
    [env] = [op["value"] for op in ops if op["path"].endswith("/env/-")]
    [mount] = [op["value"] for op in ops if op["path"].endswith("/volumeMounts/-")]
    [port] = [op["value"] for op in ops if op["path"].endswith("/ports/-")]
    ns = cli.parser().parse_args([*args, "--webhook-service", "dispatch-system/x:443"])
    assert ns.worker_of == f"$({env['name']})"
    assert ns.manager_kubeconfig.startswith(mount["mountPath"] + "/")
    assert parse_listen(ns.agent_listen)[1] == port["containerPort"]
    [svc_port] = [op["value"] for op in yaml.safe_load(service["patch"])]
    assert svc_port["targetPort"] == port["name"]
    assert cli.config_from(ns).worker_of is not None
    role, _binding = yaml.safe_load_all((root / "tokenreview-rbac.yaml").read_text())
    assert role["rules"] == [{"apiGroups": ["authentication.k8s.io"],
                              "resources": ["tokenreviews"], "verbs": ["create"]}]

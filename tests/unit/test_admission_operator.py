"""kopf's part of the controller: settings, registry, login, indexes (no cluster)."""

from __future__ import annotations

import asyncio
import base64
import importlib
import json
import logging
import random
import socket
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from admission import intake, tls
from admission.app import Config, Controller
from admission.observability import JsonFormatter
from dispatch_kubeflow.core import errors, names

Obj = dict[str, Any]


# kopf and admission.operator (which imports it) are imported by the tests that use them,
# not when the suite is collected: the suite's other tests need neither.
@pytest.fixture(scope="module")
def kopf() -> ModuleType:
    return importlib.import_module("kopf")


@pytest.fixture(scope="module")
def operator(kopf: ModuleType) -> ModuleType:
    return importlib.import_module("admission.operator")


# --- settings and registry: kopf may write nothing ----------------------------------------
def test_settings_make_kopf_inert(operator: ModuleType) -> None:
    s = operator.settings()
    assert s.posting.enabled is False
    assert s.peering.standalone is True
    assert s.persistence.finalizer == operator.UNUSED_FINALIZER
    assert not s.persistence.finalizer.startswith("kopf.zalando.org")
    assert isinstance(s.persistence.progress_storage, operator.NoProgressStorage)
    assert isinstance(s.persistence.diffbase_storage, operator.NoDiffBaseStorage)
    # Server-side selection: only JobSets' pods, dispatch's TrainJobs and JobSets, and the
    # Workloads Kueue made for jobs are sent to us.
    assert sorted(s.watching.label_selectors.values()) == sorted(
        [names.JOBSET_NAME_LABEL, names.JOB_ID_LABEL, names.JOB_ID_LABEL,
         names.KUEUE_JOB_UID_LABEL])
    # A watch is back within seconds of the API server, not kopf's default minutes.
    assert s.networking.connect_timeout is not None
    assert s.networking.connect_timeout <= 5
    assert sum(s.networking.error_backoffs) <= 15


def test_storages_write_nothing_into_a_patch(kopf: ModuleType, operator: ModuleType) -> None:
    body = kopf.Body({"metadata": {"name": "x", "annotations": {"a": "b"}}})
    patch = kopf.Patch()
    progress = operator.NoProgressStorage()
    progress.store(key="h", record={"started": "now"}, body=body, patch=patch)
    progress.purge(key="h", body=body, patch=patch)
    progress.touch(body=body, patch=patch, value="x")
    assert progress.fetch(key="h", body=body) is None
    diffbase = operator.NoDiffBaseStorage()
    diffbase.store(body=body, patch=patch, essence={"spec": {}})
    assert diffbase.fetch(body=body) is None
    assert not patch


def _registry(operator: ModuleType) -> Any:
    controller = Controller(kube=None, config=Config(identity="t"))  # type: ignore[arg-type]
    return operator.registry(controller, operator.Login())


def test_registry_has_only_index_event_and_activity_handlers(
        kopf: ModuleType, operator: ModuleType) -> None:
    reg = _registry(operator)
    # No change handlers (create/update/delete/resume), daemons, timers or webhooks: nothing
    # that needs a finalizer, progress or diff-base storage on Kueue's or Trainer's objects.
    assert not list(reg._changing.get_all_handlers())
    assert not list(reg._spawning.get_all_handlers())
    assert not list(reg._webhooks.get_all_handlers())
    assert {h.id for h in reg._indexing.get_all_handlers()} == set(intake.Caches.INDEXES)
    plurals = {h.selector.plural or h.selector.any_name
               for h in reg._watching.get_all_handlers() if h.selector}
    assert plurals == {"workloads", "trainjobs", "pods", "jobsets", "admissionchecks",
                       "clusterqueues"}
    assert {h.id for h in reg._activities.get_all_handlers()} == {"login", "start", "stop"}
    # The default registry stays empty: several controllers can live in one process.
    assert not list(kopf.get_default_registry()._indexing.get_all_handlers())


# --- login --------------------------------------------------------------------------------------
def _kubeconfig(tmp_path: Path, user: Obj) -> Path:
    material = tls.generate(["localhost"])
    cfg = {
        "apiVersion": "v1", "kind": "Config", "current-context": "a",
        "clusters": [{"name": "c", "cluster": {
            "server": "https://127.0.0.1:16443",
            "certificate-authority-data": base64.b64encode(material.ca).decode()}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "a", "context": {"cluster": "c", "user": "u"}},
                     {"name": "b", "context": {"cluster": "c", "user": "u",
                                               "namespace": "x"}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_login_uses_embedded_client_certificate(tmp_path: Path, operator: ModuleType) -> None:
    material = tls.generate(["admin"])
    path = _kubeconfig(tmp_path, {
        "client-certificate-data": base64.b64encode(material.cert).decode(),
        "client-key-data": base64.b64encode(material.key).decode()})
    info = asyncio.run(operator.Login(kubeconfig=str(path), context="b").connection_info())
    assert info.server == "https://127.0.0.1:16443"
    assert info.token is None
    assert info.insecure is None
    assert info.certificate_data == material.cert
    assert info.private_key_data == material.key
    cluster = yaml.safe_load(path.read_text())["clusters"][0]["cluster"]
    assert info.ca_data == base64.b64decode(cluster["certificate-authority-data"])
    assert not any(Path(tmp_path).glob("dispatch-tls-*"))  # nothing left on disk
    info.as_ssl_context()  # kopf can build its TLS context from it


def test_login_uses_a_bearer_token(tmp_path: Path, operator: ModuleType) -> None:
    path = _kubeconfig(tmp_path, {"token": "s3cret"})
    info = asyncio.run(operator.Login(kubeconfig=str(path)).connection_info())
    assert (info.scheme, info.token) == ("Bearer", "s3cret")
    assert info.as_http_headers() == {"Authorization": "Bearer s3cret"}


def test_login_fails_clearly_on_a_missing_context(
        tmp_path: Path, kopf: ModuleType, operator: ModuleType) -> None:
    path = _kubeconfig(tmp_path, {"token": "t"})
    with pytest.raises(kopf.LoginError, match="nope"):
        asyncio.run(operator.Login(kubeconfig=str(path), context="nope").connection_info())


# --- intake ---------------------------------------------------------------------------------------
def _wl(name: str, tj: str | None = "tj", ns: str = "ns") -> Obj:
    meta: Obj = {"name": name, "namespace": ns}
    if tj:
        meta["ownerReferences"] = [{"apiVersion": f"{names.TRAINER_GROUP}/v1alpha1",
                                    "kind": "TrainJob", "name": tj, "controller": True}]
    return {"metadata": meta}


def _pod(name: str, job: str | None, ns: str = "ns") -> Obj:
    labels = {names.JOBSET_NAME_LABEL: job} if job else {}
    return {"metadata": {"name": name, "namespace": ns, "labels": labels}}


def test_index_functions() -> None:
    assert intake.index_workload(_wl("w")) == {("ns", "w"): intake.trim_workload(_wl("w"))}
    assert intake.index_workload(_wl("w", tj=None)) == {}  # not a TrainJob's: not kept
    assert intake.index_workload_by_job(_wl("w")) == {("ns", "tj"): "w"}
    assert intake.index_workload_by_job(_wl("w", tj=None)) == {}
    tj = {"metadata": {"name": "tj", "namespace": "ns"}}
    assert intake.index_trainjob(tj) == {("ns", "tj"): tj}
    assert intake.index_pod_by_job(_pod("p", "tj")) == {("ns", "tj"): "p"}
    assert intake.index_pod_by_job(_pod("p", None)) == {}
    ours = {"metadata": {"name": "c"}, "spec": {"controllerName": names.CONTROLLER_NAME}}
    assert intake.index_admission_check(ours) == {"c": ours}
    assert intake.index_admission_check({"metadata": {"name": "o"}, "spec": {}}) == {}
    cq = {"metadata": {"name": "q"}, "spec": {"admissionChecksStrategy": {
        "admissionChecks": [{"name": "c"}, {"name": "d"}]}}}
    assert intake.index_cluster_queue(cq) == {"q": frozenset({"c", "d"})}


def _full_workloads() -> list[Obj]:
    """Workloads as Kueue writes them, in the shapes decisions meet: pending, reserved,
    admitted, evicted, held (fresh, expired, unreadable), being deleted, of another
    TrainJob; each with the pod sets and fields decisions do not read."""
    from tests.unit.test_readmission_act import workload

    def full(**over: Any) -> Obj:
        wl = workload()
        wl = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", **wl}
        wl["metadata"] = {**wl["metadata"], "namespace": "ns", "uid": "w1",
                          "resourceVersion": "7", "creationTimestamp": "2026-01-01T00:00:00Z",
                          "labels": {names.KUEUE_JOB_UID_LABEL: "t1"},
                          "annotations": {"other.example/x": "y" * 100}}
        wl["spec"] = {**wl["spec"], "podSets": [{"name": "node", "count": 2, "template": {
            "spec": {"containers": [{"name": "node", "command": ["sh", "-c", "z" * 1500]}]}}}]}
        wl["status"] = {**wl["status"], "admission": {
            "clusterQueue": "cq", "podSetAssignments": [{"name": "node", "count": 2}]},
            "resourceRequests": [{"name": "node", "resources": {"cpu": "2"}}]}
        for path, value in over.items():
            section, key = path.split("__")
            wl[section] = {**wl[section], key: value}
        return wl

    held = {names.HOLD_INSTANCE: "2", names.HOLD_UNTIL: "2026-01-01T00:00:00Z",
            names.HOLD_WHO: "human:a", names.HOLD_SINCE: "2026-01-01T00:00:00Z",
            names.HOLD_REASON: "r"}
    admitted = [{"type": "QuotaReserved", "status": "True",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "Admitted", "status": "True"}]
    return [
        full(),
        full(status__conditions=[]),
        full(status__conditions=admitted,
             status__admissionChecks=[{"name": "dispatch-admission", "state": "Ready"}]),
        full(status__conditions=[*admitted, {"type": "Evicted", "status": "True"}],
             status__schedulingStats={"evictions": [{"reason": "Preempted", "count": 2}]}),
        full(spec__active=False, metadata__annotations=held),
        full(spec__active=False, metadata__annotations={**held, names.HOLD_UNTIL: "soon"}),
        full(metadata__deletionTimestamp="2026-01-01T00:00:01Z"),
        full(metadata__ownerReferences=[{"apiVersion": f"{names.TRAINER_GROUP}/v1alpha1",
                                         "kind": "TrainJob", "name": "tj", "uid": "other",
                                         "controller": True}]),
    ]


def test_a_trimmed_workload_is_judged_as_the_whole_one() -> None:
    """What the index keeps of a Workload is all its readers read: every decision, rule and
    write body made from the trimmed one is the one made from the whole."""
    from admission import holds
    from admission.decision import check_apply, check_entry, decide, quota_reserved_at
    from dispatch_kubeflow.core import hold
    from dispatch_kubeflow.core.admission_count import admission_token, newest_workload

    tj = {"metadata": {"name": "dj-a-s1", "uid": "t1", "labels": {names.JOB_ID_LABEL: "A"},
                       "annotations": {names.HOLD_INSTANCE: "2"}}}
    now = datetime(2026, 6, 1, tzinfo=UTC)
    wls = _full_workloads()
    for whole in wls:
        trimmed = intake.trim_workload(whole)
        assert len(json.dumps(trimmed)) < len(json.dumps(whole)) / 2
        for pods, jobset, trainjob in ((0, None, None), (2, "js", tj), (0, "js", tj)):
            kw: dict[str, Any] = {"check_names": frozenset({"dispatch-admission"}),
                                  "cluster_queues": {"cq": frozenset({"dispatch-admission"})},
                                  "pods_left": pods, "jobset_uid": jobset,
                                  "trainjob": trainjob}
            assert decide(trimmed, **kw) == decide(whole, **kw)
        assert admission_token(trimmed) == admission_token(whole)
        assert hold.of_trainjob(trimmed, tj) == hold.of_trainjob(whole, tj)
        assert hold.lacks_hold(tj, trimmed) == hold.lacks_hold(tj, whole)
        assert hold.instance(trimmed) == hold.instance(whole)
        assert hold.keep_patch(trimmed, {}) == hold.keep_patch(whole, {})
        assert holds.hold_until(trimmed) == holds.hold_until(whole)
        assert holds.unreadable_until(trimmed) == holds.unreadable_until(whole)
        assert holds.release_patch(trimmed) == holds.release_patch(whole)
        assert quota_reserved_at(trimmed) == quota_reserved_at(whole)
        assert check_entry(trimmed, frozenset({"dispatch-admission"})) == \
            check_entry(whole, frozenset({"dispatch-admission"}))
        assert check_apply(trimmed, "dispatch-admission", "Ready", "m", now) == \
            check_apply(whole, "dispatch-admission", "Ready", "m", now)
        assert intake.index_workload_by_job(trimmed) == intake.index_workload_by_job(whole)
    trimmed_all = [intake.trim_workload(w) for w in wls]
    assert newest_workload(trimmed_all) == intake.trim_workload(newest_workload(wls) or {})


def _caches() -> intake.Caches:
    c = intake.Caches()
    ours = {"metadata": {"name": "c"}, "spec": {"controllerName": names.CONTROLLER_NAME}}
    c.bind({"workloads": {("ns", "w"): [_wl("w")], ("ns", "v"): [_wl("v-old"), _wl("v")]},
            "workloads_by_job": {("ns", "tj"): ["w", "v"]},
            "trainjobs": {("ns", "tj"): [{"metadata": {"name": "tj", "uid": "u"}}]},
            "pods_by_job": {("ns", "tj"): ["p1", "p2"]},
            "jobsets": {("ns", "tj"): ["js-old", "js"]},
            "admission_checks": {"c": [ours]},
            "cluster_queues": {"q": [frozenset({"c"})]}})
    return c


def test_caches_read_kopf_style_indexes() -> None:
    c = _caches()
    assert c.workload("ns", "v") == _wl("v")  # the newest object under a reused name
    assert c.workload("ns", "nope") is None
    assert {w["metadata"]["name"] for w in c.workloads()} == {"w", "v"}
    assert c.workloads_of_job("ns", "tj") == {"w", "v"}
    assert c.trainjob("ns", "tj") == {"metadata": {"name": "tj", "uid": "u"}}
    assert c.trainjob("ns", "nope") is None
    assert c.pods_left("ns", "tj") == 2
    assert c.pods_left("ns", "other") == 0
    assert c.jobset_uid("ns", "tj") == "js"  # the newest JobSet under a reused name
    assert c.jobset_uid("ns", "other") is None
    assert c.check_names() == frozenset({"c"})
    assert c.cq_checks() == {"q": frozenset({"c"})}
    with pytest.raises(KeyError, match="pods_by_job"):
        intake.Caches().bind({"workloads": {}})


def test_caches_missing_compares_with_a_live_list() -> None:
    c = _caches()
    live = {"workloads": [_wl("w"), _wl("new")],
            "trainjobs": [{"metadata": {"name": "tj", "namespace": "ns"}},
                          {"metadata": {"name": "tk", "namespace": "ns"}}],
            "jobsets": [{"metadata": {"name": "tj", "namespace": "ns", "uid": "js"}},
                        {"metadata": {"name": "tk", "namespace": "ns", "uid": "jk"}}],
            # A finished pod is not indexed (it never blocks), so it is never missing.
            "pods": [_pod("p1", "tj"), _pod("p3", "tj"),
                     {**_pod("p4", "tj"), "status": {"phase": "Succeeded"}}],
            "admissionchecks": [{"metadata": {"name": "other"}, "spec": {}}],
            "clusterqueues": [{"metadata": {"name": "q"}}, {"metadata": {"name": "r"}}]}
    live["workloads"].append(_wl("foreign", tj=None))  # never indexed, so never missing
    assert c.missing(live) == {"workloads": {("ns", "new")}, "trainjobs": {("ns", "tk")},
                               "jobsets": {("ns", "tk")}, "pods": {("ns", "p3")},
                               "clusterqueues": {("", "r")}}
    assert c.missing({}) == {}


def test_feed_maps_listing_events_and_survives_a_bad_listener() -> None:
    feed = intake.Feed("pods")
    seen: list[tuple[str, str]] = []

    def bad(typ: str, obj: Obj) -> None:
        raise RuntimeError("bug")
    feed.subscribe(bad)
    feed.subscribe(lambda typ, obj: seen.append((typ, obj["metadata"]["name"])))
    feed.notify(None, _pod("p", "j"))
    feed.notify("DELETED", _pod("p", "j"))
    assert seen == [(intake.LISTED, "p"), ("DELETED", "p")]


# --- kopf's log records through the structured formatter ---------------------------------
def test_kopf_records_are_json_with_the_object(operator: ModuleType) -> None:
    rec = logging.LogRecord("kopf.objects", logging.WARNING, __file__, 1, "Handler failed",
                            None, None)
    rec.settings = operator.settings()
    rec.k8s_skip = False
    rec.k8s_ref = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                   "name": "w", "uid": "u", "namespace": "ns"}
    out = json.loads(JsonFormatter().format(rec))
    assert out["object"] == "Workload ns/w"
    assert out["logger"] == "kopf.objects"
    assert out["msg"] == "Handler failed"
    assert not {"settings", "k8s_skip", "k8s_ref"} & set(out)


def test_kopf_gets_our_identity_and_never_looks_up_the_user(
        monkeypatch: pytest.MonkeyPatch, kopf: ModuleType, operator: ModuleType) -> None:
    """The image runs as uid 65532, which has no passwd entry: kopf's own identity
    (getpass.getuser()) raised KeyError there and the pods crash-looped."""
    import getpass

    def no_user() -> str:
        raise KeyError("getpwuid(): uid not found: 65532")
    monkeypatch.setattr(getpass, "getuser", no_user)
    seen: dict[str, Any] = {}

    async def fake_operator(**kwargs: Any) -> None:
        seen.update(kwargs)
    monkeypatch.setattr(kopf, "operator", fake_operator)
    controller = Controller(kube=None, config=Config(identity="pod-a"))  # type: ignore[arg-type]
    asyncio.run(operator.run(controller, operator.Login(kubeconfig="unused")))
    assert seen["identity"] == "pod-a"


# --- startup ------------------------------------------------------------------------------------
def _free_ports(n: int) -> list[int]:
    """``n`` distinct free ports below the kernel's ephemeral range. A port that bind(0) hands
    out lies in that range, where any outgoing connection (another xdist worker's) may take it
    before the server binds it: that made this test fail with EADDRINUSE about once in ten
    suite runs on a busy machine."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports: list[int] = []
    for port in random.sample(range(max(1024, low - 12000), low), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
        if len(ports) == n:
            return ports
    raise AssertionError(f"no {n} free ports below {low}")


@pytest.mark.asyncio
async def test_a_startup_that_failed_midway_can_be_retried() -> None:
    health, hook = _free_ports(2)
    controller = Controller(kube=None, config=Config(  # type: ignore[arg-type]
        identity="t", health_listen=f"127.0.0.1:{health}", webhook_listen=f"127.0.0.1:{hook}"))
    reads = 0

    async def tls_material() -> tls.TlsMaterial:
        nonlocal reads
        reads += 1
        if reads == 1:  # the TLS Secret's read during an API server restart
            raise errors.KubeError("GET secret: refused", status=0, reason="Unreachable")
        return tls.generate(["localhost"])

    controller._tls = tls_material  # type: ignore[method-assign]
    indexes: dict[str, Any] = {key: {} for key in intake.Caches.INDEXES}
    with pytest.raises(errors.KubeError):
        await controller.start(indexes)
    # The failed attempt let go of its ports: kopf's retry binds them again.
    await controller.start(indexes)
    try:
        assert controller.webhook.serving
        _, writer = await asyncio.open_connection("127.0.0.1", health)
        writer.close()
        await writer.wait_closed()
    finally:
        await controller.stop()

"""Only the controller writes A (Kueue mode), only the library (plain mode): the policy
deploy/admission/admission-count-policy.yaml against the real API server.

The ``admission`` fixture puts the policy in force as the local cluster has it (the
plain-mode list names the admin, the tests' library) and hands out the controller's
ServiceAccount kubeconfig. ``patcher`` is a ServiceAccount that may create, patch and update
TrainJobs (and their status) in the test's namespace, as a user or a service may.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from dispatch_kubeflow import Backend, Capability, CapabilityValue, errors, preflight
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r
from tests.cluster.admission_fixture import (
    KINDS,
    AdmissionHandle,
    a_policy_docs,
    a_probe,
    located,
    username,
    wait_a_policy_in_force,
)
from tests.cluster.helpers import (
    STATE_ROOT,
    delete_cluster_queue,
    eventually,
    make_queues,
    token_kubeconfig,
)
from tests.cluster.test_adapter_kueue import settings
from tests.conftest import LOCAL_CLUSTER

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio]
Obj = dict[str, Any]
A, TOKEN = names.ADMISSION_COUNT, names.ADMISSION_TOKEN
PATCHER_RULES = [
    {"apiGroups": [names.TRAINER_GROUP], "resources": ["trainjobs"],
     "verbs": ["get", "list", "create", "patch", "update", "delete"]},
    {"apiGroups": [names.TRAINER_GROUP], "resources": ["trainjobs/status"],
     "verbs": ["patch", "update"]},
]


@pytest_asyncio.fixture
async def patcher(kube: Kube, kubeconfig: str, namespace: str,
                  tmp_path: Path) -> AsyncIterator[Kube]:
    """A ServiceAccount with patch (and more) on TrainJobs; it goes with the namespace."""
    sa = "patcher"
    await kube.create(KINDS["ServiceAccount"], {"metadata": {"name": sa}}, namespace)
    await kube.create(KINDS["Role"], {"metadata": {"name": sa}, "rules": PATCHER_RULES},
                      namespace)
    await kube.create(KINDS["RoleBinding"], {
        "metadata": {"name": sa},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": sa},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}]},
        namespace)
    issued = await kube.create(
        KINDS["ServiceAccount"], {"apiVersion": "authentication.k8s.io/v1",
                                  "kind": "TokenRequest", "spec": {"expirationSeconds": 1800}},
        namespace, name=sa, subresource="token")
    path = token_kubeconfig(kubeconfig, issued["status"]["token"], tmp_path / "patcher.yaml")
    async with await Kube.connect(kubeconfig=path) as k:
        allowed, why = await k.access_review("patch", "trainjobs", group=names.TRAINER_GROUP,
                                             namespace=namespace)
        assert allowed, why
        yield k


@pytest_asyncio.fixture
async def controller(admission: AdmissionHandle) -> AsyncIterator[Kube]:
    """The controller's identity: its ServiceAccount's token, as the replicas use it."""
    async with await Kube.connect(kubeconfig=admission.kubeconfig) as k:
        yield k


def trainjob(name: str, *, queued: bool, annotations: dict[str, str] | None = None) -> Obj:
    body = a_probe(queued)
    body["metadata"].update(name=name, annotations=annotations or {})
    return body


def annotate(values: dict[str, str | None], *, rv: str | None = None) -> Obj:
    meta: Obj = {"annotations": values}
    if rv:
        meta["resourceVersion"] = rv
    return {"metadata": meta}


async def refused(write: Any, name: str) -> errors.KubeError:
    """The write is refused as the policy refuses (Status code, reason, details)."""
    with pytest.raises(errors.KubeError) as err:
        await write
    assert preflight.refused_by_policy(err.value, name), (err.value.status, err.value.body)
    return err.value


async def guarded(writer: Kube, reader: Kube, ns: str, name: str, values: dict[str, str],
                  *, put: bool = False) -> Obj:
    """A write as the writers of A make it: with the resourceVersion just read. Kueue or
    Trainer may change the TrainJob in between (409): then read and write again."""
    for _ in range(10):
        current = await reader.get(r.TRAINJOB, name, ns)
        try:
            if put:
                current["metadata"].setdefault("annotations", {}).update(values)
                return await writer.replace(r.TRAINJOB, current, ns)
            return await writer.patch(r.TRAINJOB, name, annotate(
                dict(values), rv=current["metadata"]["resourceVersion"]), ns)
        except errors.KubeConflict:
            continue
    raise AssertionError(f"TrainJob {ns}/{name} kept changing")


async def annotations_on(kube: Kube, ns: str, name: str) -> dict[str, str]:
    tj = await kube.get(r.TRAINJOB, name, ns)
    return dict(tj["metadata"].get("annotations") or {})


async def test_only_the_controller_writes_a_of_a_kueue_mode_trainjob(
        kube: Kube, namespace: str, patcher: Kube, controller: Kube) -> None:
    ns, name = namespace, "tj-kueue"
    # Creating one with A or its token is refused; the denial's Status is what the
    # preflight classifies.
    for ann in ({A: "5"}, {TOKEN: "u/0"}):
        born = trainjob("tj-born-high", queued=True, annotations=ann)
        exc = await refused(patcher.create(r.TRAINJOB, born, ns), "tj-born-high")
        print("denial:", exc.status, exc.reason, json.dumps(exc.body.get("details")))
        assert (exc.status, exc.reason) == (403, "Forbidden")
    await patcher.create(r.TRAINJOB, trainjob(name, queued=True), ns)

    # A ServiceAccount with patch may not set A or its token...
    await refused(patcher.patch(r.TRAINJOB, name, annotate({A: "7"}), ns), name)
    await refused(patcher.patch(r.TRAINJOB, name, annotate({TOKEN: "u/9"}), ns), name)
    # ...nor may the library's identity (the admin here): this is what the preflight proves.
    await refused(kube.patch(r.TRAINJOB, name, annotate({A: "1"}), ns), name)

    # The controller raises A as it does: one merge patch, resourceVersion precondition.
    await guarded(controller, kube, ns, name, {A: "1", TOKEN: "u/0"})
    assert {k: v for k, v in (await annotations_on(kube, ns, name)).items()
            if k in (A, TOKEN)} == {A: "1", TOKEN: "u/0"}

    # Lowering, removing or replacing them is refused; a full update (PUT) too.
    await refused(patcher.patch(r.TRAINJOB, name, annotate({A: "0"}), ns), name)
    await refused(patcher.patch(r.TRAINJOB, name, annotate({A: None}), ns), name)
    await refused(patcher.patch(r.TRAINJOB, name, annotate({TOKEN: None}), ns), name)
    await refused(guarded(patcher, kube, ns, name, {A: "0"}, put=True), name)

    # Everything else stays writable: hold and other annotations, labels, A unchanged.
    hold = {h: "x" for h in names.HOLD_ANNOTATIONS}
    other = f"{names.DOMAIN}/stop-reason"
    await patcher.patch(r.TRAINJOB, name, annotate({**hold, other: "t", A: "1"}), ns)
    await patcher.patch(r.TRAINJOB, name, annotate(dict.fromkeys(names.HOLD_ANNOTATIONS)), ns)
    await patcher.patch(r.TRAINJOB, name, {"metadata": {"labels": {"team": "t"}}}, ns)
    # A status update cannot change metadata, so the policy does not look at it.
    await patcher.patch(r.TRAINJOB, name, annotate({A: "0"}), ns, subresource="status")
    assert (await annotations_on(kube, ns, name))[A] == "1"

    # Taking the TrainJob out of Kueue mode and writing A in one patch is judged by both
    # bindings (the old object has the label): refused even for the library.
    await refused(kube.patch(r.TRAINJOB, name, {"metadata": {
        "labels": {names.QUEUE_NAME_LABEL: None}, "annotations": {A: "9"}}}, ns), name)
    assert (await annotations_on(kube, ns, name))[A] == "1"

    # Deleting is never refused.
    await patcher.delete(r.TRAINJOB, name, ns)


async def test_only_the_library_writes_a_of_a_plain_mode_trainjob(
        kube: Kube, namespace: str, patcher: Kube, controller: Kube) -> None:
    ns, name = namespace, "tj-plain"
    await refused(patcher.create(r.TRAINJOB, trainjob("tj-born-high", queued=False,
                                                      annotations={A: "3"}), ns), "tj-born-high")
    await kube.create(r.TRAINJOB, trainjob(name, queued=False), ns)
    await refused(patcher.patch(r.TRAINJOB, name, annotate({A: "1"}), ns), name)
    # The controller never raises A in plain mode, so it is not listed either.
    await refused(controller.patch(r.TRAINJOB, name, annotate({A: "1"}), ns), name)
    # The library (listed in the plain-mode ConfigMap) raises A as admit_plain does.
    await guarded(kube, kube, ns, name, {A: "1", TOKEN: "plain/1"})
    await refused(patcher.patch(r.TRAINJOB, name, annotate({A: "0"}), ns), name)
    # Putting it into Kueue mode with a higher A at once: the Kueue-mode binding judges the
    # new object, and the library is not the controller.
    await refused(kube.patch(r.TRAINJOB, name, {"metadata": {
        "labels": {names.QUEUE_NAME_LABEL: "lq"}, "annotations": {A: "2"}}}, ns), name)
    assert (await annotations_on(kube, ns, name))[A] == "1"
    await patcher.patch(r.TRAINJOB, name, annotate({names.HOLD_REASON: "plain hold"}), ns)
    await patcher.delete(r.TRAINJOB, name, ns)


def first_and_rest(reason: str) -> tuple[str, str]:
    first, _, rest = reason.partition("\n")
    return first, rest


async def test_preflight_proves_the_policy_is_in_force(
        kubeconfig: str, kube: Kube, namespace: str, admission: AdmissionHandle) -> None:
    await make_queues(kube, namespace, checks=[names.ADMISSION_CHECK])
    await admission.deployed(kube)
    who = await username(kube)
    try:
        async with await Backend.connect(settings(kubeconfig, namespace)) as b:
            st = (await b.capabilities())[Capability.ATTEMPT_INJECTION]
            assert st.value is CapabilityValue.YES, st
            webhook, policy = first_and_rest(st.reason)
            assert webhook.startswith("the admission webhook set DISPATCH_ATTEMPT="), st.reason
            assert policy.startswith("only the admission controller may raise A: a dry-run "
                                     f"patch of {A} on probe TrainJob dj-probe-"), st.reason
            assert f"by {who} was refused (403 Forbidden)" in policy, st.reason

        # Without the Kueue-mode binding the preflight says so, and the backend observes only.
        binding = next(d for d in a_policy_docs(who) if d["metadata"]["name"]
                       == preflight.a_binding(True) and d["kind"].endswith("Binding"))
        res, name, _ = located(binding)
        await kube.delete(res, name)
        try:
            async def out_of_force() -> bool:
                try:
                    await kube.create(r.TRAINJOB, a_probe(True), "default", dry_run=True)
                except errors.KubeError as exc:
                    return not preflight.refused_by_policy(exc, "dispatch-a-policy-probe")
                return True
            await eventually(out_of_force, 30, "the binding out of force", interval=0.2)
            async with await Backend.connect(settings(kubeconfig, namespace)) as b:
                st = (await b.capabilities())[Capability.ATTEMPT_INJECTION]
                assert st.value is CapabilityValue.NO, st
                assert f"{who} may set {A} on probe TrainJob" in st.reason, st.reason
                assert (f"binding {preflight.a_binding(True)} is not in force. Apply "
                        "deploy/admission (admission-count-policy.yaml)") in st.reason
                assert b.observe_only
                assert any(line.startswith("AttemptInjection: no")
                           for line in b.observe_only_reasons)
        finally:
            # Put it back as it was, and wait until it is in force again.
            await kube.create(res, binding)
            await wait_a_policy_in_force(kube)

        # Plain mode: the library writes A itself, so its dry-run patch is admitted.
        plain = settings(kubeconfig, namespace)
        del plain["kueue"]
        async with await Backend.connect(plain) as b:
            st = (await b.capabilities())[Capability.ATTEMPT_INJECTION]
            assert st.value is CapabilityValue.YES, st
            _, policy = first_and_rest(st.reason)
            assert policy.startswith(f"plain mode: the library raises A itself, and {who} may")
            assert f"ConfigMap {names.CONTROLLER_NAMESPACE}/{preflight.a_binding(False)}" \
                in policy
    finally:
        await delete_cluster_queue(kube, namespace)


def dispatch_trainjob(name: str, *, queued: bool) -> Obj:
    """A suspended dispatch TrainJob (Start's job-id label), Kueue-mode when ``queued``."""
    body = trainjob(name, queued=queued)
    body["metadata"]["annotations"] = {}
    body["metadata"]["labels"][names.JOB_ID_LABEL] = "01JGUARD"
    return body


async def test_nobody_else_resumes_or_unqueues_a_dispatch_trainjob(
        kube: Kube, namespace: str, patcher: Kube, controller: Kube) -> None:
    """Issue 26, item 5: taking a Kueue-mode dispatch TrainJob out of Kueue's hands or
    resuming it would run it past the gate; only the ConfigMap's writers and resumers may
    (Kueue, Trainer and the controller; in plain mode the library)."""
    ns = namespace
    await kube.create(r.TRAINJOB, dispatch_trainjob("tj-guarded", queued=True), ns)
    unqueue = {"metadata": {"labels": {names.QUEUE_NAME_LABEL: None}}}
    resume = {"spec": {"suspend": False}}
    for who in (patcher, kube):  # a ServiceAccount with patch, and the library (the admin)
        for body in (unqueue, resume):
            exc = await refused(who.patch(r.TRAINJOB, "tj-guarded", body, ns), "tj-guarded")
            assert "dispatch TrainJob tj-guarded" in exc.body.get("message", "")
    tj = await kube.get(r.TRAINJOB, "tj-guarded", ns)
    assert tj["spec"]["suspend"] is True
    assert tj["metadata"]["labels"][names.QUEUE_NAME_LABEL] == "lq"
    # Suspending, other labels and the hold stay anybody's who may patch.
    await patcher.patch(r.TRAINJOB, "tj-guarded", {"metadata": {"labels": {"team": "t"}}}, ns)
    # Kueue resumes what it admits: its identity may (a dry run; the local cluster's user).
    kueue_kubeconfig = STATE_ROOT / LOCAL_CLUSTER / "kueue.kubeconfig"
    if kueue_kubeconfig.exists():
        async with await Kube.connect(kubeconfig=str(kueue_kubeconfig)) as as_kueue:
            await as_kueue.patch(r.TRAINJOB, "tj-guarded", resume, ns, dry_run=True)

    # Not a dispatch TrainJob (no job-id label): the guard does not look at it.
    other = trainjob("tj-other", queued=True)
    other["metadata"]["annotations"] = {}
    await kube.create(r.TRAINJOB, other, ns)
    await patcher.patch(r.TRAINJOB, "tj-other", resume, ns, dry_run=True)

    # Plain mode: the library resumes what it admits; nobody else may.
    await kube.create(r.TRAINJOB, dispatch_trainjob("tj-plain-guarded", queued=False), ns)
    await refused(patcher.patch(r.TRAINJOB, "tj-plain-guarded", resume, ns),
                  "tj-plain-guarded")
    await kube.patch(r.TRAINJOB, "tj-plain-guarded", resume, ns, dry_run=True)

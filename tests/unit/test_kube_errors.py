"""Errors from the API server's Status: the class, the causes and a complete message."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web

from dispatch_kubeflow import errors
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube.resources import POD, TRAINJOB
from dispatch_kubeflow.start import create_trainjob, runtime_not_seen
from tests.unit.http_kube import kube_at

TRAINER_WEBHOOK = "validator.trainjob.trainer.kubeflow.org"
# What the API server answers when Trainer's webhook has not seen the runtime yet:
# controller-runtime turns the validator's field errors into a plain denial (403 Forbidden,
# no details), and the API server prefixes the webhook's name.
RUNTIME_NOT_SEEN = {
    "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403,
    "reason": "Forbidden",
    "message": f'admission webhook "{TRAINER_WEBHOOK}" denied the request: spec.runtimeRef: '
               'Invalid value: {"name":"dj-x-s1","apiGroup":"trainer.kubeflow.org",'
               '"kind":"TrainingRuntime"}: trainingruntimes.trainer.kubeflow.org "dj-x-s1" '
               "not found: specified trainingRuntime must be created before the TrainJob is "
               "created",
}


def status(code: int, reason: str, message: str = "m", **details: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "code": code, "reason": reason, "message": message}
    if details:
        body["details"] = details
    return body


RBAC = ('trainjobs.trainer.kubeflow.org "x" is forbidden: User "u" cannot create resource '
        '"trainjobs" in API group "trainer.kubeflow.org" in the namespace "ns"')
STREAM_CAUSE = {"reason": "FieldValueForbidden", "message": "Forbidden: may not be specified",
                "field": "stream"}


@pytest.mark.parametrize(("code", "body", "cls"), [
    (404, status(404, "NotFound"), errors.KubeNotFound),
    (409, status(409, "AlreadyExists"), errors.KubeConflict),
    (409, status(409, "Conflict"), errors.KubeConflict),
    (410, status(410, "Expired"), errors.KubeGone),
    (400, status(400, "BadRequest"), errors.KubeInvalid),
    (422, status(422, "Invalid", causes=[STREAM_CAUSE]), errors.KubeInvalid),
    (401, status(401, "Unauthorized"), errors.KubeForbidden),
    (403, status(403, "Forbidden", RBAC, kind="trainjobs"), errors.KubeForbidden),
    (403, RUNTIME_NOT_SEEN, errors.KubeWebhookDenied),
    (400, status(400, "BadRequest", 'admission webhook "w.example.com" denied the request: no'),
     errors.KubeWebhookDenied),
    (422, status(422, "Invalid", 'admission webhook "w" denied the request: TrainJob.x "y" is '
                 "invalid: spec.a: Required value", causes=[{"reason": "FieldValueRequired",
                                                            "field": "spec.a"}]),
     errors.KubeWebhookDenied),
    (429, status(429, "TooManyRequests"), errors.KubeError),
    (500, status(500, "InternalError"), errors.KubeError),
    (500, {}, errors.KubeError),
])
def test_the_class_comes_from_the_status(code: int, body: dict[str, Any],
                                         cls: type[errors.KubeError]) -> None:
    exc = errors.kube_error(code, body, "GET /x")
    assert type(exc) is cls
    assert exc.status == code
    assert exc.reason == str(body.get("reason") or "")
    assert exc.body == body


def test_webhook_denials_are_invalid_not_forbidden() -> None:
    exc = errors.kube_error(403, RUNTIME_NOT_SEEN)
    assert isinstance(exc, errors.KubeInvalid)
    assert not isinstance(exc, errors.KubeForbidden)
    assert isinstance(exc, errors.KubeWebhookDenied)
    assert exc.webhook == TRAINER_WEBHOOK
    assert exc.denial.startswith("spec.runtimeRef: Invalid value: ")
    # The field errors of a denial without details are read from the denial, in one place.
    assert [(c.reason, c.field) for c in exc.causes] == [("FieldValueInvalid", "spec.runtimeRef")]
    assert exc.names_field("spec.runtimeRef")
    assert exc.names_field("spec.RuntimeRef")  # Trainer's ClusterTrainingRuntime spelling
    assert exc.names_field("spec")  # a field inside spec
    assert not exc.names_field("spec.trainer")
    assert not exc.names_field("spec.runtime")
    assert runtime_not_seen(exc)


def test_kueues_trainjob_webhook_not_having_seen_the_runtime_is_runtime_not_seen() -> None:
    """Seen on the local cluster (Kueue 0.19.2): Kueue's webhook, not Trainer's, refused a
    TrainJob made a moment after its runtime copy, with a bare error and no field."""
    exc = errors.kube_error(403, {
        "kind": "Status", "code": 403, "reason": "Forbidden",
        "message": 'admission webhook "vtrainjob.kb.io" denied the request: '
                   "runtime 'dj-jc74fc607fe-s1' not found"})
    assert isinstance(exc, errors.KubeWebhookDenied)
    assert exc.webhook == "vtrainjob.kb.io"
    assert [(c.reason, c.field) for c in exc.causes] == [("FieldValueNotFound",
                                                          "spec.runtimeRef")]
    assert runtime_not_seen(exc)
    # Another webhook saying the same words is not Kueue's TrainJob webhook.
    other = errors.kube_error(403, {
        "kind": "Status", "code": 403, "reason": "Forbidden",
        "message": 'admission webhook "other.example.com" denied the request: '
                   "runtime 'x' not found"})
    assert not runtime_not_seen(other)


def test_an_admission_policy_denial_stays_forbidden() -> None:
    exc = errors.kube_error(403, status(
        403, "Forbidden", "trainjobs.trainer.kubeflow.org \"x\" is forbidden: "
        "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: only the controller",
        group="trainer.kubeflow.org", kind="trainjobs", name="x"))
    assert type(exc) is errors.KubeForbidden


def test_causes_come_from_details() -> None:
    exc = errors.kube_error(422, status(422, "Invalid", causes=[STREAM_CAUSE, {"field": "x"}]))
    assert exc.causes == (errors.StatusCause("FieldValueForbidden",
                                             "Forbidden: may not be specified", "stream"),
                          errors.StatusCause("", "", "x"))
    assert exc.names_field("stream")
    assert not exc.names_field("container")


def test_an_aggregate_denial_names_every_field() -> None:
    exc = errors.kube_error(403, status(403, "Forbidden", 'admission webhook "w" denied the '
                                        'request: [spec.a: Required value, spec.b[0]: Invalid '
                                        'value: "x, y": bad, spec.c: Forbidden: no]'))
    assert [(c.field, c.message) for c in exc.causes] == [
        ("spec.a", "spec.a: Required value"),
        ("spec.b[0]", 'spec.b[0]: Invalid value: "x, y": bad'),
        ("spec.c", "spec.c: Forbidden: no")]


def test_a_denial_that_names_no_field_has_no_causes() -> None:
    exc = errors.kube_error(403, status(403, "Forbidden",
                                        'admission webhook "w" denied the request: no, because'))
    assert isinstance(exc, errors.KubeWebhookDenied)
    assert exc.causes == ()
    assert not runtime_not_seen(exc)


@pytest.mark.parametrize(("code", "body", "message"), [
    (404, status(404, "NotFound", 'pods "p" not found'), 'pods "p" not found (404 NotFound)'),
    (500, {}, "GET /x (500)"),
    (500, {"message": "<html>oops</html>"}, "<html>oops</html> (500)"),
    (409, status(409, "Conflict", "the object has been modified (rv 3)"),
     "the object has been modified (rv 3) (409 Conflict)"),
])
def test_messages_are_complete(code: int, body: dict[str, Any], message: str) -> None:
    assert str(errors.kube_error(code, body, "GET /x")) == message


# --- through the transport --------------------------------------------------------------------

class Answers:
    def __init__(self) -> None:
        self.next: list[web.Response] = []
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def handle(self, _: web.Request) -> web.Response:
        return self.next.pop(0)


@pytest_asyncio.fixture(loop_scope="session")
async def answers() -> AsyncIterator[Answers]:
    a = Answers()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", a.handle)
    a.runner = web.AppRunner(app, shutdown_timeout=0.1)
    await a.runner.setup()
    await web.TCPSite(a.runner, "127.0.0.1", 0).start()
    a.port = int(a.runner.addresses[0][1])
    try:
        yield a
    finally:
        await a.runner.cleanup()


@pytest.mark.asyncio(loop_scope="session")
async def test_the_transport_maps_status_bodies_and_bare_answers(answers: Answers) -> None:
    # transient_window=0: each answer as it came, not ridden out (test_transient_retry.py)
    async with kube_at(answers.port, request_timeout=2.0, transient_window=0) as kube:
        answers.next = [web.json_response(RUNTIME_NOT_SEEN, status=403),
                        web.Response(status=500, text="upstream broke"),
                        web.Response(status=503),
                        web.json_response(status(422, "Invalid", causes=[STREAM_CAUSE]),
                                          status=422)]
        with pytest.raises(errors.KubeWebhookDenied) as denied:
            await kube.create(TRAINJOB, {"metadata": {"name": "x"}}, "ns")
        assert runtime_not_seen(denied.value)
        with pytest.raises(errors.KubeError) as broke:
            await kube.get(POD, "p", "ns")
        assert (type(broke.value), broke.value.status) == (errors.KubeError, 500)
        assert str(broke.value) == "upstream broke (500)"
        with pytest.raises(errors.KubeError) as empty:
            await kube.get(POD, "p", "ns")
        assert str(empty.value) == "GET /api/v1/namespaces/ns/pods/p (503)"
        with pytest.raises(errors.KubeInvalid) as invalid:
            await kube.open_pod_log("p", "ns", stream="Stderr")
        assert invalid.value.names_field("stream")


# --- Start waits out Trainer's cache ----------------------------------------------------------

class DeniesFirst:
    """create() answers Trainer's not-yet-seen denial ``times`` times, then creates."""

    def __init__(self, times: int, denial: dict[str, Any] = RUNTIME_NOT_SEEN) -> None:
        self.times = times
        self.denial = denial
        self.creates = 0

    async def create(self, res: Any, body: dict[str, Any], namespace: str | None = None,
                     **_: Any) -> dict[str, Any]:
        self.creates += 1
        if self.creates <= self.times:
            raise errors.kube_error(int(self.denial["code"]), self.denial)
        return {**body, "metadata": {**body["metadata"], "uid": "u1"}}


@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.virtual_time
async def test_start_retries_while_trainer_has_not_seen_the_runtime() -> None:
    kube = DeniesFirst(2)
    created = await create_trainjob(kube, "ns", {"metadata": {"name": "tj"}})  # type: ignore[arg-type]
    assert (kube.creates, created["metadata"]["uid"]) == (3, "u1")


@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.virtual_time
async def test_start_rides_out_a_lag_of_a_minute_and_no_longer_than_its_patience() -> None:
    # After an API server restart a webhook's informer comes back only after client-go's
    # back-off: CI saw Kueue's webhook deny for longer than the 5.5 s Start once waited.
    loop = asyncio.get_running_loop()
    slow = DeniesFirst(40)  # 40 denials, at most 2 s apart: over a minute
    began = loop.time()
    await create_trainjob(slow, "ns", {"metadata": {"name": "tj"}}, patience=120)  # type: ignore[arg-type]
    assert slow.creates == 41
    assert loop.time() - began > 60
    endless = DeniesFirst(10**6)
    began = loop.time()
    with pytest.raises(errors.KubeWebhookDenied):
        await create_trainjob(endless, "ns", {"metadata": {"name": "tj"}}, patience=3)  # type: ignore[arg-type]
    # 0.1 + 0.2 + 0.4 + 0.8 s waited; the next 1.6 s would pass the 3 s
    assert (endless.creates, round(loop.time() - began, 1)) == (5, 1.5)


@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.virtual_time
async def test_start_stops_riding_out_the_lag_once_the_runtime_is_gone() -> None:
    kube = DeniesFirst(10**6)
    answers = iter([True, False])
    asked: list[bool] = []

    async def runtime_there() -> bool:
        asked.append(next(answers))
        return asked[-1]

    with pytest.raises(errors.KubeWebhookDenied):
        await create_trainjob(kube, "ns", {"metadata": {"name": "tj"}},  # type: ignore[arg-type]
                              runtime_there=runtime_there)
    assert (kube.creates, asked) == (2, [True, False])


@pytest.mark.asyncio(loop_scope="session")
async def test_start_does_not_retry_other_denials_or_rbac() -> None:
    other = DeniesFirst(1, status(403, "Forbidden", 'admission webhook "validator.trainjob.'
                                  'trainer.kubeflow.org" denied the request: spec.trainer: '
                                  "Invalid value: 3: too many"))
    with pytest.raises(errors.KubeWebhookDenied):
        await create_trainjob(other, "ns", {"metadata": {"name": "tj"}})  # type: ignore[arg-type]
    assert other.creates == 1
    rbac = DeniesFirst(1, status(403, "Forbidden", RBAC))
    with pytest.raises(errors.KubeForbidden):
        await create_trainjob(rbac, "ns", {"metadata": {"name": "tj"}})  # type: ignore[arg-type]
    assert rbac.creates == 1


# --- settings errors name the field -----------------------------------------------------------

@pytest.mark.asyncio(loop_scope="session")
async def test_a_missing_kubeconfig_names_the_field(tmp_path: Path) -> None:
    missing = tmp_path / "nope.kubeconfig"
    with pytest.raises(errors.SettingsError) as err:
        await Kube.connect(kubeconfig=str(missing))
    assert err.value.field == "cluster.kubeconfig"
    assert str(err.value).startswith(f"cluster.kubeconfig: no such file {missing}; ")
    broken = tmp_path / "broken.kubeconfig"
    broken.write_text("apiVersion: v1\nkind: Config\ncurrent-context: a\n"
                      "contexts: [{name: a, context: {cluster: c, user: u}}]\n")
    with pytest.raises(errors.SettingsError) as err:
        await Kube.connect(kubeconfig=str(broken))
    assert err.value.field == "cluster.kubeconfig"
    assert str(err.value).startswith(f"cluster.kubeconfig: cannot load {broken}: ")
    # Not YAML at all (issue 29: a 102-line YAML traceback): one line naming the field.
    not_yaml = tmp_path / "not-yaml.kubeconfig"
    not_yaml.write_text("clusters: [\n")
    with pytest.raises(errors.SettingsError) as err:
        await Kube.connect(kubeconfig=str(not_yaml))
    assert err.value.field == "cluster.kubeconfig"
    assert str(err.value).startswith(f"cluster.kubeconfig: cannot load {not_yaml}: ")
    assert "\n" not in str(err.value)


@pytest.mark.asyncio(loop_scope="session")
async def test_no_service_account_names_in_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(errors.SettingsError) as err:
        await Kube.connect(in_cluster=True)
    assert err.value.field == "cluster.inCluster"

"""dispatch-admission's MutatingWebhookConfiguration: written at start, and kept so.

The controller writes it when it starts (``--webhook-url`` for a host process,
``--webhook-service`` in a cluster), and the leader keeps it: it watches the object by name
and writes it again whenever it says something else (its ``caBundle`` wiped, a rule or its
match condition edited: every dispatch pod refused, or let through unjudged, until a
restart), or makes it again when it is deleted (:class:`ConfigurationKeeper`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from admission.keeper import Keeper
from admission.lease import LeaderElector
from dispatch_kubeflow.core import errors, names
from dispatch_kubeflow.kube import KubeAPI, Resource

log = logging.getLogger(__name__)

Obj = dict[str, Any]

PATH = "/mutate-pods"
_HAS_GATE = ("has({o}.spec.schedulingGates) && {o}.spec.schedulingGates.exists(g, "
             f"g.name == '{names.EXECUTION_GATE}')")
GATE_LIFT_OR_CREATE = (f"request.operation == 'CREATE' || ({_HAS_GATE.format(o='oldObject')} "
                       f"&& !({_HAS_GATE.format(o='object')}))")
"""The webhook's match condition (CEL): a pod's creation, or an update lifting our gate."""

MUTATING_WEBHOOK_CONFIGURATION = Resource(
    "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration", namespaced=False)


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """Where the API server calls the webhook: a URL, or a Service (namespace/name:port)."""

    url: str = ""
    service: str = ""

    def render(self, ca_bundle: str) -> Obj:
        if self.url:
            return {"url": self.url.rstrip("/") + PATH, "caBundle": ca_bundle}
        ns_name, _, port = self.service.partition(":")
        ns, _, name = ns_name.partition("/")
        return {"service": {"namespace": ns, "name": name, "path": PATH,
                            "port": int(port or 443)}, "caBundle": ca_bundle}


def webhook_configuration(client: ClientConfig, ca_bundle: str) -> Obj:
    """The MutatingWebhookConfiguration of docs/design.md."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": names.WEBHOOK_CONFIGURATION,
                     "labels": {"app.kubernetes.io/name": "dispatch-admission"}},
        "webhooks": [{
            "name": names.WEBHOOK_NAME,
            "admissionReviewVersions": ["v1"],
            "clientConfig": client.render(ca_bundle),
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"],
                       "operations": ["CREATE", "UPDATE"], "resources": ["pods"],
                       "scope": "Namespaced"}],
            # Only dispatch pods depend on this controller; every other pod never calls it.
            "objectSelector": {"matchExpressions": [
                {"key": names.JOB_ID_LABEL, "operator": "Exists"}]},
            # Of their updates only the lift of dispatch's gate: the Job controller's
            # removal of its finalizer, say, must not wait on this controller.
            "matchConditions": [{"name": "create-or-gate-lift",
                                 "expression": GATE_LIFT_OR_CREATE}],
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "timeoutSeconds": 10,
            "matchPolicy": "Equivalent",
            # Another webhook may add a container after us: run again so it gets identity.
            "reinvocationPolicy": "IfNeeded",
        }],
    }


async def ensure_configuration(kube: KubeAPI, client: ClientConfig, ca_bundle: str, *,
                               create: bool = True) -> bool:
    """Create (unless ``create`` is False) or update the configuration; leave it alone when
    it already says the same. False: it does not exist and was not to be created."""
    want = webhook_configuration(client, ca_bundle)
    res = MUTATING_WEBHOOK_CONFIGURATION
    for _ in range(5):
        cur = await kube.get_or_none(res, names.WEBHOOK_CONFIGURATION)
        if cur is None and not create:
            return False
        if cur is None:
            try:
                await kube.create(res, want)
                log.info("created MutatingWebhookConfiguration %s", names.WEBHOOK_CONFIGURATION)
                return True
            except errors.KubeConflict:
                continue
        if _same(cur, want):
            return True
        cur["webhooks"] = want["webhooks"]
        try:
            await kube.replace(res, cur)
            log.info("updated MutatingWebhookConfiguration %s", names.WEBHOOK_CONFIGURATION)
            return True
        except errors.KubeConflict:
            continue
    raise errors.KubeConflict("MutatingWebhookConfiguration kept changing under us", status=409)


def _same(cur: Obj, want: Obj) -> bool:
    cur_hooks = cur.get("webhooks") or []
    if len(cur_hooks) != 1:
        return False
    have, need = cur_hooks[0], want["webhooks"][0]
    return all(have.get(k) == v for k, v in need.items())


class ConfigurationKeeper(Keeper):
    """The leader writes the configuration again whenever the watch shows it different or
    gone, and when it starts leading (a follower only watches; :class:`~admission.keeper.Keeper`).

    Making it again needs ``create``, which RBAC cannot limit to one name; the policy
    ``dispatch-admission-controller-writes`` limits what the controller may create to this
    configuration, for pods, calling its own Service (deploy/admission). Where the create is
    refused (RBAC older than this controller) a deletion is an error in the log, naming the
    fix, until someone applies it again."""

    def __init__(self, kube: KubeAPI, elector: LeaderElector, client: ClientConfig,
                 ca_bundle: str) -> None:
        super().__init__(kube, elector, MUTATING_WEBHOOK_CONFIGURATION,
                         names.WEBHOOK_CONFIGURATION)
        self.want = webhook_configuration(client, ca_bundle)
        self.client = client
        self.ca_bundle = ca_bundle

    def use_ca(self, ca_bundle: str) -> None:
        """The replicas serve a certificate of another CA now (the shared TLS Secret
        changed): the configuration's caBundle must be that CA's."""
        if ca_bundle != self.ca_bundle:
            self.ca_bundle = ca_bundle
            self.want = webhook_configuration(self.client, ca_bundle)
            self.look()

    def observed(self, current: Obj | None) -> None:
        if current is None or not _same(current, self.want):
            self.look()

    def cannot_watch(self, exc: errors.KubeError) -> None:
        # RBAC older than this controller (no list and watch by name): it still runs, as
        # before the keeper, and says what it cannot do.
        log.error("cannot watch MutatingWebhookConfiguration %s (%s): it is written at "
                  "start only; apply deploy/admission's RBAC to keep it",
                  names.WEBHOOK_CONFIGURATION, exc)

    async def write(self) -> None:
        try:
            await ensure_configuration(self.kube, self.client, self.ca_bundle)
        except errors.KubeForbidden as exc:
            # Not allowed to make it (RBAC older than this controller): say what to do.
            log.error("MutatingWebhookConfiguration %s is gone and this controller may "
                      "not make it (%s): dispatch pods are made with no identity and no "
                      "gate until it is applied again (kubectl apply -f "
                      "deploy/admission/webhook.yaml, and deploy/admission's RBAC)",
                      names.WEBHOOK_CONFIGURATION, exc)

"""A worker agent's answer to a pod's "how long": what is left of the worker's permit.

In a worker cluster (MultiKueue, docs/multikueue-fence.md) every dispatch pod's fence asks
the agent how long its processes may run, before its workload starts and every length / 3
after (sooner as its share runs short). A pod's first answer comes only after a live read
in the manager shows that the pod's identity is the job's current admission and that
MultiKueue dispatched the job to this worker (core.permit.refusal): a remote TrainJob left
on a worker that was lost keeps making pods at its old A, and only the manager knows that
A has moved on. Later answers need no read: the pod was current when it started, and the
manager's gate approves no readmission while a live list shows the pod alive here, or
until this worker's permit is revoked, which ends every share.

Each answer is read from the permit after the reads, never before them: the permit held
when the answer is sent is the one it may speak for (the model's "answers later, from the
permit it holds then").

Who asks is learnt from the pod's own ServiceAccount token for the fence's audience
(admission.fence), by a TokenReview in the worker: a bound token names its pod (name and
UID), so a pod cannot ask for another, and nothing else of the pod's request is believed.
The pod is then read live: its TrainJob and its A are those the worker's webhook gave it.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from admission.fence import AUDIENCE
from admission.observability import parse_listen
from admission.permit_renewal import PermitRenewal
from admission.reads import pod_named
from dispatch_kubeflow.core import errors, names
from dispatch_kubeflow.core.execution import execution_of
from dispatch_kubeflow.core.objects import annotations_of, labels_of, meta
from dispatch_kubeflow.core.permit import refusal
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import TOKEN_REVIEW, TRAINJOB, WORKLOAD

log = logging.getLogger(__name__)

POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
POD_UID_EXTRA = "authentication.kubernetes.io/pod-uid"
SA_PREFIX = "system:serviceaccount:"


class NotAPod(Exception):
    """The question's token names no dispatch pod of this worker (the message says why)."""


@dataclass(frozen=True, slots=True)
class Asking:
    """The pod a question comes from, as its token says."""

    namespace: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class Answer:
    """Seconds the pod's processes may run, from before it asked (0: stop, or do not
    start), and why not when 0."""

    seconds: float
    reason: str = ""


REFUSALS_KEPT = 10_000
"""How many refused pods' last reasons are kept (to log each once)."""


class PermitAnswers:
    """The agent's answers for the worker ``cluster``: ``worker`` and ``manager`` are
    clients of the two API servers, ``permit`` this replica's renewal of the permit."""

    def __init__(self, manager: KubeAPI, worker: KubeAPI, permit: PermitRenewal,
                 cluster: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.manager, self.worker, self.permit = manager, worker, permit
        self.cluster = cluster
        self._clock = clock
        self._current: dict[str, float] = {}
        """Pods (by UID) confirmed current, and when each last asked (this clock)."""
        self._refused: dict[str, str] = {}
        """Pods (by UID) refused, and the last reason logged for each."""

    async def answer(self, namespace: str, pod_uid: str, trainjob: str,
                     admission: int) -> Answer:
        """The answer for the pod ``pod_uid`` of the TrainJob ``trainjob`` at admission
        count ``admission``. A manager that cannot be read gives 0 to a first question:
        the pod waits and asks again; it never starts on a guess."""
        now = self._clock()
        self._forget(now)
        if pod_uid in self._current:
            self._current[pod_uid] = now
            return self._left()
        if self.permit.left() <= 0:
            return self._no(pod_uid, f"a pod of TrainJob {namespace}/{trainjob}",
                            f"worker {self.cluster} holds no permit from the manager")
        try:
            why = await self._refusal(namespace, trainjob, admission)
        except errors.KubeError as exc:
            return self._no(pod_uid, f"a pod of TrainJob {namespace}/{trainjob}",
                            f"cannot read the job in the manager: {exc}")
        if why:
            return self._no(pod_uid, f"a pod of TrainJob {namespace}/{trainjob}", why)
        self._refused.pop(pod_uid, None)
        self._current[pod_uid] = now
        return self._left()

    def _no(self, pod_uid: str, who: str, why: str) -> Answer:
        """A refused first question, logged once a pod and reason: its fence asks again
        every second, and a pod that waits must say why somewhere."""
        if self._refused.get(pod_uid) != why:
            if len(self._refused) >= REFUSALS_KEPT:
                self._refused.clear()  # a bound, not a history: at worst one line again
            self._refused[pod_uid] = why
            log.warning("worker %s: %s may not start: %s", self.cluster, who, why)
        return Answer(0.0, why)

    async def question(self, token: str) -> Answer:
        """The answer to a question carrying ``token``; NotAPod when the token names no
        dispatch pod of this worker, the job's pod by that UID."""
        asking = await self.asking(token)
        try:
            pod = await pod_named(self.worker, asking.namespace, asking.name)
        except errors.KubeError as exc:
            return self._no(asking.uid, f"pod {asking.namespace}/{asking.name}",
                            f"cannot read the pod in worker {self.cluster}: {exc}")
        if pod is None or str(meta(pod).get("uid") or "") != asking.uid:
            raise NotAPod(f"pod {asking.namespace}/{asking.name} ({asking.uid}) is gone")
        labels = labels_of(pod)
        trainjob = labels.get(names.JOBSET_NAME_LABEL)
        admission = execution_of(pod).admissions
        if not labels.get(names.JOB_ID_LABEL) or not trainjob or admission is None:
            raise NotAPod(f"pod {asking.namespace}/{asking.name} is not a dispatch pod with "
                          "an identity from this worker's webhook")
        return await self.answer(asking.namespace, asking.uid, trainjob, admission)

    async def asking(self, token: str) -> Asking:
        """Who holds ``token``: a TokenReview in the worker, for the fence's audience."""
        review = await self.worker.create(TOKEN_REVIEW, {
            "apiVersion": TOKEN_REVIEW.api_version, "kind": TOKEN_REVIEW.kind,
            "metadata": {"name": "dispatch-fence"},
            "spec": {"token": token, "audiences": [AUDIENCE]}})
        status = review.get("status") or {}
        if not status.get("authenticated") or AUDIENCE not in (status.get("audiences") or []):
            raise NotAPod(f"the token is not one for {AUDIENCE}: "
                          f"{status.get('error') or 'not authenticated'}")
        user = status.get("user") or {}
        username = str(user.get("username") or "")
        extra = user.get("extra") or {}
        name = (extra.get(POD_NAME_EXTRA) or [""])[0]
        uid = (extra.get(POD_UID_EXTRA) or [""])[0]
        if not username.startswith(SA_PREFIX) or not name or not uid:
            raise NotAPod("the token is bound to no pod (a pod's projected token is)")
        namespace = username[len(SA_PREFIX):].partition(":")[0]
        return Asking(namespace, str(name), str(uid))

    def _left(self) -> Answer:
        left = self.permit.left()
        return Answer(left) if left > 0 else Answer(
            0.0, f"worker {self.cluster}'s permit ran out or was revoked")

    async def _refusal(self, namespace: str, trainjob: str, admission: int) -> str | None:
        remote = await self.worker.get_or_none(TRAINJOB, trainjob, namespace)
        if remote is None:
            return f"no TrainJob {namespace}/{trainjob} in worker {self.cluster}"
        workload = annotations_of(remote).get(names.PREBUILT_WORKLOAD)
        if not workload:
            return (f"TrainJob {namespace}/{trainjob} in worker {self.cluster} names no "
                    f"Workload in the manager ({names.PREBUILT_WORKLOAD}): not MultiKueue's")
        # Both live, after the pod asked; in either order (core.permit.refusal).
        wl = await self.manager.get_or_none(WORKLOAD, workload, namespace)
        tj = await self.manager.get_or_none(TRAINJOB, trainjob, namespace)
        return refusal(wl, tj, admission, self.cluster)

    def _forget(self, now: float) -> None:
        # A pod silent for a whole permit length has run out its share and stopped; if it
        # asks again it is confirmed again. Keeps the table to the pods alive.
        stale = [uid for uid, at in self._current.items() if now - at > self.permit.permit.length]
        for uid in stale:
            del self._current[uid]


def routes(answers: PermitAnswers) -> list[web.RouteDef]:
    """``POST /fence`` on the agent's server: the answer as ``{"seconds", "reason"}``, 403
    for a token that names no dispatch pod, 503 when the worker cannot be read."""
    async def fence(request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        if not auth.startswith("Bearer "):
            return web.json_response({"reason": "a pod's token is required"}, status=401)
        try:
            got = await answers.question(auth.removeprefix("Bearer ").strip())
        except NotAPod as exc:
            return web.json_response({"reason": str(exc)}, status=403)
        except errors.KubeError as exc:
            return web.json_response({"reason": f"cannot review the token: {exc}"},
                                     status=503)
        return web.json_response({"seconds": got.seconds, "reason": got.reason})
    return [web.post("/fence", fence)]


class Door:
    """The agent's server for the fences: ``POST /fence`` (:func:`routes`) over TLS."""

    def __init__(self, answers: PermitAnswers) -> None:
        self.answers = answers
        self._runner: web.AppRunner | None = None

    async def start(self, listen: str, serving: ssl.SSLContext) -> None:
        app = web.Application(client_max_size=64 * 1024)
        app.add_routes(routes(self.answers))
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        host, port = parse_listen(listen)
        # reuse_port: replicas on one host (the local cluster) share the address.
        await web.TCPSite(self._runner, host, port, ssl_context=serving,
                          reuse_port=True).start()
        log.info("worker %s: the fences' door on https://%s:%d/fence", self.answers.cluster,
                 host, port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

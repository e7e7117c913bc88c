"""kopf runs the controller: lifecycle, login, watches, indexes, event handlers.

Everything kopf does is registered here, on a registry of our own (never kopf's global one):

* ``on.login``: a ConnectionInfo from the same ``--kubeconfig``/``--context`` (or the pod's
  service account) that :class:`~dispatch_kubeflow.kube.Kube` was opened with, loaded by the
  same code (:mod:`dispatch_kubeflow.kube.kubeconfig`), so kopf's watches and Kube's requests
  authenticate alike.
  kopf calls it again when the API server answers 401 (a rotated token).
* ``on.startup`` / ``on.cleanup``: :meth:`Controller.start` and :meth:`Controller.stop`.
* ``@kopf.index`` for Workloads, dispatch's TrainJobs, pods (by job), our AdmissionChecks and
  ClusterQueues (:mod:`admission.intake`); ``@kopf.on.event`` for the same five, which
  notify the feeds.

kopf writes nothing into anyone's objects: there are only index and event handlers (no
on.create/update/delete/resume, no daemons or timers), so there is nothing to finalize and no
progress or diff-base to store. The persistence settings are set to inert values anyway, so a
future handler cannot quietly start annotating Kueue's or Trainer's objects: a finalizer name
no other operator uses (kopf removes its finalizer from any object that carries it but needs
it no more, so the default name, shared by every kopf operator, would be unsafe), and progress
and diff-base storages that keep nothing. kopf's own Event posting is off (our Events are
events.k8s.io/v1, posted through Kube), peering is off (``standalone``: the Lease elects).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kopf
from kopf._core.engines.peering import Identity  # kopf exports no public name for it

from admission import intake
from admission.app import Controller
from dispatch_kubeflow.core import errors, names
from dispatch_kubeflow.kube.credentials import Connection
from dispatch_kubeflow.kube.kubeconfig import load_connection
from dispatch_kubeflow.kube.resources import (
    ADMISSION_CHECK,
    CLUSTER_QUEUE,
    JOBSET,
    POD,
    TRAINJOB,
    WORKLOAD,
)

log = logging.getLogger(__name__)

UNUSED_FINALIZER = f"admission.{names.DOMAIN}/kopf-unused"
"""kopf's finalizer name; never added (no handler needs one)."""


# --- persistence that persists nothing --------------------------------------------------
class NoProgressStorage(kopf.ProgressStorage):
    """Handler progress kept nowhere: event and index handlers have none."""

    def fetch(self, *, key: Any, body: Any) -> None:
        return None

    def store(self, *, key: Any, record: Any, body: Any, patch: Any) -> None:
        return None

    def purge(self, *, key: Any, body: Any, patch: Any) -> None:
        return None

    def touch(self, *, body: Any, patch: Any, value: str | None) -> None:
        return None

    def clear(self, *, essence: Any) -> Any:
        return essence


class NoDiffBaseStorage(kopf.DiffBaseStorage):
    """No last-handled configuration: there are no change handlers to diff for."""

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        # kopf builds this on every event of every watch, a deep copy of the whole object,
        # to diff for change handlers; there are none, so nothing is built (a fifth of the
        # controller's CPU at N = 200, py-spy, docs/scale.md).
        return None

    def fetch(self, *, body: Any) -> None:
        return None

    def store(self, *, body: Any, patch: Any, essence: Any) -> None:
        return None


def settings() -> kopf.OperatorSettings:
    s = kopf.OperatorSettings()
    s.persistence.finalizer = UNUSED_FINALIZER
    s.persistence.progress_storage = NoProgressStorage()
    s.persistence.diffbase_storage = NoDiffBaseStorage()
    s.posting.enabled = False  # Events are ours, events.k8s.io/v1 through Kube
    s.peering.standalone = True
    s.peering.clusterwide = True
    # Server-side selection: only pods of JobSets are sent to us, not every pod.
    s.watching.label_selectors[POD.plural] = names.JOBSET_NAME_LABEL
    # ...and only dispatch's TrainJobs (Start labels them): what a decision reads A from.
    s.watching.label_selectors[TRAINJOB.plural] = names.JOB_ID_LABEL
    # ...and their JobSets (the runtime copy labels the JobSet template): which JobSet an
    # approval names (core.execution).
    s.watching.label_selectors[JOBSET.plural] = names.JOB_ID_LABEL
    # ...and only the Workloads Kueue made for jobs (not other teams' bare Workloads); the
    # index keeps the TrainJobs' ones, trimmed (intake.trim_workload).
    s.watching.label_selectors[WORKLOAD.plural] = names.KUEUE_JOB_UID_LABEL
    s.watching.server_timeout = 300  # the API server ends each watch; kopf resumes it
    s.watching.client_timeout = 330
    # kopf retries failed handlers; our handlers do not fail (they only enqueue).
    s.networking.request_timeout = 30
    # While the API server is away (a restart: a single server takes itself out of the
    # `kubernetes` Service's endpoints) connections hang or are refused. kopf's defaults
    # (each attempt up to the request timeout, then 1+1+2+3+5+8+13+21 s between them) kept a
    # watch stale for minutes after the server came back, and a replica taking the Lease
    # then decided from caches that missed new Workloads. Fail connections fast and retry
    # briefly; kopf restarts a watch whose retries ran out at once.
    s.networking.connect_timeout = 5
    s.networking.error_backoffs = (0.5, 1, 2, 3, 5)
    return s


# --- login ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Login:
    """Where the credentials come from: the CLI's flags."""

    kubeconfig: str | None = None
    context: str | None = None
    in_cluster: bool = False

    async def connection(self) -> Connection:
        try:
            return await load_connection(kubeconfig=self.kubeconfig, context=self.context,
                                         in_cluster=self.in_cluster)
        except errors.SettingsError as exc:
            raise kopf.LoginError(f"cannot load credentials: {exc}") from exc

    async def connection_info(self) -> kopf.ConnectionInfo:
        return await connection_info(await self.connection())


async def connection_info(conn: Connection) -> kopf.ConnectionInfo:
    """kopf's ConnectionInfo for a loaded Connection: the same server, TLS material and
    credentials as Kube's requests. A token with an expiry (an exec plugin's) makes kopf
    log in again when it expires; kopf also logs in again on a 401 (a rotated token)."""
    header = await conn.authorization()
    scheme, token = header.split(" ", 1) if header else (None, None)
    return kopf.ConnectionInfo(
        server=conn.host,
        ca_data=conn.ca,
        insecure=conn.insecure or None,
        scheme=scheme,
        token=token,
        expiration=conn.token.expires if conn.token is not None else None,
        certificate_data=conn.certificate,
        private_key_data=conn.key,
        proxy_url=conn.proxy,
    )


# --- the registry ------------------------------------------------------------------------------
def _selector(res: Any) -> tuple[str, str, str]:
    return res.group, res.version, res.plural


def registry(controller: Controller, login: Login) -> kopf.OperatorRegistry:
    """All of kopf's handlers, bound to ``controller``."""
    reg = kopf.OperatorRegistry()
    feeds = controller.feeds
    # Handlers are coroutines: kopf runs plain functions in a thread, and ours touch the loop.

    @kopf.on.login(id="login", registry=reg)
    async def login_from_flags(**_: Any) -> kopf.ConnectionInfo:
        return await login.connection_info()

    @kopf.on.startup(id="start", registry=reg, backoff=2.0)
    async def start(**kwargs: Any) -> None:
        try:
            await controller.start({n: kwargs[n] for n in intake.Caches.INDEXES})
        except errors.SettingsError as exc:
            controller.fatal = exc
            raise kopf.PermanentError(str(exc)) from exc

    @kopf.on.cleanup(id="stop", registry=reg)
    async def stop(**_: Any) -> None:
        await controller.stop()

    # --- indexes: kopf keeps what these return, per object, and drops it on DELETED -------
    @kopf.index(*_selector(WORKLOAD), id="workloads", registry=reg)
    async def workloads(body: kopf.Body, **_: Any) -> dict[intake.Key, intake.Obj]:
        return intake.index_workload(body)

    @kopf.index(*_selector(WORKLOAD), id="workloads_by_job", registry=reg)
    async def workloads_by_job(body: kopf.Body, **_: Any) -> dict[intake.Key, str]:
        return intake.index_workload_by_job(body)

    @kopf.index(*_selector(TRAINJOB), id="trainjobs",
                labels={names.JOB_ID_LABEL: kopf.PRESENT}, registry=reg)
    async def trainjobs(body: kopf.Body, **_: Any) -> dict[intake.Key, intake.Obj]:
        return intake.index_trainjob(body)

    @kopf.index(*_selector(POD), id="pods_by_job",
                labels={names.JOBSET_NAME_LABEL: kopf.PRESENT}, registry=reg)
    async def pods_by_job(body: kopf.Body, **_: Any) -> dict[intake.Key, str]:
        return intake.index_pod_by_job(body)

    @kopf.index(*_selector(JOBSET), id="jobsets",
                labels={names.JOB_ID_LABEL: kopf.PRESENT}, registry=reg)
    async def jobsets(body: kopf.Body, **_: Any) -> dict[intake.Key, str]:
        return intake.index_jobset(body)

    @kopf.index(*_selector(ADMISSION_CHECK), id="admission_checks", registry=reg)
    async def admission_checks(body: kopf.Body, **_: Any) -> dict[str, intake.Obj]:
        return intake.index_admission_check(body)

    @kopf.index(*_selector(CLUSTER_QUEUE), id="cluster_queues", registry=reg)
    async def cluster_queues(body: kopf.Body, **_: Any) -> dict[str, frozenset[str]]:
        return intake.index_cluster_queue(body)

    # --- events: kopf calls these after the indexes took the event in ----------------------
    def feed(res: Any, **filters: Any) -> None:
        target = feeds[res.plural]

        @kopf.on.event(*_selector(res), registry=reg, id=f"feed-{res.plural}", **filters)
        async def on_event(type: str | None, event: Mapping[str, Any], **_: Any) -> None:
            target.notify(type, dict(event["object"]))

    feed(WORKLOAD)
    feed(TRAINJOB, labels={names.JOB_ID_LABEL: kopf.PRESENT})
    feed(POD, labels={names.JOBSET_NAME_LABEL: kopf.PRESENT})
    feed(JOBSET, labels={names.JOB_ID_LABEL: kopf.PRESENT})
    feed(ADMISSION_CHECK)
    feed(CLUSTER_QUEUE)
    return reg


async def run(controller: Controller, login: Login) -> None:
    """Run the operator until SIGTERM/SIGINT (kopf's handlers) or ``controller.stop_flag``."""
    await kopf.operator(
        registry=registry(controller, login),
        settings=settings(),
        standalone=True,
        clusterwide=True,
        # Given, so that kopf does not derive one from the user name: the image runs as
        # uid 65532, which has no passwd entry, and getpass.getuser() raises there.
        identity=Identity(controller.config.identity) if controller.config.identity else None,
        stop_flag=controller.stop_flag,
    )

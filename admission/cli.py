"""``dispatch-admission``: flags, then run the controller under kopf.

Exit codes: 0 clean shutdown, 1 a part of the controller (or kopf) crashed, 2 bad flags or a
kubeconfig / TLS file that cannot be read (the message says which).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import socket
import sys
import uuid
from collections.abc import Sequence
from urllib.parse import urlparse

from admission import faults, tls
from admission.app import Config, Controller
from admission.observability import parse_listen, setup_logging
from admission.worker_agent import WorkerConfig
from dispatch_kubeflow.core import errors, names
from dispatch_kubeflow.kube import Kube, KubeAPI

log = logging.getLogger("admission")


def _listen(value: str) -> str:
    try:
        parse_listen(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def _seconds(value: str) -> float:
    try:
        v = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {value!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value!r}")
    return v


def _workers(value: str) -> int:
    try:
        v = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if not 1 <= v <= 64:
        raise argparse.ArgumentTypeError(f"must be 1 to 64, got {value!r}")
    return v


def _url(value: str) -> str:
    u = urlparse(value)
    if u.scheme != "https" or not u.hostname:
        raise argparse.ArgumentTypeError(f"expected https://host[:port], got {value!r}")
    return value


def _service(value: str) -> str:
    ns_name, _, port = value.partition(":")
    ns, _, name = ns_name.partition("/")
    if not ns or not name or (port and not port.isdigit()):
        raise argparse.ArgumentTypeError(f"expected NAMESPACE/NAME[:PORT], got {value!r}")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dispatch-admission",
        description="dispatch's admission controller: readmission gate (Kueue AdmissionCheck "
                    f"{names.CONTROLLER_NAME}), execution identity webhook, hold expiry.")
    a = p.add_argument
    a("--kubeconfig", help="kubeconfig file (default: in-cluster service account if running "
                           "in a pod, else $KUBECONFIG or ~/.kube/config)")
    a("--context", help="kubeconfig context (default: the current one)")
    a("--namespace", default=names.CONTROLLER_NAMESPACE,
      help="namespace of the Lease and the TLS secret (default %(default)s)")
    a("--lease-name", default=names.LEASE_NAME, help="Lease name (default %(default)s)")
    a("--identity", default="", help="holder identity (default: <hostname>_<random>)")
    a("--lease-duration", type=_seconds, default=15.0, help="seconds (default %(default)s)")
    a("--renew-deadline", type=_seconds, default=10.0, help="seconds (default %(default)s)")
    a("--retry-period", type=_seconds, default=2.0, help="seconds (default %(default)s)")
    a("--webhook-listen", type=_listen, default="0.0.0.0:9443",
      help="host:port the HTTPS webhook listens on (default %(default)s)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--webhook-url", type=_url, default=None,
                   help="manage the MutatingWebhookConfiguration, pointing the API server at "
                        "this URL (a host process, e.g. https://127.0.0.1:9443)")
    g.add_argument("--webhook-service", type=_service, default=None,
                   help="manage the MutatingWebhookConfiguration, pointing at this Service "
                        "NAMESPACE/NAME[:PORT] (in a cluster)")
    a("--tls-cert", default="", help="serving certificate (PEM); with --tls-key")
    a("--tls-key", default="", help="its private key (PEM)")
    a("--tls-ca", default="", help="CA bundle to publish as caBundle (default: --tls-cert)")
    a("--tls-secret", default="",
      help="Secret in --namespace holding (or, created on first use, to hold) the serving "
           "certificate that every replica shares")
    a("--client-ca", default="",
      help="CA bundle (PEM) that signs the API server's client certificate for admission "
           "webhooks (its AdmissionConfiguration's kubeConfigFile): the webhook then "
           "requires that certificate and refuses every other caller in the TLS handshake "
           "(docs/install-admission.md, 'Mutual TLS')")
    a("--metrics-listen", type=_listen, default=None, help="host:port for /metrics (off if unset)")
    a("--health-listen", type=_listen, default=None,
      help="host:port for /healthz and /readyz (off if unset)")
    a("--workers", type=_workers, default=8,
      help="Workloads judged at once, and pods' starts asked for at once (default "
           "%(default)s); one Workload is never judged by two at a time, and each decision "
           "still rests on a live LIST of its job's pods")
    a("--worker-kubeconfigs", default="", metavar="DIR",
      help="in a MultiKueue manager cluster: a directory (a mounted Secret) with one "
           "kubeconfig per worker cluster, each file named as its MultiKueueCluster; the "
           "gate then proves a job's previous execution gone in every worker, and the leader "
           "times, revokes and grants the workers' permits (docs/multikueue-fence.md)")
    a("--worker-of", default="", metavar="CLUSTER",
      help="in a MultiKueue worker cluster: its MultiKueueCluster name in the manager; every "
           "replica then renews the worker's permit there (--manager-kubeconfig), answers "
           "its pods' fences (--agent-listen), and the webhook fences the pods of the jobs "
           "MultiKueue puts here (docs/multikueue-fence.md)")
    a("--manager-kubeconfig", default="", metavar="PATH",
      help="with --worker-of: a kubeconfig of the manager cluster (its user may get and "
           "update the permit Lease and get Workloads)")
    a("--agent-listen", type=_listen, default="0.0.0.0:9444",
      help="with --worker-of: host:port of the fences' door (default %(default)s)")
    a("--agent-url", default="",
      help="with --worker-of: the door's URL as pods reach it (default: the "
           "--webhook-service's name at the --agent-listen port)")
    a("--agent-server-name", default="",
      help="with --worker-of: the name the fences check the door's certificate against, "
           "when --agent-url names an address (a cluster without DNS: the Service's "
           "ClusterIP); default: the URL's host")
    a("--fence-image", default="",
      help="with --worker-of: the fence's image (default: this replica's own, read from its "
           "pod)")
    a("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    # Test-only crash and stall points (admission.faults); hidden from --help.
    a("--fault", action="append", default=[], choices=sorted(faults.KNOWN),
      help=argparse.SUPPRESS)
    return p


def config_from(ns: argparse.Namespace) -> Config:
    identity = ns.identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    return Config(
        namespace=ns.namespace, lease_name=ns.lease_name, identity=identity,
        lease_duration=ns.lease_duration, renew_deadline=ns.renew_deadline,
        retry_period=ns.retry_period, webhook_listen=ns.webhook_listen,
        webhook_url=ns.webhook_url or "", webhook_service=ns.webhook_service or "",
        tls_cert=ns.tls_cert, tls_key=ns.tls_key, tls_ca=ns.tls_ca, tls_secret=ns.tls_secret,
        client_ca=ns.client_ca, metrics_listen=ns.metrics_listen or "",
        health_listen=ns.health_listen or "",
        workers=ns.workers, faults=tuple(ns.fault), worker_of=_worker_of(ns))


def _worker_of(ns: argparse.Namespace) -> WorkerConfig | None:
    if not ns.worker_of:
        return None
    url = ns.agent_url
    if not url:
        svc, _, _ = (ns.webhook_service or "").partition(":")
        namespace, _, name = svc.partition("/")
        port = parse_listen(ns.agent_listen)[1]
        url = f"https://{name}.{namespace}.svc:{port}"
    return WorkerConfig(cluster=ns.worker_of, agent_url=url, agent_listen=ns.agent_listen,
                        agent_server_name=ns.agent_server_name, fence_image=ns.fence_image)


def validate(p: argparse.ArgumentParser, ns: argparse.Namespace) -> None:
    """Checks argparse cannot express; p.error exits 2 with the message."""
    if bool(ns.tls_cert) != bool(ns.tls_key):
        p.error("--tls-cert and --tls-key go together")
    if ns.tls_cert and ns.tls_secret:
        p.error("--tls-secret and --tls-cert/--tls-key are alternatives; give one")
    if not ns.retry_period < ns.renew_deadline < ns.lease_duration:
        p.error("need --retry-period < --renew-deadline < --lease-duration "
                f"(got {ns.retry_period} < {ns.renew_deadline} < {ns.lease_duration})")
    if ns.client_ca:
        try:
            tls.client_ca(ns.client_ca)
        except errors.SettingsError as exc:
            p.error(str(exc))
    if ns.kubeconfig and not os.access(ns.kubeconfig, os.R_OK):
        p.error(f"--kubeconfig: cannot read {ns.kubeconfig}")
    if ns.worker_of and not ns.manager_kubeconfig:
        p.error("--worker-of needs --manager-kubeconfig (a kubeconfig of the manager cluster)")
    if ns.manager_kubeconfig and not ns.worker_of:
        p.error("--manager-kubeconfig goes with --worker-of")
    if ns.worker_of and ns.worker_kubeconfigs:
        p.error("--worker-of (a worker) and --worker-kubeconfigs (a manager) are alternatives")
    if ns.worker_of and not (ns.agent_url or ns.webhook_service):
        p.error("--worker-of needs --agent-url (how pods reach the fences' door) or "
                "--webhook-service to derive it from")
    if ns.worker_kubeconfigs:
        try:
            worker_kubeconfigs(ns.worker_kubeconfigs)
        except errors.SettingsError as exc:
            p.error(str(exc))


def worker_kubeconfigs(directory: str) -> dict[str, str]:
    """The kubeconfig file of each worker cluster by name, from ``--worker-kubeconfigs``: the
    directory's regular files (a mounted Secret's keys; its ``..data`` links and hidden
    files are not workers). A SettingsError when there is none: a manager that knows no
    worker would hold every MultiKueue job back."""
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError as exc:
        raise errors.SettingsError(f"--worker-kubeconfigs: {exc}",
                                   field="--worker-kubeconfigs") from exc
    found = {e.name: e.path for e in entries
             if not e.name.startswith(".") and e.is_file()}
    if not found:
        raise errors.SettingsError(
            f"--worker-kubeconfigs: {directory} holds no kubeconfig (one file per worker "
            "cluster, named as its MultiKueueCluster)", field="--worker-kubeconfigs")
    return found


async def _main(ns: argparse.Namespace) -> int:
    in_cluster = not ns.kubeconfig and bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    try:
        kube = await Kube.connect(kubeconfig=ns.kubeconfig, context=ns.context,
                                  in_cluster=in_cluster)
    except errors.SettingsError as exc:
        print(f"dispatch-admission: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # e.g. a YAML error the transport does not map
        where = ns.kubeconfig or "the default kubeconfig"
        print(f"dispatch-admission: cannot load {where}: {exc}", file=sys.stderr)
        return 2
    # kopf is imported here, where the controller runs, not by every importer of the CLI.
    from admission import operator

    async with kube, contextlib.AsyncExitStack() as stack:
        workers: dict[str, KubeAPI] | None = None
        if ns.worker_kubeconfigs:
            workers = {}
            for name, path in worker_kubeconfigs(ns.worker_kubeconfigs).items():
                try:
                    workers[name] = await stack.enter_async_context(
                        await Kube.connect(kubeconfig=path))
                except errors.SettingsError as exc:
                    print(f"dispatch-admission: worker {name}: {exc}", file=sys.stderr)
                    return 2
        manager: KubeAPI | None = None
        if ns.worker_of:
            try:
                manager = await stack.enter_async_context(
                    await Kube.connect(kubeconfig=ns.manager_kubeconfig))
            except errors.SettingsError as exc:
                print(f"dispatch-admission: the manager: {exc}", file=sys.stderr)
                return 2
        controller = Controller(kube, config_from(ns), workers, manager)
        login = operator.Login(kubeconfig=ns.kubeconfig, context=ns.context,
                               in_cluster=in_cluster)
        try:
            await operator.run(controller, login)
        except Exception:
            if controller.fatal is None:
                log.exception("the operator failed")
                return 1
        finally:
            await controller.stop()  # kopf skips its cleanup if stopped while starting
        if controller.fatal is not None:
            print(f"dispatch-admission: {controller.fatal}", file=sys.stderr)
            return 2
        return 1 if controller.crashed else 0


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    ns = p.parse_args(argv)
    validate(p, ns)
    setup_logging(ns.log_level)
    return asyncio.run(_main(ns))

"""A MultiKueue worker's side of the permit, put together (docs/multikueue-fence.md): every
replica renews the worker's permit in the manager (admission.permit_renewal), answers the
fences of its pods on a door of its own (admission.permit_answers, TLS on its own port),
deletes the pods that wait on a revoked permit (admission.permit_clearing), and gives its
pod webhook what it adds to the pods of MultiKueue's jobs
(admission.pod_identity.WorkerSide: the permit's check and the fence's placement).
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass

from admission.fence import Placement
from admission.permit_answers import Door, PermitAnswers
from admission.permit_clearing import PermitClearing
from admission.permit_renewal import PermitRenewal
from admission.pod_identity import WorkerSide
from admission.reads import pod_named
from dispatch_kubeflow.core import errors
from dispatch_kubeflow.core.objects import meta
from dispatch_kubeflow.core.permit import DEFAULT_LENGTH
from dispatch_kubeflow.kube import KubeAPI

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """``--worker-of`` and its companions."""

    cluster: str
    """This worker's MultiKueueCluster name in the manager (its permit is
    ``dispatch-worker-<cluster>`` there)."""
    agent_url: str
    """How this worker's pods reach the agent's door (its Service), e.g.
    ``https://dispatch-admission.dispatch-system.svc:9444``."""
    agent_listen: str = "0.0.0.0:9444"
    agent_server_name: str = ""
    """The name the door's certificate is checked against, when ``agent_url`` names an
    address (a cluster without DNS); "": the URL's host."""
    fence_image: str = ""
    """The fence's image: one holding this package ("" : this replica's own image, read
    from its pod)."""
    length: float = DEFAULT_LENGTH
    """The permit's length, the same in the manager (its wait is computed from it)."""


class WorkerAgent:
    """One replica's part of a worker: ``manager`` and ``worker`` are clients of the two API
    servers, ``identity`` this replica (its pod's name in a cluster)."""

    def __init__(self, manager: KubeAPI, worker: KubeAPI, config: WorkerConfig,
                 identity: str) -> None:
        self.config = config
        self.worker = worker
        self.renewal = PermitRenewal(manager, config.cluster, identity, length=config.length)
        self.door = Door(PermitAnswers(manager, worker, self.renewal, config.cluster))
        self.clearing = PermitClearing(worker, self.renewal)

    def holds_permit(self) -> bool:
        return self.renewal.left() > 0

    async def side(self, namespace: str, identity: str, ca: bytes) -> WorkerSide:
        """What the webhook adds to MultiKueue's pods; ``ca``: the PEM that signs the door's
        certificate (the webhook's own)."""
        image = self.config.fence_image or await own_image(self.worker, namespace, identity)
        return WorkerSide(self.config.cluster, self.holds_permit,
                          Placement(image=image, agent=self.config.agent_url,
                                    length=self.config.length, ca=ca.decode(),
                                    server_name=self.config.agent_server_name))

    async def start(self, serving: ssl.SSLContext) -> None:
        """Open the door for the fences (TLS with the webhook's certificate)."""
        await self.door.start(self.config.agent_listen, serving)

    async def stop(self) -> None:
        await self.door.stop()


async def own_image(kube: KubeAPI, namespace: str, pod_name: str) -> str:
    """This replica's image, read from its own pod: the fence runs the same package, so it
    is always the version of the webhook that put it in. A SettingsError when the pod cannot
    be read (a replica outside the cluster must be given ``--fence-image``)."""
    try:
        pod = await pod_named(kube, namespace, pod_name)
    except errors.KubeError as exc:
        raise errors.SettingsError(f"--fence-image: cannot read this replica's pod "
                                   f"{namespace}/{pod_name}: {exc}",
                                   field="--fence-image") from exc
    containers = ((pod or {}).get("spec") or {}).get("containers") or []
    if not containers or not containers[0].get("image"):
        raise errors.SettingsError(
            f"--fence-image: no pod {namespace}/{pod_name} to read the image from (a replica "
            "outside the cluster must be given --fence-image)", field="--fence-image")
    log.info("the fence runs this replica's image %s (pod %s)", containers[0]["image"],
             meta(pod).get("name"))
    return str(containers[0]["image"])
